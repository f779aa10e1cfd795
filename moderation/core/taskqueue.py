"""What the task queue (django-tasks-db) says about our tasks, for the sweeps that re-queue lost work.

A worker killed mid-task leaves its task RUNNING for good (the database backend does not
reclaim it), so the sweeps queue such work again. Work whose task is still waiting in
the queue, or running under a live worker, must not be: during a backlog longer than the
sweep's grace, every sweep of every worker would otherwise queue it once more.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Q
from django_tasks.base import TaskResultStatus
from django_tasks_db.models import DBTaskResult


def tasks_will_run(*, task: Any, started_since: datetime) -> list[Any]:
    """The first argument of every ``task`` still going to run: waiting in the queue, or
    claimed by a worker since ``started_since`` (older claims are presumed dead)."""
    return list(
        DBTaskResult.objects.filter(task_path=task.module_path)
        .filter(Q(status=TaskResultStatus.READY) | Q(status=TaskResultStatus.RUNNING, started_at__gte=started_since))
        .values_list("args_kwargs__args__0", flat=True)
    )
