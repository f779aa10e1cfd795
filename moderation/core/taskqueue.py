"""What the task queue (django-tasks-db) says about our tasks, for the sweeps that re-queue lost work.

A worker killed mid-task leaves its task RUNNING for good (the database backend does not
reclaim it), so the sweeps queue such work again, and mark the dead row FAILED. Work whose task is still waiting in
the queue, or running under a live worker, must not be: during a backlog longer than the
sweep's grace, every sweep of every worker would otherwise queue it once more.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from itertools import islice
from typing import Any

from django.db.models import Q
from django.utils import timezone
from django_tasks.base import TaskResultStatus
from django_tasks_db.models import DBTaskResult

# At most this many ids per sweep: a long outage's backlog is queued again over several sweeps.
SWEEP_BATCH = 500
# What a task row presumed dead says it failed with (no exception class exists: its process is gone).
WORKER_LOST = "WorkerLost"


def tasks_orphaned(*, ids: Iterable[int], task: Any, started_since: datetime) -> list[int]:
    """The first ``SWEEP_BATCH`` of ``ids`` that no ``task`` is still going to run.

    A task will run if it waits in the queue or a worker claimed it since ``started_since``
    (older claims are presumed dead). Its first argument is the id it works on, or a list
    of them (a chunk).
    """
    will_run: set[int] = set()
    for first in _tasks_will_run(task=task, started_since=started_since):
        will_run.update(first if isinstance(first, list) else [first])
    _tasks_abandoned_mark(task=task, started_before=started_since)
    return list(islice((i for i in ids if i not in will_run), SWEEP_BATCH))


def _tasks_abandoned_mark(*, task: Any, started_before: datetime) -> int:
    """Close the task rows of workers presumed dead (claimed before ``started_before``, never finished).

    Their work is queued again by the sweep that calls this, so the rows would otherwise
    say RUNNING for good; FAILED, with why, tells an operator reading the task table the
    truth. A worker that was only slow and finishes later overwrites the mark.
    """
    return DBTaskResult.objects.filter(
        task_path=task.module_path, status=TaskResultStatus.RUNNING, started_at__lt=started_before,
    ).update(
        status=TaskResultStatus.FAILED, finished_at=timezone.now(), exception_class_path=WORKER_LOST,
        traceback=f"{WORKER_LOST}: its worker claimed it and never finished; a sweep queued its work again.",
    )


def _tasks_will_run(*, task: Any, started_since: datetime) -> Iterable[Any]:
    return (
        DBTaskResult.objects.filter(task_path=task.module_path)
        .filter(Q(status=TaskResultStatus.READY) | Q(status=TaskResultStatus.RUNNING, started_at__gte=started_since))
        .values_list("args_kwargs__args__0", flat=True)
    )
