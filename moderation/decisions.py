"""The guard: exactly one decision per item wins, and every loser is told by whom.

Locking contract of ``item_decide``, in acquisition order:

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
- the resume succeeds but the commit fails (crash, lost connection): the graph holds
  a decision the database does not. The next guarded look at the item (another
  attempt, or ``item_reconcile`` at start-up) sees "pending row, finished graph" and
  adopts the graph's decision with its original reviewer and time, so the two never
  disagree unnoticed and no second resume can happen.

Events go out through ``transaction.on_commit``, never from inside the transaction.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import OperationalError, connection, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from moderation import events
from moderation.faults import fault_point
from moderation.graph import graph_decision_read, graph_pending_review, graph_resume
from moderation.locks import LockTimeout, item_lock
from moderation.models import (
    STATUS_FOR_DECISION,
    AttemptOutcome,
    Decision,
    DecisionAttempt,
    ItemStatus,
    QueueItem,
)
from moderation.permissions import user_can_decide

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


class ItemNotFound(DecisionError):
    code = "not_found"
    http_status = 404


class ItemBusy(DecisionError):
    code = "busy"
    http_status = 503


class ItemNeedsAttention(DecisionError):
    code = "needs_attention"
    http_status = 409


@dataclass(frozen=True)
class DecisionOutcome:
    """What happened to one reviewer's decision."""

    won: bool
    item_public_id: str
    item_title: str
    requested: str
    winner: str
    winner_status: str
    decided_at: datetime
    attempt_id: int

    def seconds_ago(self, *, now: datetime | None = None) -> int:
        return max(0, int(((now or timezone.now()) - self.decided_at).total_seconds()))

    def message(self, *, now: datetime | None = None) -> str:
        if self.won:
            return f"You {self.winner_status} “{self.item_title}”."
        return (
            f"Already reviewed by {self.winner} ({self.winner_status}, {format_ago(self.seconds_ago(now=now))}) "
            "— your decision was not applied"
        )

    def winner_payload(self) -> dict[str, str]:
        return {
            "item": self.item_public_id,
            "title": self.item_title,
            "winner": self.winner,
            "status": self.winner_status,
            "decided_at": self.decided_at.isoformat(),
        }


def format_ago(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds} s ago"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    return f"{seconds // 3600} h ago"


def decision_validate(*, decision: object, note: object) -> tuple[str, str]:
    if decision not in Decision.values:
        raise InvalidDecision(f"decision must be one of {', '.join(Decision.values)}, not {decision!r}")
    if note is None:
        note = ""
    if not isinstance(note, str):
        raise InvalidDecision("note must be text")
    if len(note) > settings.DECISION_NOTE_MAX_LENGTH:
        raise InvalidDecision(f"note is longer than {settings.DECISION_NOTE_MAX_LENGTH} characters")
    return str(decision), note


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
    key = _item_key(item_public_id)
    requested_at = timezone.now()
    timeout = settings.DECISION_LOCK_TIMEOUT
    try:
        with item_lock(key, timeout=timeout):
            fault_point("after_item_lock", item_key=key)
            with transaction.atomic():
                item = _item_lock_row(key, timeout=timeout)
                fault_point("after_row_lock", item_key=key)
                if item.is_pending and graph_pending_review(thread_id=item.thread_id) is None:
                    item_reconcile_locked(item=item)
                if not item.is_pending:
                    return _attempt_lose(item=item, reviewer=reviewer, decision=decision, note=note, requested_at=requested_at)
                return _attempt_win(item=item, reviewer=reviewer, decision=decision, note=note, requested_at=requested_at)
    except LockTimeout:
        raise ItemBusy("another reviewer is deciding this item right now; try again") from None
    except OperationalError as exc:
        if _is_lock_wait(exc):
            raise ItemBusy("the database is busy; try again") from None
        raise


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


def _is_lock_wait(exc: OperationalError) -> bool:
    cause = exc.__cause__
    if getattr(cause, "sqlstate", None) == "55P03":  # PostgreSQL lock_not_available
        return True
    return "database is locked" in str(exc)


def _attempt_win(*, item: QueueItem, reviewer: AbstractBaseUser, decision: str, note: str, requested_at: datetime) -> DecisionOutcome:
    decided_at = timezone.now()
    graph_resume(
        thread_id=item.thread_id, decision=decision, reviewer=reviewer.get_username(),
        note=note, decided_at=decided_at.isoformat(),
    )
    fault_point("after_graph_resume", item_key=str(item.public_id))
    item.status = STATUS_FOR_DECISION[Decision(decision)]
    item.decided_by = reviewer
    item.decided_at = decided_at
    item.decision_note = note
    item.save(update_fields=["status", "decided_by", "decided_at", "decision_note"])
    attempt = DecisionAttempt.objects.create(
        item=item, reviewer=reviewer, requested=decision, note=note, outcome=AttemptOutcome.WON,
        winner=reviewer, winner_status=item.status, winner_decided_at=decided_at, requested_at=requested_at,
    )
    outcome = _outcome(item=item, won=True, requested=decision, attempt=attempt)
    fault_point("before_commit", item_key=str(item.public_id))
    transaction.on_commit(lambda: events.decision_broadcast(outcome=outcome))
    return outcome


def _attempt_lose(*, item: QueueItem, reviewer: AbstractBaseUser, decision: str, note: str, requested_at: datetime) -> DecisionOutcome:
    attempt = DecisionAttempt.objects.create(
        item=item, reviewer=reviewer, requested=decision, note=note, outcome=AttemptOutcome.LOST,
        winner=item.decided_by, winner_status=item.status, winner_decided_at=item.decided_at,
        requested_at=requested_at,
    )
    outcome = _outcome(item=item, won=False, requested=decision, attempt=attempt)
    reviewer_id = reviewer.pk
    transaction.on_commit(lambda: events.loser_notify(outcome=outcome, reviewer_id=reviewer_id))
    return outcome


def _outcome(*, item: QueueItem, won: bool, requested: str, attempt: DecisionAttempt) -> DecisionOutcome:
    return DecisionOutcome(
        won=won, item_public_id=str(item.public_id), item_title=item.title, requested=requested,
        winner=item.decided_by.get_username(), winner_status=item.status, decided_at=item.decided_at,
        attempt_id=attempt.pk,
    )


def item_reconcile_locked(*, item: QueueItem) -> None:
    """Bring a pending row in line with a graph that already accepted a decision.

    The caller holds the item's row lock inside a transaction. Adopts the graph's
    decision (its reviewer and time, recorded as the winning attempt); raises
    ItemNeedsAttention if the graph is neither paused at review nor decided.
    """
    accepted = graph_decision_read(thread_id=item.thread_id)
    if not accepted:
        raise ItemNeedsAttention(f"item {item.public_id} is pending but its graph is not waiting for review")
    reviewer = get_user_model().objects.get_by_natural_key(accepted["reviewer"])
    decided_at = parse_datetime(accepted["decided_at"])
    item.status = STATUS_FOR_DECISION[Decision(accepted["decision"])]
    item.decided_by = reviewer
    item.decided_at = decided_at
    item.decision_note = accepted.get("note", "")
    item.save(update_fields=["status", "decided_by", "decided_at", "decision_note"])
    attempt = DecisionAttempt.objects.create(
        item=item, reviewer=reviewer, requested=accepted["decision"], note=item.decision_note,
        outcome=AttemptOutcome.WON, winner=reviewer, winner_status=item.status, winner_decided_at=decided_at,
        requested_at=decided_at, detail="adopted from the graph after an interrupted commit",
    )
    logger.warning("reconciled item %s: adopted %s by %s from its graph", item.public_id, item.status, reviewer)
    outcome = _outcome(item=item, won=True, requested=accepted["decision"], attempt=attempt)
    transaction.on_commit(lambda: events.decision_broadcast(outcome=outcome))
