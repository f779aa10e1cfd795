"""Bringing an item's row and its graph back into agreement.

The guard resumes the graph before it commits, so after a crash the graph can be
ahead of the row, never behind it: it may hold a decision the row does not (adopt
it), or have accepted one and failed in a later node (retry it, or flag the item).
A withdrawal is handled the same way (the graph records ``"withdraw"``).
"""

from __future__ import annotations

import logging

from django.contrib.auth import get_user_model
from django.utils.dateparse import parse_datetime

from moderation import events
from moderation.audit import attempt_append, item_graph_mismatch
from moderation.delivery.outbox import item_settled_record
from moderation.graph import (
    graph_continue,
    graph_decision_read,
    graph_error_read,
    graph_is_finished,
    graph_pending_review,
    graph_resume,
)
from moderation.models import DECISION_FOR_STATUS, STATUS_FOR_DECISION, AttemptOutcome, ItemStatus, QueueItem
from moderation.outcomes import outcome_for

logger = logging.getLogger(__name__)

ADOPTED_DETAIL = "adopted from the graph after an interrupted commit"


def item_reconcile_locked(*, item: QueueItem, retry: bool = False) -> str:
    """Make ``item`` agree with its graph; return what was done ("ok" if nothing).

    The caller holds the item's row lock inside a transaction (and, in this process,
    its item lock). ``retry`` re-runs a node that failed after the decision was
    accepted; without it such an item is only flagged NEEDS_ATTENTION.
    """
    thread_id = item.thread_id
    if graph_pending_review(thread_id=thread_id) is not None:
        if item.is_decided:
            return _roll_forward(item=item)
        if item.status == ItemStatus.NEEDS_ATTENTION:
            _status_set(item=item, status=ItemStatus.PENDING, attention="")
            return "graph is waiting for review again: back to pending"
        return "ok"
    if item.is_decided:
        # Which side is right is for an operator (and the audit log) to say, not for us.
        mismatch = item_graph_mismatch(item=item)
        return "ok" if mismatch is None else f"row disagrees with its graph, left as is: {mismatch} (run verify_audit)"
    accepted = graph_decision_read(thread_id=thread_id)
    if not accepted:
        error = graph_error_read(thread_id=thread_id) or "no checkpoint for its thread"
        return _attention(item=item, reason=f"its graph is not waiting for review ({error})")
    if not graph_is_finished(thread_id=thread_id):
        if not retry:
            error = graph_error_read(thread_id=thread_id) or "unknown error"
            return _attention(
                item=item,
                reason=f"the workflow accepted {accepted['reviewer']}'s {accepted['decision']} but could not finish: {error}",
            )
        try:
            graph_continue(thread_id=thread_id)
        except Exception as exc:
            return _attention(item=item, reason=f"retrying the workflow failed again: {type(exc).__name__}: {exc}")
    return _adopt(item=item, accepted=accepted)


def _adopt(*, item: QueueItem, accepted: dict[str, str]) -> str:
    User = get_user_model()
    try:
        reviewer = User.objects.get_by_natural_key(accepted["reviewer"])
    except User.DoesNotExist:
        return _attention(item=item, reason=f"the graph's decision names an unknown reviewer {accepted['reviewer']!r}")
    decided_at = parse_datetime(accepted["decided_at"])
    # A withdrawal is adopted like a decision: the graph names the withdrawing account.
    item.status = STATUS_FOR_DECISION[accepted["decision"]]
    item.decided_by = reviewer
    item.decided_at = decided_at
    note, detail = accepted.get("note", ""), ADOPTED_DETAIL
    if "\x00" in note:
        # Only a graph resumed before notes were validated holds one; the row cannot
        # (PostgreSQL refuses NUL), so the note is kept readable rather than the item stuck.
        note, detail = note.replace("\x00", "\ufffd"), f"{ADOPTED_DETAIL}; NUL characters in the note shown as U+FFFD"
    item.decision_note = note
    item.attention = ""
    item.save(update_fields=["status", "decided_by", "decided_at", "decision_note", "attention"])
    attempt = attempt_append(
        item=item, reviewer=reviewer, requested=accepted["decision"], note=item.decision_note,
        outcome=AttemptOutcome.WON, winner=reviewer, winner_status=item.status, winner_decided_at=decided_at,
        requested_at=decided_at, detail=detail,
    )
    item_settled_record(item=item)
    logger.warning("reconciled item %s: adopted %s by %s from its graph", item.public_id, item.status, reviewer)
    outcome = outcome_for(item=item, won=True, requested=accepted["decision"], attempt=attempt)
    events.after_commit(lambda: events.decision_broadcast(outcome=outcome))
    return f"adopted the graph's decision: {item.status} by {reviewer.get_username()}"


def _roll_forward(*, item: QueueItem) -> str:
    """A decided row whose graph is still paused: finish the graph with the row's decision."""
    decision = DECISION_FOR_STATUS[item.status]
    graph_resume(
        thread_id=item.thread_id, decision=decision, reviewer=item.decided_by.get_username(),
        note=item.decision_note, decided_at=item.decided_at.isoformat(),
    )
    logger.warning("reconciled item %s: resumed its graph with the recorded %s", item.public_id, item.status)
    return f"resumed the graph with the recorded decision ({item.status})"


def _attention(*, item: QueueItem, reason: str) -> str:
    reason = reason.replace("\x00", "\\x00")  # graph errors can quote an item's text
    if item.status != ItemStatus.NEEDS_ATTENTION or item.attention != reason:
        _status_set(item=item, status=ItemStatus.NEEDS_ATTENTION, attention=reason)
        logger.error("item %s needs attention: %s", item.public_id, reason)
    return f"needs attention: {reason}"


def _status_set(*, item: QueueItem, status: str, attention: str) -> None:
    item.status = status
    item.attention = attention
    item.save(update_fields=["status", "attention"])
