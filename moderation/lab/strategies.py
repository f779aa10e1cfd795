"""Ways to decide an item, from the seed's broken one to the product's guard.

Every strategy has the product's signature and returns a DecisionOutcome, so the
race harness judges them all the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from uuid import UUID

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from moderation.decisions import DecisionOutcome, item_decide
from moderation.graph import graph_resume
from moderation.models import STATUS_FOR_DECISION, Decision, QueueItem

Strategy = Callable[..., DecisionOutcome]


def naive_decide(
    *, item_public_id: UUID | str, reviewer: AbstractBaseUser, decision: str, note: str = "", delay: float = 0.05
) -> DecisionOutcome:
    """The seed's check-then-act with nothing around it: read, wait, act on what was read."""
    item = QueueItem.objects.select_related("decided_by").get(public_id=item_public_id)
    time.sleep(delay)  # the window between check and act that real latency opens
    if not item.is_pending:
        return DecisionOutcome(
            won=False, item_public_id=str(item.public_id), item_title=item.title, requested=decision,
            winner=item.decided_by.get_username(), winner_status=item.status, decided_at=item.decided_at, attempt_id=0,
        )
    decided_at = timezone.now()
    graph_resume(
        thread_id=item.thread_id, decision=decision, reviewer=reviewer.get_username(), note=note,
        decided_at=decided_at.isoformat(),
    )
    status = STATUS_FOR_DECISION[Decision(decision)]
    QueueItem.objects.filter(pk=item.pk).update(status=status, decided_by=reviewer, decided_at=decided_at, decision_note=note)
    return DecisionOutcome(
        won=True, item_public_id=str(item.public_id), item_title=item.title, requested=decision,
        winner=reviewer.get_username(), winner_status=status, decided_at=decided_at, attempt_id=0,
    )


def guarded_decide(
    *, item_public_id: UUID | str, reviewer: AbstractBaseUser, decision: str, note: str = "", delay: float = 0.0
) -> DecisionOutcome:
    """The product's own guard, unchanged (``delay`` is the naive window; the guard has none)."""
    return item_decide(item_public_id=item_public_id, reviewer=reviewer, decision=decision, note=note)


STRATEGIES: dict[str, Strategy] = {
    "naive": naive_decide,
    "guarded": guarded_decide,
}
