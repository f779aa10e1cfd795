"""Deadlines, enforced by the task worker: an overdue ask is settled by its policy's default or escalated.

Every worker's deadline sweep (``manage.py db_worker``, every ``DEADLINE_SWEEP_INTERVAL``
seconds) finds the open asks whose ``deadline_at`` has passed and fires each through the
guard (``moderation.review.decisions``): ``approve`` / ``reject`` resolve the ask as decided by
the "deadline" account; ``escalate`` hands the item to its team's supervisors. No page
needs to be open. A deadline firing while a moderator clicks is one more competitor on
the same locks: one of them wins, and the other is told (the deadline's lost attempt is
in the item's log). Two workers sweeping at once are two competitors as well.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.utils import timezone

from moderation.items.models import AskStatus, ReviewAsk
from moderation.policies.models import OnDeadline
from moderation.policies.rules import DEADLINE_USERNAME, PAST, policy_parse
from moderation.records.metrics import metrics_deadline_fired_record
from moderation.records.outcomes import DecisionOutcome
from moderation.review.decisions import DecisionError, ask_deadline_settle, ask_escalate

logger = logging.getLogger(__name__)

SWEEP_BATCH = 200


def deadline_account() -> User:
    """The account deadlines decide as: it cannot log in, and the pages name it "deadline"."""
    user, created = get_user_model().objects.get_or_create(username=DEADLINE_USERNAME, defaults={"is_active": False})
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


@dataclass(frozen=True)
class Fired:
    """What one overdue ask's deadline did. ``outcome``: the guard's judgement when it tried
    to decide (won, or lost naming the winner); None when it had nothing to judge."""

    said: str
    acted: bool = False
    outcome: DecisionOutcome | None = None


def ask_deadline_fire(*, ask_pk: int) -> Fired:
    """Fire one overdue ask's deadline (see the module docstring)."""
    row = ReviewAsk.objects.filter(pk=ask_pk).values_list("status", "deadline_at", "item__policy").first()
    if row is None:
        return Fired(said="gone")
    status, deadline_at, policy = row
    if status != AskStatus.PENDING:
        return Fired(said="already decided")
    if deadline_at is None or deadline_at > timezone.now():
        return Fired(said="not due")
    action = policy_parse(policy).on_deadline
    if action == OnDeadline.ESCALATE:
        escalated = ask_escalate(ask_pk=ask_pk)
        if escalated:
            metrics_deadline_fired_record(action=action)
        return Fired(said="escalated" if escalated else "not escalated (decided or moved meanwhile)", acted=escalated)
    if action in (OnDeadline.APPROVE, OnDeadline.REJECT):
        outcome = ask_deadline_settle(ask_pk=ask_pk, by=deadline_account(), outcome=action)
        said = f"{PAST[action]} by the deadline" if outcome.won else f"lost to {outcome.winner}"
        if outcome.won:
            metrics_deadline_fired_record(action=action)
        return Fired(said=said, acted=True, outcome=outcome)
    return Fired(said="waits (no deadline action)")


def deadlines_sweep() -> int:
    """Fire every overdue open ask whose policy says what to do; returns how many were fired."""
    due = list(
        ReviewAsk.objects.filter(status=AskStatus.PENDING, deadline_at__lte=timezone.now())
        .order_by("deadline_at")
        .values_list("pk", flat=True)[:SWEEP_BATCH]
    )
    fired = 0
    for ask_pk in due:
        try:
            result = ask_deadline_fire(ask_pk=ask_pk)
        except DecisionError as exc:  # busy, or the item needs an operator: the next sweep tries again
            logger.warning("deadline of ask %s not fired: %s", ask_pk, exc)
            continue
        fired += result.acted
        logger.info("deadline of ask %s: %s", ask_pk, result.said)
    return fired
