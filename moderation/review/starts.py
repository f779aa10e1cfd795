"""Items accepted now and started by the task worker, so a batch is taken at the database's pace, not the graph's.

A batch submitted with ``start: "queued"`` (``moderation.review.submissions.items_accept``)
writes its rows as STARTING, with their start tasks (``START_CHUNK`` items each), in one
transaction. Workers start them as ``items.item_create`` would; the item enters the queue
(PENDING, asks, ``item.created``) when its graph asks. A STARTING item cannot be decided
(``decisions.ItemStarting``).

Locking contract of ``item_start``, in order: the thread's resume lock
(``moderation.core.resumelock``) around the graph's run, so a second start of the thread
joins the first's state; then, with the graph done, the item's row lock for the transaction
that records its asks, re-checking that the item still waits to start. Nothing runs the
graph under the row lock.

``starts_sweep`` queues again each item STARTING for longer than ``APPLY_SWEEP_GRACE`` that no
task will start. A graph that raises at its start makes the item REFUSED (final); any other
failure leaves it NEEDS_ATTENTION for ``manage.py recover``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_tasks import task

from moderation.core.faults import fault_point
from moderation.core.resumelock import thread_resume_lock
from moderation.core.taskqueue import tasks_orphaned
from moderation.delivery.outbox import item_applied_record
from moderation.graphs.outcome import AppliedState, applied_result_build
from moderation.graphs.registry import graph_loaded, graph_names, graph_not_loaded_text
from moderation.graphs.runtime import GraphStartRefused, graph_state_read
from moderation.items.models import ItemStatus, QueueItem
from moderation.records import events
from moderation.records.counts import counts_apply, item_counted
from moderation.review.itemrow import item_row_lock
from moderation.review.items import (
    item_graph_run,
    item_queue_entered,
    item_started_fill,
)

logger = logging.getLogger(__name__)

START_QUEUE = "start"
# Below the default (applies, deliveries): a backlog of starts never delays a decision's resume.
START_PRIORITY = -10
ERROR_MAX_CHARS = 500


# Items per start task. The task queue's own cost (claim, record, poll) is about what one
# start costs (measured on PostgreSQL: 110 starts/s called directly, 54/s one task each),
# so each task starts a few; several workers still share a batch of 100 between them.
START_CHUNK = 10


class StartOutcome(StrEnum):
    """What a start did, or why it ran nothing."""

    GONE = "gone"
    STARTED_EARLIER = "started_earlier"  # not (or no longer) waiting to start: a duplicated task, a sweep
    GRAPH_NOT_LOADED = "graph_not_loaded"  # left STARTING for a worker that runs the graph
    LEFT_AS_IT_IS = "left_as_it_is"  # its graph ran and waits for no review: an operator's
    STARTED = "started"  # in the queue with ``asks`` asks
    FAILED = "failed"  # NEEDS_ATTENTION (``error``)
    REFUSED = "refused"  # REFUSED by its graph (``error``)


@dataclass(frozen=True)
class StartResult:
    outcome: StartOutcome
    asks: int = 0
    error: str = ""


# Filled in from the result's fields.
_START_WORDS = {
    StartOutcome.GONE: "gone",
    StartOutcome.STARTED_EARLIER: "started earlier",
    StartOutcome.GRAPH_NOT_LOADED: "left to start later: graph not loaded",
    StartOutcome.LEFT_AS_IT_IS: "left as it is: its graph ran and waits for no review",
    StartOutcome.STARTED: "started: {asks} ask(s)",
    StartOutcome.FAILED: "failed: {error}",
    StartOutcome.REFUSED: "refused: {error}",
}


def start_text(result: StartResult) -> str:
    """What a start did, in words: for the task's record and ``manage.py recover``."""
    return _START_WORDS[result.outcome].format_map(vars(result))


@task(queue_name=START_QUEUE, priority=START_PRIORITY)
def items_start_task(item_ids: list[int]) -> list[str]:
    return [start_text(item_start(item_id=item_id)) for item_id in item_ids]


def items_start_enqueue(*, item_ids: list[int]) -> None:
    """Queue the start of the items, ``START_CHUNK`` to a task, in the caller's transaction
    (committed with the rows, or not at all).

    With ``REVIEWQUEUE_APPLY_INLINE`` (no worker runs) they start in this process after the commit.
    """
    if settings.REVIEWQUEUE_APPLY_INLINE:
        events.after_commit(lambda: [item_start(item_id=item_id) for item_id in item_ids])
        return
    for chunk in _chunks(item_ids):
        items_start_task.enqueue(chunk)


def _chunks(item_ids: list[int]) -> list[list[int]]:
    return [item_ids[first : first + START_CHUNK] for first in range(0, len(item_ids), START_CHUNK)]


def item_start(*, item_id: int, retry_failed: bool = False) -> StartResult:
    """Run the item's graph to its first ask and put it in the queue; return what happened.

    Only a STARTING item is started; ``retry_failed`` (``recover``) also starts one
    whose graph failed to start before (NEEDS_ATTENTION, no ask ever recorded, nothing
    saved on its thread).
    """
    item = QueueItem.objects.filter(pk=item_id).first()
    if item is None:
        return StartResult(StartOutcome.GONE)
    if not item_startable(item=item, retry_failed=retry_failed):
        return StartResult(StartOutcome.STARTED_EARLIER)
    if not graph_loaded(name=item.graph):
        # It waits, STARTING, for a worker that runs the graph (whose sweep queues it again).
        logger.warning("item %s is left to start later: %s", item_id, graph_not_loaded_text(name=item.graph))
        return StartResult(StartOutcome.GRAPH_NOT_LOADED)
    with thread_resume_lock(item.thread_id, timeout=settings.APPLY_LOCK_TIMEOUT):
        if item.status == ItemStatus.NEEDS_ATTENTION:
            # Started again only if it never ran (a start that fails saves nothing): a graph
            # that ran and waits for nobody may have acted already, and is left to an operator.
            now = graph_state_read(name=item.graph, thread_id=item.thread_id)
            if now.checkpointed and not now.asks:
                return StartResult(StartOutcome.LEFT_AS_IT_IS)
        try:
            started = item_graph_run(item=item)  # raises if the graph finished without asking
        except GraphStartRefused as exc:
            return _start_refused(item_id=item_id, error=str(exc), retry_failed=retry_failed)
        except Exception as exc:  # noqa: BLE001 - storage, or a graph that ran without asking: the item records it
            return _start_failed(item_id=item_id, error=f"{type(exc).__name__}: {exc}", retry_failed=retry_failed)
        fault_point("after_start_run", item_key=item.thread_id)
        with events.events_held(), transaction.atomic():
            item = item_row_lock(pk=item_id)
            if not item_startable(item=item, retry_failed=retry_failed):
                return StartResult(StartOutcome.STARTED_EARLIER)
            before = item_counted(item)
            item_started_fill(item=item, started=started)
            item.status, item.attention = ItemStatus.PENDING, ""
            item.save(update_fields=["risk", "flags", "review_request", "status", "attention", "rank"])
            item_queue_entered(item=item, started=started, before=before)
    return StartResult(StartOutcome.STARTED, asks=len(started.asks))


def item_startable(*, item: QueueItem, retry_failed: bool) -> bool:
    """Still waiting to start; with ``retry_failed``, also an item whose graph failed to start (no ask ever recorded)."""
    if item.status == ItemStatus.STARTING:
        return True
    return retry_failed and item.status == ItemStatus.NEEDS_ATTENTION and not item.asks.exists()


def _start_failed(*, item_id: int, error: str, retry_failed: bool) -> StartResult:
    error = error.replace("\x00", "\\x00")[:ERROR_MAX_CHARS]  # graph errors can quote an item's text
    with transaction.atomic():
        item = item_row_lock(pk=item_id)
        if item_startable(item=item, retry_failed=retry_failed):
            before = item_counted(item)
            item.status, item.attention = ItemStatus.NEEDS_ATTENTION, f"its graph failed to start: {error}"
            item.save(update_fields=["status", "attention"])
            counts_apply(before=before, after=item_counted(item))
    logger.error("item %s: its graph failed to start: %s", item_id, error)
    return StartResult(StartOutcome.FAILED, error=error)


def _start_refused(*, item_id: int, error: str, retry_failed: bool) -> StartResult:
    """Its graph raised at its start: the submitter's error, as a 422 is for a start "now".

    The item is REFUSED, final: nothing to decide and nothing for ``recover`` to try again
    (the failed start saved nothing). Its submitter reads why in ``applied_result``
    (``{"state": "refused", "error": ..., "errors": [...]}``), through the API, its long-poll and the
    ``item.applied`` webhook, as for any run of its graph.
    """
    with events.events_held(), transaction.atomic():
        item = item_row_lock(pk=item_id)
        if not item_startable(item=item, retry_failed=retry_failed):
            return StartResult(StartOutcome.STARTED_EARLIER)
        before = item_counted(item)
        item.status, item.attention = ItemStatus.REFUSED, ""
        item.applied_result = applied_result_build(state=AppliedState.REFUSED, error=error)
        item.save(update_fields=["status", "attention", "applied_result"])
        counts_apply(before=before, after=item_counted(item))
        item_applied_record(item=item, applied=[])
        events.item_applied_after_commit(item=item)
    logger.warning("item %s: refused by its graph at the start: %s", item_id, error)
    return StartResult(StartOutcome.REFUSED, error=error)


def starts_sweep(*, enqueue: Callable[[list[int]], Any] | None = None) -> int:
    """Queue again every item STARTING for ``APPLY_SWEEP_GRACE`` seconds that no start task will run.

    As ``apply.applies_sweep``: a task waiting in the queue, or claimed within the grace,
    will start its item, so only a dead worker's items are queued again, once each.
    """
    overdue = timezone.now() - timedelta(seconds=settings.APPLY_SWEEP_GRACE)
    waiting = (
        QueueItem.objects.filter(status=ItemStatus.STARTING, created_at__lt=overdue, graph__in=graph_names())
        .order_by("created_at", "id")
        .values_list("pk", flat=True)
    )
    item_ids = tasks_orphaned(ids=waiting.iterator(), task=items_start_task, started_since=overdue)
    for chunk in _chunks(item_ids):
        (enqueue or items_start_task.enqueue)(chunk)
    if item_ids:
        logger.warning("re-queued the start of %d items no worker was starting", len(item_ids))
    return len(item_ids)
