"""Whether anything applies the decisions: task workers' heartbeats and the oldest decision not yet applied.

A decision is recorded and answered by a server; its graph is run on by a task worker
(``manage.py db_worker``). With no worker running nothing says so on its own: the item
page says "applying…" and ``/healthz`` (which checks what a server needs) stays ok. So
every worker writes a heartbeat row (``WorkerBeat``) every ``WORKER_HEARTBEAT_INTERVAL``
seconds, and the servers read, with the age of the oldest decided ask not yet applied:
``/readyz``, the staff banner, the item page's wait and the ``reviewqueue_workers_alive``
and ``reviewqueue_unapplied_oldest_seconds`` series (``moderation.records.metrics``).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Min
from django.utils import timezone

from moderation.items.models import ApplyState, AskStatus, QueueItem, ReviewAsk
from moderation.records.models import WorkerBeat

_SETTLED = [status for status in AskStatus if status != AskStatus.PENDING]
# A killed worker's row (never deleted by it) is kept this long, then pruned by the others' beats.
GONE_KEPT = timedelta(days=1)


@dataclass(frozen=True)
class WorkerSeen:
    worker_id: str
    host: str
    pid: int
    metrics_port: int
    started_at: datetime
    beat_age_seconds: float
    alive: bool


@dataclass(frozen=True)
class WorkState:
    """The workers seen in the last ``GONE_KEPT``, newest beat first, and the oldest unapplied decision's age."""

    workers: list[WorkerSeen]
    unapplied_oldest_seconds: float | None

    @property
    def alive(self) -> int:
        return sum(worker.alive for worker in self.workers)

    @property
    def last_beat_seconds(self) -> float | None:
        return self.workers[0].beat_age_seconds if self.workers else None

    @property
    def workers_ok(self) -> bool:
        return self.alive > 0

    @property
    def unapplied_ok(self) -> bool:
        return self.unapplied_oldest_seconds is None or self.unapplied_oldest_seconds <= settings.READY_UNAPPLIED_MAX


@dataclass(frozen=True)
class WorkWait:
    """What staff are told when decisions wait for a worker: none alive (and since how long: None, never
    heard from), or the oldest decision waiting longer than ``APPLY_WAIT_NOTICE`` (whole minutes)."""

    no_worker: bool
    silent_minutes: int | None
    oldest_minutes: int | None


def work_wait(*, state: WorkState) -> WorkWait | None:
    """Whether staff should be told that decisions wait for a worker (None: all is well)."""
    oldest = state.unapplied_oldest_seconds
    late = oldest is not None and oldest >= settings.APPLY_WAIT_NOTICE
    if state.workers_ok and not late:
        return None
    silent = state.last_beat_seconds
    return WorkWait(
        no_worker=not state.workers_ok,
        silent_minutes=None if silent is None else wait_minutes(silent),
        oldest_minutes=wait_minutes(oldest) if late else None,
    )


def wait_minutes(seconds: float) -> int:
    """Whole minutes waited, at least 1 (what a notice shown only past a grace says)."""
    return max(1, int(seconds // 60))


def worker_beat(*, worker_id: str, metrics_port: int, started_at: datetime) -> None:
    """Record that this process's worker ``worker_id`` is alive now; prune the rows of workers long gone.

    One row per worker id, written in autocommit (no lock held): a second worker given the
    same id (two units with one ``--worker-id``) shares the row and is counted once.
    """
    now = timezone.now()
    WorkerBeat.objects.update_or_create(
        worker_id=worker_id,
        defaults={
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "metrics_port": metrics_port,
            "started_at": started_at,
            "beat_at": now,
        },
    )
    WorkerBeat.objects.filter(beat_at__lt=now - GONE_KEPT).delete()


def worker_gone(*, worker_id: str) -> None:
    """A worker stopping cleanly: not alive from now on (a killed one is presumed gone after the grace)."""
    WorkerBeat.objects.filter(worker_id=worker_id, pid=os.getpid()).delete()


def unapplied_oldest(*, now: datetime) -> datetime | None:
    """When the oldest decision the worker has not yet applied was made (None: every decision applied).

    Items whose graph failed are left out: they wait for ``recover``, not for a worker. The
    statuses are named (not "not pending") so the seek is on ``ask_unapplied_idx``
    (status, applied_at): the unapplied few, not every decided ask.
    """
    return (
        ReviewAsk.objects.filter(status__in=_SETTLED, applied_at__isnull=True, decided_at__lte=now)
        .exclude(item__apply_state=ApplyState.FAILED)
        .aggregate(first=Min("decided_at"))["first"]
    )


def item_apply_wait(*, item: QueueItem) -> float | None:
    """Seconds the oldest of ``item``'s decisions has waited to be applied (None: the item is not applying)."""
    if item.apply_state != ApplyState.APPLYING:
        return None
    first = ReviewAsk.objects.filter(status__in=_SETTLED, item=item, applied_at__isnull=True).aggregate(first=Min("decided_at"))[
        "first"
    ]
    return max(0.0, (timezone.now() - first).total_seconds()) if first else None


def work_state() -> WorkState:
    """The workers' heartbeats and the oldest unapplied decision (two small queries; for a page, a probe, a scrape)."""
    now = timezone.now()
    grace = settings.WORKER_HEARTBEAT_GRACE
    beats = WorkerBeat.objects.filter(beat_at__gte=now - GONE_KEPT).order_by("-beat_at")
    workers = [
        WorkerSeen(
            worker_id=beat.worker_id,
            host=beat.host,
            pid=beat.pid,
            metrics_port=beat.metrics_port,
            started_at=beat.started_at,
            beat_age_seconds=max(0.0, (now - beat.beat_at).total_seconds()),
            alive=(now - beat.beat_at).total_seconds() <= grace,
        )
        for beat in beats
    ]
    oldest = unapplied_oldest(now=now)
    return WorkState(workers=workers, unapplied_oldest_seconds=max(0.0, (now - oldest).total_seconds()) if oldest else None)
