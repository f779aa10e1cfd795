"""Ways to decide an item, from the seed's broken one to the product's guard.

Every strategy has the product's signature and returns a DecisionOutcome, so the race harness
judges them all alike. ``"withdraw"`` goes to ``item_withdraw`` in the guarded strategy and
is check-then-act in the others. The lab's own strategies write no DecisionAttempt (its
one-winner constraint would turn their silent losses, which the lab counts, into errors).

Each strategy passes the fault point ``HOLD_POINT`` right after taking its own exclusion, so
an injected stall holds every strategy at the equivalent place. ``naive-tally`` is the
quorum vote's negative control; a deadline (``--deadline``) races through ``deadline_fire``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from moderation.core.faults import fault_point
from moderation.core.locks import item_lock
from moderation.graphs.asks import ask_resume_value
from moderation.graphs.runtime import graph_asks_pending, graph_resume
from moderation.items.models import STATUS_FOR_DECISION, AskStatus, QueueItem, Requested, ReviewAsk
from moderation.policies.models import Vote
from moderation.policies.rules import DEADLINE_USERNAME, policy_parse, tally_resolve
from moderation.policies.teams import eligible_count
from moderation.records.models import AttemptOrigin, ReasonCode
from moderation.review.deadlines import ask_deadline_fire
from moderation.review.decisions import DecisionOutcome, item_decide, item_withdraw

Strategy = Callable[..., DecisionOutcome]

HOLD_POINT = "after_item_lock"

_global_lock = threading.Lock()


def naive_decide(
    *, item_public_id: UUID | str, reviewer: AbstractBaseUser, decision: str, note: str = "", delay: float = 0.05
) -> DecisionOutcome:
    """The seed's check-then-act with nothing around it: read, wait, act on what was read."""
    fault_point(HOLD_POINT, item_key=str(item_public_id))
    return _check_then_act(item_public_id=item_public_id, reviewer=reviewer, decision=decision, note=note, delay=delay)


def global_lock_decide(
    *, item_public_id: UUID | str, reviewer: AbstractBaseUser, decision: str, note: str = "", delay: float = 0.05
) -> DecisionOutcome:
    """The seed's fix: one process-wide lock around the whole check-then-act."""
    with _global_lock:
        fault_point(HOLD_POINT, item_key=str(item_public_id))
        return _check_then_act(item_public_id=item_public_id, reviewer=reviewer, decision=decision, note=note, delay=delay)


def item_lock_decide(
    *, item_public_id: UUID | str, reviewer: AbstractBaseUser, decision: str, note: str = "", delay: float = 0.05
) -> DecisionOutcome:
    """A lock per item, in this process only: reviewers of other items never wait."""
    key = str(item_public_id)
    with item_lock(key, timeout=settings.DECISION_LOCK_TIMEOUT):
        fault_point(HOLD_POINT, item_key=key)
        return _check_then_act(item_public_id=key, reviewer=reviewer, decision=decision, note=note, delay=delay)


def row_lock_decide(
    *, item_public_id: UUID | str, reviewer: AbstractBaseUser, decision: str, note: str = "", delay: float = 0.05
) -> DecisionOutcome:
    """The database's lock only: SELECT ... FOR UPDATE (on SQLite the IMMEDIATE
    transaction's write lock, which covers the whole database) around check, resume, write."""
    with transaction.atomic():
        # No select_related: PostgreSQL re-reads a row it waited to lock without redoing
        # the join, so a joined winner would come back stale (None).
        item = QueueItem.objects.select_for_update().get(public_id=item_public_id)
        fault_point(HOLD_POINT, item_key=str(item_public_id))
        time.sleep(delay)  # the same window as naive's, now inside the lock
        if not item.is_pending:
            return _outcome_lost(item=item, decision=decision)
        return _act(item=item, reviewer=reviewer, decision=decision, note=note)


def guarded_decide(
    *, item_public_id: UUID | str, reviewer: AbstractBaseUser, decision: str, note: str = "", delay: float = 0.0
) -> DecisionOutcome:
    """The product's own guard, unchanged (``delay`` is the naive window; the guard has none)."""
    if decision == Requested.WITHDRAW:
        return item_withdraw(item_public_id=item_public_id, by=reviewer, reason=note)
    return item_decide(
        item_public_id=item_public_id,
        reviewer=reviewer,
        decision=decision,
        note=note,
        reason=lab_reason(decision),
        origin=AttemptOrigin.LAB,
    )


def naive_tally_decide(
    *, item_public_id: UUID | str, reviewer: AbstractBaseUser, decision: str, note: str = "", delay: float = 0.05
) -> DecisionOutcome:
    """A vote counted with no lock: read the votes, wait, add this one, write the whole tally
    back (the ask's Vote rows deleted and rewritten), and resolve on that stale count."""
    fault_point(HOLD_POINT, item_key=str(item_public_id))
    item = QueueItem.objects.select_related("decided_by").get(public_id=item_public_id)
    ask = item.asks.order_by("-round", "-position").first()
    votes = {v.voter.get_username(): (v.voter_id, v.vote) for v in ask.votes.select_related("voter")}
    time.sleep(delay)  # the window between reading the count and writing it back
    if not item.is_pending:
        return _outcome_lost(item=item, decision=decision)
    votes[reviewer.get_username()] = (reviewer.pk, decision)
    policy = policy_parse(item.policy)
    eligible = eligible_count(team_id=item.team_id, requester_id=item.requested_by_id)
    resolution = tally_resolve(policy=policy, votes={name: kind for name, (_, kind) in votes.items()}, eligible=eligible)
    now = timezone.now()
    tally = {
        "votes": [{"voter": name, "vote": kind} for name, (_, kind) in votes.items()],
        "resolution": resolution.outcome if resolution else None,
    }
    with transaction.atomic():
        Vote.objects.filter(ask=ask).delete()
        # A row another writer inserted meanwhile is kept, as an upsert-less rewrite would.
        Vote.objects.bulk_create(
            [Vote(ask=ask, voter_id=pk, vote=kind, cast_at=now) for pk, kind in votes.values()], ignore_conflicts=True
        )
    if resolution is None:
        return DecisionOutcome(
            won=False,
            item_public_id=str(item.public_id),
            item_title=item.title,
            requested=decision,
            winner="",
            winner_status="pending",
            decided_at=now,
            attempt_seq=0,
            counted=True,
            tally=tally,
        )
    ReviewAsk.objects.filter(pk=ask.pk).update(tally=tally)
    return _act(item=item, reviewer=reviewer, decision=resolution.outcome, note=note)


@dataclass(frozen=True)
class Fired:
    """What the deadline was told: ``won`` None when it had nothing to judge (the ask was
    settled before it fired, or it escalated the item instead of deciding it)."""

    won: bool | None
    winner: str | None
    said: str
    decision: str = "deadline"  # what it decided, when it won: the policy's on_deadline


def deadline_fire(*, item_public_id: UUID | str) -> Fired:
    """The deadline as a racer: the item's open ask fired through ``moderation.review.deadlines``,
    as every worker's sweep fires it."""
    ask_pk = (
        ReviewAsk.objects.filter(item__public_id=item_public_id, status=AskStatus.PENDING).values_list("pk", flat=True).first()
    )
    if ask_pk is None:
        return Fired(won=None, winner=None, said="already decided")
    fired = ask_deadline_fire(ask_pk=ask_pk)
    if fired.outcome is None:
        return Fired(won=None, winner=None, said=fired.said)
    won = fired.outcome.won
    return Fired(
        won=won,
        winner=DEADLINE_USERNAME if won else fired.outcome.winner,
        said=fired.said,
        decision=fired.outcome.requested if won else "deadline",
    )


def lab_reason(decision: str) -> str | None:
    """A reject names a reason like any other (REJECT_REASON_REQUIRED): the first active one."""
    if decision != Requested.REJECT:
        return None
    return ReasonCode.objects.filter(active=True).values_list("code", flat=True).first()


def _check_then_act(
    *, item_public_id: UUID | str, reviewer: AbstractBaseUser, decision: str, note: str, delay: float
) -> DecisionOutcome:
    item = QueueItem.objects.select_related("decided_by").get(public_id=item_public_id)
    time.sleep(delay)  # the window between check and act that real latency opens
    if not item.is_pending:
        return _outcome_lost(item=item, decision=decision)
    return _act(item=item, reviewer=reviewer, decision=decision, note=note)


def _act(*, item: QueueItem, reviewer: AbstractBaseUser, decision: str, note: str) -> DecisionOutcome:
    decided_at = timezone.now()
    # No guard: whatever the graph waits on now is answered, however many others do the same.
    meta = {"reviewer": reviewer.get_username(), "note": note, "decided_at": decided_at.isoformat()}
    if decision == Requested.WITHDRAW:
        meta["withdrawn"] = True
    kind = "reject" if decision == Requested.WITHDRAW else decision
    answers = {
        ask.interrupt_id: ask_resume_value(spec=ask.spec, decisions=[{"type": kind} for _ in ask.spec.actions], meta=meta)
        for ask in graph_asks_pending(name=item.graph, thread_id=item.thread_id)[:1]
    }
    graph_resume(name=item.graph, thread_id=item.thread_id, answers=answers)
    status = STATUS_FOR_DECISION[decision]
    QueueItem.objects.filter(pk=item.pk).update(status=status, decided_by=reviewer, decided_at=decided_at, decision_note=note)
    return DecisionOutcome(
        won=True,
        item_public_id=str(item.public_id),
        item_title=item.title,
        requested=decision,
        winner=reviewer.get_username(),
        winner_status=status,
        decided_at=decided_at,
        attempt_seq=0,
    )


def _outcome_lost(*, item: QueueItem, decision: str) -> DecisionOutcome:
    return DecisionOutcome(
        won=False,
        item_public_id=str(item.public_id),
        item_title=item.title,
        requested=decision,
        winner=item.decided_by.get_username(),
        winner_status=item.status,
        decided_at=item.decided_at,
        attempt_seq=0,
    )


STRATEGIES: dict[str, Strategy] = {
    "naive": naive_decide,
    "naive-tally": naive_tally_decide,
    "global-lock": global_lock_decide,
    "item-lock": item_lock_decide,
    "row-lock": row_lock_decide,
    "guarded": guarded_decide,
}
