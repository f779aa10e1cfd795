"""The guard: exactly one decision per item wins, and every loser is told by whom.

A withdrawal by the item's submitter (``item_withdraw``) is one more competing
operation on the same guard: a pending item becomes WITHDRAWN, its graph is resumed
once with ``{"decision": "withdraw", ...}``, and the withdrawing user is recorded as
the winner (row, attempts log and graph) exactly as a moderator's decision is. So a
withdrawal racing moderators' clicks has one winner; a withdrawal of a settled item
loses naming the winner, and a decision on a withdrawn item loses with "Already
withdrawn by <name>".

Locking contract of ``item_decide`` and ``item_withdraw``, in acquisition order:

1. The item's in-process lock (``moderation.locks``): one lock per item, never a
   global one, so reviewers in this process queue only behind others deciding the
   *same* item. Waiting is bounded by ``DECISION_LOCK_TIMEOUT`` (then ``ItemBusy``).
2. A database transaction holding the item's row lock: ``SELECT ... FOR UPDATE`` on
   PostgreSQL (bounded by ``lock_timeout``); on SQLite, where Django ignores
   ``select_for_update``, the IMMEDIATE transaction mode takes SQLite's write lock at
   BEGIN (bounded by the busy timeout). This is what excludes other processes.
3. Under both, check-then-act: the item must still be pending and its graph still
   paused at the review interrupt; then the graph is resumed exactly once, the item
   row and the winning attempt are written, and the transaction commits.

The graph's checkpoints are not in Django's transaction, so the order matters. The
resume happens before the commit:
- the resume fails: the transaction rolls back, the graph is still paused, the
  reviewer gets an error; nothing changed.
- the graph accepts the decision but a later node keeps failing (after LangGraph's
  own retries): the transaction rolls back, then the item is marked NEEDS_ATTENTION
  with the error, visible on the dashboard, until ``manage.py recover`` finishes it.
- the database connection is lost while the row lock is held (PostgreSQL restart,
  pg_terminate_backend, a network cut): the lock went with it, so the connection is
  checked right before the resume, the one step that cannot be rolled back. A lost
  connection is answered with ``DatabaseUnavailable`` (503, try again).
- the resume succeeds but the commit fails (crash, lost connection): the graph holds
  a decision the database does not. The next guarded look at the item (another
  attempt, or ``manage.py recover`` at start-up) sees "pending row, finished graph"
  and adopts the graph's decision with its original reviewer and time, so the two
  never disagree unnoticed and no second resume can happen.

Every judged attempt (won, lost, or refused because the item needs attention) is
appended to the keyed attempts log (per-item chain and global ledger, see
``moderation.audit``) under the same row lock. A winning one also records its webhook
deliveries there (``moderation.delivery.outbox``): committed with the decision or not at all.

Events go out only after the commit and after the item lock is released
(``events.after_commit`` inside ``events.events_held``): a slow or dead channel layer
never keeps the next reviewer of the item waiting, and in a server process the
request does not wait for the push at all.
"""

from __future__ import annotations

import logging
from datetime import datetime
from uuid import UUID

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import InterfaceError, OperationalError, connection, transaction
from django.utils import timezone

from moderation import events
from moderation.audit import attempt_append
from moderation.delivery.outbox import item_settled_record
from moderation.faults import fault_point
from moderation.graph import graph_pending_review, graph_resume
from moderation.locks import LockTimeout, item_lock
from moderation.models import NO_NUL, STATUS_FOR_DECISION, AttemptOutcome, Decision, QueueItem, Requested
from moderation.permissions import user_can_decide
from moderation.outcomes import DecisionOutcome, outcome_for
from moderation.reconcile import item_reconcile_locked

logger = logging.getLogger(__name__)


class DecisionError(Exception):
    """A decision that could not be judged; nothing was changed."""

    code = "error"
    http_status = 400


class InvalidDecision(DecisionError):
    code = "invalid_decision"


class NotAModerator(DecisionError):
    code = "forbidden"
    http_status = 403


class NotAllowed(DecisionError):
    code = "forbidden"
    http_status = 403


class ItemNotFound(DecisionError):
    code = "not_found"
    http_status = 404


class ItemBusy(DecisionError):
    code = "busy"
    http_status = 503


class ItemNeedsAttention(DecisionError):
    code = "needs_attention"
    http_status = 409


class DatabaseUnavailable(DecisionError):
    code = "database_unavailable"
    http_status = 503


NOTHING_APPLIED = "the database connection was lost; nothing was applied, try again"


def decision_validate(*, decision: object, note: object) -> tuple[str, str]:
    """The decision and note as the guard may use them; InvalidDecision before anything is locked."""
    if decision not in Decision.values:
        raise InvalidDecision(f"decision must be one of {', '.join(Decision.values)}, not {decision!r}")
    return str(decision), _text_validate(note, name="note")


def _text_validate(text: object, *, name: str) -> str:
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise InvalidDecision(f"{name} must be text")
    if len(text) > settings.DECISION_NOTE_MAX_LENGTH:
        raise InvalidDecision(f"{name} is longer than {settings.DECISION_NOTE_MAX_LENGTH} characters")
    try:
        NO_NUL(text)
    except ValidationError:
        # Found only at the write, after the resume, it left the graph decided and the row pending.
        raise InvalidDecision(f"{name} must not contain NUL (\\u0000) characters") from None
    return text


def item_decide(*, item_public_id: UUID | str, reviewer: AbstractBaseUser, decision: str, note: str = "") -> DecisionOutcome:
    """Decide an item for ``reviewer``; see the module docstring for the locking contract.

    Returns the outcome, won or lost (a lost one names the winner). Raises a
    ``DecisionError`` subclass, changing nothing, for a non-moderator, a bad decision
    value, an unknown item, a wait past the lock bound, or a graph that is not where
    the item says it is.
    """
    if not user_can_decide(user=reviewer):
        raise NotAModerator("you do not have permission to decide items")
    decision, note = decision_validate(decision=decision, note=note)
    return _guarded(item_public_id=item_public_id, reviewer=reviewer, decision=decision, note=note)


def item_withdraw(*, item_public_id: UUID | str, by: AbstractBaseUser, reason: str = "") -> DecisionOutcome:
    """Withdraw a pending item for ``by`` (its submitter's account) under the same guard as a decision.

    Who may withdraw is the caller's to decide: the API checks that ``by`` is the item's
    submitter before calling (this module knows nothing of API clients). Here ``by`` only
    has to be an active account, and ``reason`` is checked like a decision's note, before
    anything is locked.

    Returns the outcome: won (the item is now WITHDRAWN, ``by`` its winner), or lost to
    whoever settled it first (a moderator's decision, or an earlier withdrawal), naming
    them; the API answers a lost one with 409. Raises a ``DecisionError`` subclass,
    changing nothing, as ``item_decide`` does.
    """
    if not (by.is_authenticated and by.is_active):
        raise NotAllowed("only an active account may withdraw an item")
    reason = _text_validate(reason, name="reason")
    return _guarded(item_public_id=item_public_id, reviewer=by, decision=Requested.WITHDRAW.value, note=reason)


def _guarded(*, item_public_id: UUID | str, reviewer: AbstractBaseUser, decision: str, note: str) -> DecisionOutcome:
    """The locks of the module docstring around one validated attempt (a decision or a withdrawal)."""
    key = _item_key(item_public_id)
    requested_at = timezone.now()
    timeout = settings.DECISION_LOCK_TIMEOUT
    try:
        with events.events_held(), item_lock(key, timeout=timeout):
            fault_point("after_item_lock", item_key=key)
            outcome = _decide_locked(key=key, reviewer=reviewer, decision=decision, note=note, requested_at=requested_at)
            fault_point("after_commit", item_key=key)
            return outcome
    except LockTimeout:
        raise ItemBusy("another reviewer is deciding this item right now; try again") from None
    except (OperationalError, InterfaceError) as exc:
        if isinstance(exc, OperationalError) and _is_lock_wait(exc):
            raise ItemBusy("the database is busy; try again") from None
        if not _connection_lost(exc):
            raise
        raise DatabaseUnavailable(_connection_lost_message(key)) from exc


class _ResumeFailed(Exception):
    def __init__(self, thread_id: str, error: Exception) -> None:
        super().__init__(str(error))
        self.thread_id = thread_id
        self.error = error


def _decide_locked(*, key: str, reviewer: AbstractBaseUser, decision: str, note: str, requested_at: datetime) -> DecisionOutcome:
    """Check-then-act under the row lock. The caller holds the item's in-process lock."""
    try:
        with transaction.atomic():
            item = _item_lock_row(key, timeout=settings.DECISION_LOCK_TIMEOUT)
            fault_point("after_row_lock", item_key=key)
            if item.is_pending and graph_pending_review(thread_id=item.thread_id) is None:
                item_reconcile_locked(item=item)
            if item.is_decided:
                return _attempt_lose(item=item, reviewer=reviewer, decision=decision, note=note, requested_at=requested_at)
            if item.is_pending:
                return _attempt_win(item=item, reviewer=reviewer, decision=decision, note=note, requested_at=requested_at)
            attention = item.attention
            attempt_append(
                item=item, reviewer=reviewer, requested=decision, note=note, outcome=AttemptOutcome.INVALID,
                detail=attention[:300], requested_at=requested_at,
            )
    except _ResumeFailed as failed:
        attention = _resume_failure_handle(key=key, failed=failed)
    # Raised only now, so the refused attempt (or the attention mark) is committed.
    raise ItemNeedsAttention(f"this item needs an operator: {attention}")


def _resume_failure_handle(*, key: str, failed: _ResumeFailed) -> str:
    """After a failed resume rolled back: still paused means nothing happened; else flag it."""
    if graph_pending_review(thread_id=failed.thread_id) is not None:
        raise failed.error
    with transaction.atomic():
        item = _item_lock_row(key, timeout=settings.DECISION_LOCK_TIMEOUT)
        item_reconcile_locked(item=item)
        if item.is_decided:
            raise failed.error
        return item.attention
def _item_key(item_public_id: UUID | str) -> str:
    try:
        return str(UUID(str(item_public_id)))
    except ValueError:
        raise ItemNotFound(f"no item {item_public_id!r}") from None


def _item_lock_row(key: str, *, timeout: float) -> QueueItem:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{int(timeout * 1000)}ms"])
    try:
        # No select_related here: when PostgreSQL re-reads a row it waited to lock, it
        # does not redo the join, so a joined winner would come back stale (None).
        return QueueItem.objects.select_for_update().get(public_id=key)
    except QueueItem.DoesNotExist:
        raise ItemNotFound(f"no item {key}") from None


# SQLSTATEs of a connection that is gone: class 08 (connection exception) and 57P01-03
# (admin shutdown, crash shutdown, cannot connect now). A connection that died without
# a word from the server (a network cut) comes with no SQLSTATE at all.
_CONNECTION_LOST_STATES = ("08", "57P01", "57P02", "57P03")


def _connection_lost(exc: OperationalError | InterfaceError) -> bool:
    """Was the error the connection itself going away? Then make sure the next query reconnects."""
    if connection.vendor != "postgresql":
        return False
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    if not (isinstance(exc, InterfaceError) or sqlstate is None or sqlstate.startswith(_CONNECTION_LOST_STATES)):
        return False
    connection.close_if_unusable_or_obsolete()
    return True


def _connection_lost_message(key: str) -> str:
    # Only a graph still paused proves nothing was applied: the connection can also drop
    # after the resume or during COMMIT, and then the next look at the item adopts it.
    try:
        thread_id = QueueItem.objects.values_list("thread_id", flat=True).get(public_id=key)
        if graph_pending_review(thread_id=thread_id) is not None:
            return NOTHING_APPLIED
    except Exception:  # the database (or the checkpointer) is still out of reach
        logger.warning("could not tell whether item %s was decided before the connection was lost", key, exc_info=True)
    return "the database connection was lost; the item may have been decided meanwhile, reload it to see"


def _row_lock_confirm() -> None:
    """The row lock lives as long as the connection: fail here, not after the resume, if it is gone.

    PostgreSQL only: SQLite's lock is the file's, held by this process, not by a server.
    """
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _is_lock_wait(exc: OperationalError) -> bool:
    cause = exc.__cause__
    if getattr(cause, "sqlstate", None) == "55P03":  # PostgreSQL lock_not_available
        return True
    return "database is locked" in str(exc)


def _attempt_win(*, item: QueueItem, reviewer: AbstractBaseUser, decision: str, note: str, requested_at: datetime) -> DecisionOutcome:
    decided_at = timezone.now()
    _row_lock_confirm()
    try:
        graph_resume(
            thread_id=item.thread_id, decision=decision, reviewer=reviewer.get_username(),
            note=note, decided_at=decided_at.isoformat(),
        )
    except Exception as exc:
        raise _ResumeFailed(item.thread_id, exc) from exc
    fault_point("after_graph_resume", item_key=str(item.public_id))
    item.status = STATUS_FOR_DECISION[decision]
    item.decided_by = reviewer
    item.decided_at = decided_at
    item.decision_note = note
    item.save(update_fields=["status", "decided_by", "decided_at", "decision_note"])
    attempt = attempt_append(
        item=item, reviewer=reviewer, requested=decision, note=note, outcome=AttemptOutcome.WON,
        winner=reviewer, winner_status=item.status, winner_decided_at=decided_at, requested_at=requested_at,
    )
    item_settled_record(item=item)
    outcome = outcome_for(item=item, won=True, requested=decision, attempt=attempt)
    fault_point("before_commit", item_key=str(item.public_id))
    events.after_commit(lambda: events.decision_broadcast(outcome=outcome))
    return outcome


def _attempt_lose(*, item: QueueItem, reviewer: AbstractBaseUser, decision: str, note: str, requested_at: datetime) -> DecisionOutcome:
    attempt = attempt_append(
        item=item, reviewer=reviewer, requested=decision, note=note, outcome=AttemptOutcome.LOST,
        winner=item.decided_by, winner_status=item.status, winner_decided_at=item.decided_at,
        requested_at=requested_at,
    )
    outcome = outcome_for(item=item, won=False, requested=decision, attempt=attempt)
    reviewer_id = reviewer.pk
    events.after_commit(lambda: events.loser_notify(outcome=outcome, reviewer_id=reviewer_id))
    return outcome
