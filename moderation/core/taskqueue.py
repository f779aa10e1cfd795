"""The task queue (django-tasks-db): what it says about our tasks, and lanes that wake when a task is queued.

Sweeps: a worker killed mid-task leaves its task RUNNING for good, so the sweeps queue that
work again and mark the dead row FAILED; work whose task is still queued, or running under a
live worker, is left alone (``tasks_orphaned``).

Lanes: a ``QueueLane`` waits on ``TaskWake`` instead of sleeping its ``--interval``. On
PostgreSQL a trigger on the task table NOTIFYs ``TASKS_CHANNEL`` at the enqueuing commit, naming
the task's queue, and one listening connection per process wakes the waiting lanes that serve
that queue (a burst of one queue's tasks costs the other lanes nothing); a delayed task's
``run_after`` times the wait, and the interval stays as the fallback. On SQLite a lane polls
at its interval. Measurements: contributors/results.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Collection, Iterable
from datetime import datetime
from itertools import islice
from typing import Any

from django.db import InterfaceError, close_old_connections, connection
from django.db.models import Min, Q
from django.db.utils import OperationalError
from django.utils import timezone
from django_tasks.base import TaskResultStatus

from moderation.core.checkpointer import checkpointer_target
from moderation.core.tasksdb import (
    DBTaskResult,
    Worker,
    exclusive_transaction,
    get_date_max,
    is_locked_database_exception,
    worker_tasks_run,
)

logger = logging.getLogger(__name__)

# At most this many ids per sweep: a long outage's backlog is queued again over several sweeps.
SWEEP_BATCH = 500
# What a task row presumed dead says it failed with (no exception class exists: its process is gone).
WORKER_LOST = "WorkerLost"
# What the task table's insert trigger notifies (migration 0025); the payload is the task's queue.
TASKS_CHANNEL = "reviewqueue_tasks"
# Seconds a listener that lost its connection waits before listening again (and a stopped one takes to notice).
LISTEN_RETRY_SECONDS = 1.0
# A connection the database ended: what a worker loop lives through (never a query's own error, which is the task's).
CONNECTION_ERRORS = (OperationalError, InterfaceError)
# Seconds between a worker's tries to reach the database again, and how long it tries to record a task's finish.
RECONNECT_SECONDS = 1.0
RECONNECT_FOR = 120.0


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
        task_path=task.module_path,
        status=TaskResultStatus.RUNNING,
        started_at__lt=started_before,
    ).update(
        status=TaskResultStatus.FAILED,
        finished_at=timezone.now(),
        exception_class_path=WORKER_LOST,
        traceback=f"{WORKER_LOST}: its worker claimed it and never finished; a sweep queued its work again.",
    )


def _tasks_will_run(*, task: Any, started_since: datetime) -> Iterable[Any]:
    return (
        DBTaskResult.objects.filter(task_path=task.module_path)
        .filter(Q(status=TaskResultStatus.READY) | Q(status=TaskResultStatus.RUNNING, started_at__gte=started_since))
        .values_list("args_kwargs__args__0", flat=True)
    )


class TaskWake:
    """Wakes waiting lanes when a task of their queues is queued (PostgreSQL's LISTEN); on SQLite, never (they poll).

    A lane reads ``count(...)`` for its queues before it looks for a task and, finding none,
    calls ``wait(seen, ...)`` with the same queues: a task queued in between has already moved
    the count, so the lane does not sleep through it. A wake-up naming no queue (the listener
    starting, after which anything may have been missed) concerns every lane.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.generation = 0  # every wake-up
        self._unnamed = 0  # wake-ups naming no queue
        self._named: Counter[str] = Counter()  # wake-ups per queue named
        self.last_payload = ""
        self._listener: threading.Thread | None = None

    @property
    def listening(self) -> bool:
        """Whether queued tasks wake the lanes (PostgreSQL); else they must poll."""
        return self._listener is not None

    def start(self) -> TaskWake:
        if connection.vendor == "postgresql":
            self._listener = threading.Thread(target=self._listen, args=(checkpointer_target(),), name="task-wake", daemon=True)
            self._listener.start()
        return self

    def stop(self) -> None:
        """Stop listening and close the connection (within ``LISTEN_RETRY_SECONDS``)."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.join()

    def count(self, *, queues: Collection[str] | None = None, excluded: Collection[str] = ()) -> int:
        """The wake-ups so far that concern a lane of ``queues`` (None: every queue but ``excluded``)."""
        if queues is None:
            return self.generation - sum(self._named[q] for q in excluded)
        return self._unnamed + sum(self._named[q] for q in queues)

    def wait(self, seen: int, *, timeout: float, queues: Collection[str] | None = None, excluded: Collection[str] = ()) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self.count(queues=queues, excluded=excluded) != seen, timeout=timeout)

    def _bump(self, payload: str = "") -> None:
        with self._changed:
            self.generation += 1
            if payload:
                self._named[payload] += 1
            else:
                self._unnamed += 1
            self.last_payload = payload  # the queue named by the last notification
            self._changed.notify_all()

    def _listen(self, conninfo: str) -> None:
        import psycopg

        me = threading.current_thread()
        while self._listener is me:
            try:
                with psycopg.connect(conninfo, autocommit=True) as conn:
                    conn.execute(f"LISTEN {TASKS_CHANNEL}")
                    self._bump()  # whatever was queued while this connection was not listening
                    while self._listener is me:
                        for notification in conn.notifies(timeout=LISTEN_RETRY_SECONDS):
                            self._bump(notification.payload)
            except psycopg.Error as exc:
                logger.warning("task wake-ups lost (%s); lanes poll until listening again", exc)
                time.sleep(LISTEN_RETRY_SECONDS)


class SteadyWorker(Worker):
    """django-tasks-db's worker loop, living through the end of its database connection.

    The package's loop lets a connection error out of the claim (its transaction ends
    outside the loop's ``try``), and the process, or the lane's thread, ends with it: a
    backend terminated (``pg_terminate_backend``, a failover) took every worker down. Here
    the loop starts again on a new connection, once the database answers.

    The task running then may have lost its connection too: the task fails as it would on
    any database error (its work is the sweeps' to queue again, ``tasks_orphaned``). But its
    row's finish (successful or failed) is written on a new connection, not left RUNNING
    for the sweeps' grace to presume it dead.
    """

    def run(self) -> None:
        while True:
            try:
                return self.loop()
            except CONNECTION_ERRORS as exc:
                if not self.running:
                    return None
                logger.warning(
                    "worker %s lost its database connection (%s); starting again in %s s",
                    self.worker_id,
                    str(exc).strip(),
                    RECONNECT_SECONDS,
                )
                connection.close()
                time.sleep(RECONNECT_SECONDS)

    def loop(self) -> None:
        super().run()

    def run_task(self, db_task_result: DBTaskResult[Any, Any]) -> None:
        # This row's save only: the package saves it at the task's end, from inside run_task.
        db_task_result.save = _saved_on_a_live_connection(db_task_result.save)  # type: ignore[method-assign]
        super().run_task(db_task_result)


def _saved_on_a_live_connection(save: Any) -> Any:
    """``save``, tried again on a new connection while the old one is gone, for ``RECONNECT_FOR`` seconds.

    Only for a write outside any transaction (a task row's finish): closing the connection
    would otherwise end the caller's transaction under it.
    """

    def steady(*args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + RECONNECT_FOR
        while True:
            try:
                return save(*args, **kwargs)
            except CONNECTION_ERRORS:
                if connection.in_atomic_block or time.monotonic() >= deadline:
                    raise
                connection.close()
                time.sleep(RECONNECT_SECONDS)

    return steady


class QueueLane(SteadyWorker):
    """django-tasks-db's worker loop on some queues, claiming as it does, that waits on ``wake`` when idle.

    ``interval`` is the longest an idle lane waits: the poll of last resort. A lane whose wake
    listens (PostgreSQL) also wakes when the first delayed task of its queues (a retry's
    ``run_after``) comes due: no notification tells that moment, and its poll may be long.
    """

    def __init__(self, *, wake: TaskWake, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.wake = wake

    def loop(self) -> None:
        logger.info("Starting lane worker_id=%s queues=%s", self.worker_id, ",".join(self.queue_names))
        scope = self._scope()
        while self.running and (self.max_tasks is None or worker_tasks_run(self) < self.max_tasks):
            seen = self.wake.count(**scope)
            close_old_connections()
            task_result = self._claim()
            if task_result is not None:
                self.run_task(task_result)
            elif self.batch:
                return
            else:
                timeout = self._idle_wait()
                close_old_connections()
                self.wake.wait(seen, timeout=timeout, **scope)

    def _scope(self) -> dict[str, Any]:
        """The queues whose wake-ups concern this lane, as ``TaskWake.count`` takes them."""
        if self.process_all_queues:
            return {"queues": None, "excluded": frozenset(self.excluded_queue_names)}
        return {"queues": frozenset(self.queue_names)}

    def _tasks(self) -> Any:
        """This lane's queues' tasks, as the package's worker filters them (``*``: every queue but the excluded)."""
        tasks = DBTaskResult.objects.filter(backend_name=self.backend_name)
        if not self.process_all_queues:
            tasks = tasks.filter(queue_name__in=self.queue_names)
        if self.excluded_queue_names:
            tasks = tasks.exclude(queue_name__in=self.excluded_queue_names)
        return tasks

    def _idle_wait(self) -> float:
        """Seconds to wait for a wake-up: ``interval``, or less when a delayed task comes due sooner."""
        if not self.wake.listening:
            return self.interval
        now = timezone.now()
        due = (
            self._tasks()
            .filter(status=TaskResultStatus.READY, run_after__gt=now, run_after__lt=get_date_max())
            .aggregate(first=Min("run_after"))["first"]
        )
        return self.interval if due is None else min(self.interval, (due - now).total_seconds())

    def _claim(self) -> DBTaskResult[Any, Any] | None:
        tasks = self._tasks().ready()
        try:
            with exclusive_transaction(tasks.db):
                task_result: DBTaskResult[Any, Any] | None = tasks.get_locked()
                if task_result is not None:
                    task_result.claim(self.worker_id)  # so no other worker runs it
                return task_result
        except OperationalError as exc:
            if is_locked_database_exception(exc):  # SQLite's write lock: it is free again soon
                return None
            raise
