"""What the task queue (django-tasks-db) says about our tasks, for the sweeps that re-queue lost work.

A worker killed mid-task leaves its task RUNNING for good (the database backend does not
reclaim it), so the sweeps queue such work again. Work whose task is still waiting in
the queue, or running under a live worker, must not be: during a backlog longer than the
sweep's grace, every sweep of every worker would otherwise queue it once more.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from itertools import islice
from typing import Any

from django.db.models import Q
from django_tasks.base import TaskResultStatus
from django_tasks_db.models import DBTaskResult

# At most this many ids per sweep: a long outage's backlog is queued again over several sweeps.
SWEEP_BATCH = 500


def tasks_orphaned(*, ids: Iterable[int], task: Any, started_since: datetime) -> list[int]:
    """The first ``SWEEP_BATCH`` of ``ids`` that no ``task`` is still going to run.

    A task will run if it waits in the queue or a worker claimed it since ``started_since``
    (older claims are presumed dead). Its first argument is the id it works on, or a list
    of them (a chunk).
    """
    will_run: set[int] = set()
    for first in _tasks_will_run(task=task, started_since=started_since):
        will_run.update(first if isinstance(first, list) else [first])
    return list(islice((i for i in ids if i not in will_run), SWEEP_BATCH))


def _tasks_will_run(*, task: Any, started_since: datetime) -> Iterable[Any]:
    return (
        DBTaskResult.objects.filter(task_path=task.module_path)
        .filter(Q(status=TaskResultStatus.READY) | Q(status=TaskResultStatus.RUNNING, started_at__gte=started_since))
        .values_list("args_kwargs__args__0", flat=True)
    )
