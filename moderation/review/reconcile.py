"""Bringing an item's rows (its asks, its status) and its graph back into agreement.

The graph is resumed only after a decision commits (``moderation.review.apply``), so after a
crash the rows can be ahead of the graph, never behind it: a decided ask not yet
applied is applied now (once: ``item_apply`` re-checks the graph under the thread's
resume lock), and a graph that failed after a decision, or that a killed run left
between its steps, is run on. A pending item is
checked against the interrupts its graph waits on: interrupts with no ask (an item
from before asks existed) get their asks; an item whose graph waits on nothing it
knows is flagged NEEDS_ATTENTION for an operator. An item whose graph never asked (still
STARTING, or failed to start) is started, as the task worker would have.
"""

from __future__ import annotations

import logging

from django.db import transaction

from moderation.graphs.runtime import graph_asks_pending, graph_error_read
from moderation.items.models import ApplyState, AskStatus, ItemStatus, QueueItem
from moderation.records.counts import counts_apply, item_counted
from moderation.review.apply import ApplyOutcome, apply_text, asks_create, item_apply, item_continue
from moderation.review.itemrow import item_row_lock
from moderation.review.starts import StartOutcome, item_start, item_startable, start_text

logger = logging.getLogger(__name__)


def item_reconcile(*, key: str) -> tuple[str, list[str]]:
    """Reconcile the item with public id ``key``; return its title and what was done (``recover``'s report lines; none if nothing).

    Takes the locks it needs itself (the apply's, then the row lock), so it is safe
    while reviewers and workers are at work.
    """
    item = QueueItem.objects.get(public_id=key)
    if item_startable(item=item, retry_failed=True):
        # Never asked: its graph is started (again), as a worker would have.
        started = item_start(item_id=item.pk, retry_failed=True)
        if started.outcome != StartOutcome.LEFT_AS_IT_IS:  # else: a graph that ran, judged below like any other
            return item.title, [] if started.outcome == StartOutcome.STARTED_EARLIER else [start_text(started)]
    done = []
    unapplied = item.asks.exclude(status=AskStatus.PENDING).filter(applied_at__isnull=True).exists()
    if unapplied or item.apply_state == ApplyState.FAILED:
        done.append(f"applied its decision: {apply_text(item_apply(item_id=item.pk, retry_failed=True))}")
    elif item.is_decided:
        continued = item_continue(item_id=item.pk)
        if continued.outcome != ApplyOutcome.NOTHING_TO_CONTINUE:
            done.append(f"ran its graph on from where a killed run left it: {apply_text([continued])}")
    with transaction.atomic():
        item = item_row_lock(public_id=key)
        if item.status in (ItemStatus.PENDING, ItemStatus.NEEDS_ATTENTION) and (checked := _pending_check(item=item)):
            done.append(checked)
    return item.title, done


def _pending_check(*, item: QueueItem) -> str | None:
    """What the check did; None if nothing."""
    waiting = graph_asks_pending(name=item.graph, thread_id=item.thread_id)
    known = set(item.asks.values_list("interrupt_id", flat=True))
    open_ids = set(item.asks.filter(status=AskStatus.PENDING).values_list("interrupt_id", flat=True))
    new = [p for p in waiting if p.interrupt_id not in known]
    if new:
        round_ = (item.asks.order_by("-round").values_list("round", flat=True).first() or 0) + 1
        asks_create(item=item, asked=new, round=round_)
        item.review_request = new[0].spec.as_payload()
        item.save(update_fields=["review_request"])
        open_ids |= {p.interrupt_id for p in new}
    stale = open_ids - {p.interrupt_id for p in waiting}
    if stale or not open_ids:
        error = graph_error_read(name=item.graph, thread_id=item.thread_id) or "no checkpoint for its thread"
        return _attention(item=item, reason=f"its graph is not waiting for review ({error})")
    if item.status == ItemStatus.NEEDS_ATTENTION:
        _status_set(item=item, status=ItemStatus.PENDING, attention="")
        return "graph is waiting for review again: back to pending"
    return f"recorded {len(new)} ask(s) its graph waits on" if new else None


def _attention(*, item: QueueItem, reason: str) -> str:
    reason = reason.replace("\x00", "\\x00")  # graph errors can quote an item's text
    if item.status != ItemStatus.NEEDS_ATTENTION or item.attention != reason:
        _status_set(item=item, status=ItemStatus.NEEDS_ATTENTION, attention=reason)
        logger.error("item %s needs attention: %s", item.public_id, reason)
    return f"needs attention: {reason}"


def _status_set(*, item: QueueItem, status: str, attention: str) -> None:
    before = item_counted(item)
    item.status = status
    item.attention = attention
    item.save(update_fields=["status", "attention"])
    counts_apply(before=before, after=item_counted(item))
