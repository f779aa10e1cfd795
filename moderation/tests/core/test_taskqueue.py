"""moderation.core.taskqueue: which ids a sweep may queue again (the real task table), and lanes woken by a queued task."""

from __future__ import annotations

import threading
from datetime import timedelta
from unittest import mock

import pytest
from django.db import DatabaseError, InterfaceError, connection, transaction
from django.utils import timezone
from django_tasks.base import TaskResultStatus
from django_tasks_db.models import DBTaskResult

from moderation.core.taskqueue import (
    SWEEP_BATCH,
    TASKS_CHANNEL,
    WORKER_LOST,
    QueueLane,
    SteadyWorker,
    TaskWake,
    tasks_orphaned,
)
from moderation.delivery.sending import DELIVERY_QUEUE, delivery_send
from moderation.lab.waits import progress_wait
from moderation.review.starts import items_start_task

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_variant]


def _claimed(task, first, *, seconds_ago: float, status=TaskResultStatus.RUNNING) -> None:
    task.enqueue(first)
    DBTaskResult.objects.filter(task_path=task.module_path, args_kwargs__args__0=first).update(
        status=status, started_at=timezone.now() - timedelta(seconds=seconds_ago)
    )


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


# --- lanes: woken when a task is queued -------------------------------------------------


def _delivery_lane(wake: TaskWake, *, worker_id: str, batch: bool = False) -> QueueLane:
    """A lane of the delivery queue; one that runs for good polls hourly (only a wake-up makes it look sooner)."""
    return QueueLane(
        wake=wake,
        queue_names=[DELIVERY_QUEUE],
        excluded_queue_names=[],
        batch=batch,
        interval=0 if batch else 3600,
        backend_name="default",
        startup_delay=False,
        max_tasks=None,
        worker_id=worker_id,
    )


def _listening(wake: TaskWake) -> int:
    """The generation once the listener is up (it moves once as it starts listening)."""
    return progress_wait(lambda: wake.generation, done=lambda g: g > 0, stall=60)


@pytest.mark.django_db(transaction=True)
def test_a_committed_task_wakes_the_lanes_and_a_rolled_back_one_does_not():
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no notifications: its lanes poll")
    wake = TaskWake().start()
    try:
        seen = _listening(wake)
        with transaction.atomic():
            delivery_send.enqueue(1)
            transaction.set_rollback(True)  # negative control: never queued, so nobody is woken
        with connection.cursor() as cursor:  # a marker after it: notifications arrive in commit order
            cursor.execute(f"NOTIFY {TASKS_CHANNEL}, 'marker'")
        progress_wait(lambda: wake.last_payload, done=lambda p: p == "marker", stall=60)
        assert wake.generation == seen + 1  # the marker's wake-up alone
        seen = wake.generation
        delivery_send.enqueue(2)  # committed (autocommit)
        progress_wait(lambda: wake.last_payload, done=lambda p: p == DELIVERY_QUEUE, stall=60)
        assert wake.generation == seen + 1
    finally:
        wake.stop()  # its connection closed: the test database can be dropped


@pytest.mark.django_db(transaction=True)
def test_a_lane_waiting_sleeps_through_no_queued_task_and_wakes_for_one():
    """The waiting itself: a bump before the wait is not slept through; with none, the wait lasts its timeout."""
    wake = TaskWake()
    seen = wake.generation
    wake._bump()
    wake.wait(seen, timeout=3600)  # returns at once: the generation moved after it was read
    woken = threading.Event()

    def lane() -> None:
        wake.wait(wake.generation, timeout=3600)
        woken.set()

    thread = threading.Thread(target=lane)
    thread.start()
    assert not woken.wait(0.5)  # negative control: nothing queued, it waits
    wake._bump()
    thread.join()
    assert woken.is_set()


def test_a_wake_up_concerns_the_lanes_of_its_queue_and_one_naming_none_concerns_every_lane():
    wake = TaskWake()
    deliveries, applies = {"queues": {DELIVERY_QUEUE}}, {"queues": {"applies"}}
    every_but_deliveries = {"queues": None, "excluded": {DELIVERY_QUEUE}}
    scopes = (deliveries, applies, every_but_deliveries, {})

    def counts() -> list[int]:
        return [wake.count(**scope) for scope in scopes]

    before = counts()
    wake._bump(DELIVERY_QUEUE)
    assert [a - b for a, b in zip(counts(), before, strict=True)] == [1, 0, 0, 1]
    wake._bump("deployments")
    assert [a - b for a, b in zip(counts(), before, strict=True)] == [1, 0, 1, 2]
    wake._bump()  # the listener (re)started: anything may have been missed
    assert [a - b for a, b in zip(counts(), before, strict=True)] == [2, 1, 2, 3]


def test_a_lane_waiting_sleeps_through_another_queues_wake_up_and_wakes_for_its_own():
    wake = TaskWake()
    woken = threading.Event()

    def lane() -> None:
        wake.wait(wake.count(queues={DELIVERY_QUEUE}), timeout=3600, queues={DELIVERY_QUEUE})
        woken.set()

    thread = threading.Thread(target=lane)
    thread.start()
    for _ in range(50):
        wake._bump("applies")
    assert not woken.wait(0.5)  # negative control of the wait itself: another queue's tasks
    wake._bump(DELIVERY_QUEUE)
    thread.join()
    assert woken.is_set()


@pytest.mark.django_db(transaction=True)
def test_a_lane_runs_only_its_queues_tasks_each_once():
    delivery_send.enqueue(1)
    items_start_task.enqueue([2])
    lane = _delivery_lane(TaskWake(), worker_id="lane-test", batch=True)
    with mock.patch("moderation.delivery.sending.delivery_attempt") as sent:
        lane.run()
    sent.assert_called_once_with(delivery_id=1)
    statuses = dict(DBTaskResult.objects.values_list("task_path", "status"))
    assert statuses == {
        delivery_send.module_path: TaskResultStatus.SUCCESSFUL,
        items_start_task.module_path: TaskResultStatus.READY,
    }


def _worker_through_a_terminated_connection(worker_class) -> tuple[dict[int, str], BaseException | None]:
    """A worker loop in a thread runs delivery 1, whose connection is terminated (``pg_terminate_backend``)
    while it runs, and then, the idle loop's connections terminated too, delivery 2.

    Returns the two task rows' statuses once settled (or stuck) and what the loop raised.
    """
    running, terminated = threading.Event(), threading.Event()

    def attempt(*, delivery_id: int) -> None:
        if delivery_id == 1:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                running.pid = cursor.fetchone()[0]
            running.set()
            assert terminated.wait(30)

    worker = worker_class(
        queue_names=[DELIVERY_QUEUE],
        excluded_queue_names=[],
        batch=False,
        interval=0.05,
        backend_name="default",
        startup_delay=False,
        max_tasks=None,
        worker_id="steady-test",
    )
    raised: list[BaseException | None] = [None]

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:  # noqa: BLE001 - the negative control's loop ends here
            raised[0] = exc
        finally:
            connection.close()

    def statuses() -> dict[int, str]:
        return dict(DBTaskResult.objects.values_list("args_kwargs__args__0", "status"))

    with mock.patch("moderation.delivery.sending.delivery_attempt", attempt):
        delivery_send.enqueue(1)
        thread = threading.Thread(target=run, name="steady-worker")
        thread.start()
        try:
            assert running.wait(30)
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(%s)", [running.pid])
            terminated.set()
            progress_wait(statuses, done=lambda s: s[1] != TaskResultStatus.RUNNING or not thread.is_alive(), stall=15)
            with connection.cursor() as cursor:  # every other backend of this database: the idle pool's too
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            delivery_send.enqueue(2)
            # A reconnect waits on the database (shared with the pass's other tests): a minute of no change is stuck.
            settled = progress_wait(
                statuses,
                stall=60,
                done=lambda s: s.get(2) in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED) or not thread.is_alive(),
            )
        finally:
            worker.running = False
            terminated.set()
            thread.join(30)
    return settled, raised[0]


postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="pg_terminate_backend")


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_steady_worker_lives_through_its_connection_terminated_and_records_the_task_it_ran():
    settled, raised = _worker_through_a_terminated_connection(SteadyWorker)
    assert raised is None
    # Delivery 1 finished after its connection was gone: its finish is written on a new one, not left RUNNING.
    assert settled == {1: TaskResultStatus.SUCCESSFUL, 2: TaskResultStatus.SUCCESSFUL}


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_negative_control_the_packages_worker_loop_ends_with_its_connection_and_leaves_its_task_running():
    from django_tasks_db.management.commands.db_worker import Worker

    settled, raised = _worker_through_a_terminated_connection(Worker)
    assert isinstance(raised, DatabaseError | InterfaceError), raised
    assert settled == {1: TaskResultStatus.RUNNING, 2: TaskResultStatus.READY}


# --- idle loops: asleep until a task is queued or a delayed one comes due ----------------


def _lane_in_thread(lane) -> threading.Thread:
    def run() -> None:
        try:
            lane.run()
        finally:
            connection.close()

    thread = threading.Thread(target=run, name="idle-lane")
    thread.start()
    return thread


def _statuses() -> dict[int, str]:
    return dict(DBTaskResult.objects.values_list("args_kwargs__args__0", "status"))


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_an_idle_lane_polling_hourly_runs_a_queued_task_and_a_delayed_one_when_it_comes_due():
    """Its poll an hour long: only the notification (a queued task) and the delayed task's own time wake it."""
    wake = TaskWake().start()
    lane = _delivery_lane(wake, worker_id="idle-lane")
    try:
        _listening(wake)
        with mock.patch("moderation.delivery.sending.delivery_attempt"):
            thread = _lane_in_thread(lane)
            delivery_send.using(run_after=timezone.now() + timedelta(seconds=2)).enqueue(1)  # a retry's delay
            delivery_send.enqueue(2)
            settled = progress_wait(_statuses, stall=60, done=lambda s: set(s.values()) == {TaskResultStatus.SUCCESSFUL})
        assert settled == {1: TaskResultStatus.SUCCESSFUL, 2: TaskResultStatus.SUCCESSFUL}
    finally:
        lane.running = False
        wake._bump()
        thread.join(30)
        wake.stop()


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_the_workers_main_loop_on_postgresql_sleeps_until_a_task_is_queued(settings):
    """``db_worker``'s loop for every queue, its poll (``WORKER_IDLE_POLL``) and ``--interval`` an hour: woken by NOTIFY."""
    from moderation.management.commands.db_worker import _main_loop

    settings.WORKER_IDLE_POLL = 3600
    wake = TaskWake().start()
    options = {
        "queue_name": "*",
        "exclude_queues": "",
        "batch": False,
        "backend_name": "default",
        "interval": 3600,
        "startup_delay": False,
        "max_tasks": None,
        "worker_id": "main-loop",
    }
    loop = _main_loop(options, wake)
    try:
        _listening(wake)
        with mock.patch("moderation.delivery.sending.delivery_attempt"):
            idle = threading.Event()
            waits = wake.wait
            wake.wait = lambda seen, **kwargs: (idle.set(), waits(seen, **kwargs))
            thread = _lane_in_thread(loop)
            assert idle.wait(60)  # it polled, found nothing, and sleeps: only a notification can wake it now
            delivery_send.enqueue(1)
            settled = progress_wait(_statuses, stall=60, done=lambda s: s.get(1) == TaskResultStatus.SUCCESSFUL)
        assert settled == {1: TaskResultStatus.SUCCESSFUL}
    finally:
        loop.running = False
        wake._bump()
        thread.join(30)
        wake.stop()


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_burst_of_one_queues_tasks_makes_the_other_queues_lanes_look_for_no_task():
    """A lane polling hourly on PostgreSQL looks for a task only when one of its queue is queued: 20 tasks of
    another queue (a burst of deployment webhooks, say) cost it nothing, one of its own wakes it."""
    wake = TaskWake().start()
    lane = _delivery_lane(wake, worker_id="quiet-lane")
    claims = mock.patch.object(lane, "_claim", wraps=lane._claim).start()
    try:
        _listening(wake)
        with mock.patch("moderation.delivery.sending.delivery_attempt"):
            thread = _lane_in_thread(lane)
            progress_wait(lambda: claims.call_count, done=lambda n: n >= 1, stall=60)  # its first look: nothing
            looked = claims.call_count
            for n in range(20):
                items_start_task.enqueue([n])
            delivery_send.enqueue(1)  # after them: notifications arrive in commit order
            delivered = DBTaskResult.objects.filter(task_path=delivery_send.module_path, status=TaskResultStatus.SUCCESSFUL)
            progress_wait(delivered.exists, stall=60, done=bool)
        assert wake.count() - wake.count(queues={DELIVERY_QUEUE}) >= 20  # every start was notified
        # The delivery's look, and the one after it that found nothing more: none for the starts.
        assert claims.call_count - looked <= 2
    finally:
        lane.running = False
        wake._bump()
        thread.join(30)
        wake.stop()
        mock.patch.stopall()
