"""tasks_orphaned: which ids a sweep may queue again, read from the real task table."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from django_tasks.base import TaskResultStatus
from django_tasks_db.models import DBTaskResult

from moderation.core.taskqueue import SWEEP_BATCH, WORKER_LOST, tasks_orphaned
from moderation.delivery.sending import delivery_send
from moderation.review.starts import items_start_task

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_variant]


def _claimed(task, first, *, seconds_ago: float, status=TaskResultStatus.RUNNING) -> None:
    task.enqueue(first)
    DBTaskResult.objects.filter(task_path=task.module_path, args_kwargs__args__0=first).update(
        status=status, started_at=timezone.now() - timedelta(seconds=seconds_ago))


def test_only_ids_no_waiting_or_live_task_will_run_are_orphaned():
    since = timezone.now() - timedelta(seconds=30)
    delivery_send.enqueue(1)  # waiting in the queue
    _claimed(delivery_send, 2, seconds_ago=5)  # a live worker's
    _claimed(delivery_send, 3, seconds_ago=60)  # a worker that died
    _claimed(delivery_send, 4, seconds_ago=5, status=TaskResultStatus.SUCCESSFUL)  # done: its work is the row's to show
    _claimed(items_start_task, 5, seconds_ago=5)  # another task's: says nothing of delivery_send's
    assert tasks_orphaned(ids=[1, 2, 3, 4, 5, 6], task=delivery_send, started_since=since) == [3, 4, 5, 6]


def test_a_chunked_task_covers_each_of_its_ids():
    since = timezone.now() - timedelta(seconds=30)
    items_start_task.enqueue([1, 2])
    _claimed(items_start_task, [3, 4], seconds_ago=5)
    _claimed(items_start_task, [5, 6], seconds_ago=60)
    assert tasks_orphaned(ids=range(1, 8), task=items_start_task, started_since=since) == [5, 6, 7]


def test_a_sweep_takes_at_most_a_batch_in_the_order_given():
    ids = list(range(SWEEP_BATCH + 7, 0, -1))
    assert tasks_orphaned(ids=iter(ids), task=delivery_send, started_since=timezone.now()) == ids[:SWEEP_BATCH]


def test_a_dead_workers_task_row_is_marked_failed_by_the_sweep_and_no_other_row_is():
    since = timezone.now() - timedelta(seconds=30)
    _claimed(delivery_send, 1, seconds_ago=60)  # a worker that died
    _claimed(delivery_send, 2, seconds_ago=5)  # a live worker's
    _claimed(items_start_task, 3, seconds_ago=60)  # another task's: its own sweep marks it
    tasks_orphaned(ids=[1, 2], task=delivery_send, started_since=since)
    statuses = dict(DBTaskResult.objects.values_list("args_kwargs__args__0", "status"))
    assert statuses == {1: TaskResultStatus.FAILED, 2: TaskResultStatus.RUNNING, 3: TaskResultStatus.RUNNING}
    dead = DBTaskResult.objects.get(args_kwargs__args__0=1)
    assert dead.exception_class_path == WORKER_LOST and dead.finished_at is not None and "never finished" in dead.traceback
