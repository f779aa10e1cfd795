"""One reviewer's attempt in a race, as both race modes make and report it.

Shared by the harness (a race in threads, and the judge) and the reviewer process's body
(``worker``, a race in processes). It imports neither, so neither imports the other back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from moderation.items.models import AskStatus, ReviewAsk
from moderation.lab.strategies import deadline_fire

DEADLINE_DECISION = "deadline"
# Past the deadline by this much, so the deadline's own "is it due" check agrees.
DEADLINE_SLACK_S = 0.005


@dataclass(frozen=True)
class Attempt:
    item: str
    reviewer: str
    decision: str
    won: bool | None  # None: the call raised
    told_winner: str | None
    error: str | None
    latency_ms: float
    started_at: float = 0.0  # wall clock (time.time()), comparable across processes
    counted: bool = False  # a vote counted on a quorum item that did not resolve with it
    judged: bool = True  # False: the deadline found nothing to decide (settled before, or it escalated)


def attempt_run(
    strategy: Callable[..., Any],
    *,
    item: str,
    user,
    decision: str,
    delay: float,
    at_deadline: bool = False,
) -> Attempt:
    if at_deadline:
        deadline_wait(item=item)
    started_at = time.time()
    start = time.perf_counter()
    counted, judged = False, True
    try:
        if decision == DEADLINE_DECISION:
            fired = deadline_fire(item_public_id=item)
            won, told, judged, decision = bool(fired.won), fired.winner, fired.won is not None, fired.decision
        else:
            outcome = strategy(item_public_id=item, reviewer=user, decision=decision, delay=delay)
            won, told, counted = outcome.won, outcome.winner, outcome.counted
        error = None
    except Exception as exc:  # the harness counts every failure instead of stopping
        won, told, error = None, None, f"{type(exc).__name__}: {exc}"
    return Attempt(
        item=item,
        reviewer=user.get_username(),
        decision=decision,
        won=won,
        told_winner=told,
        error=error,
        latency_ms=(time.perf_counter() - start) * 1000,
        started_at=started_at,
        counted=counted,
        judged=judged,
    )


def deadline_wait(*, item: str) -> None:
    """Sleep until the item's open ask is due (at once if it has none, or is overdue already)."""
    due = ReviewAsk.objects.filter(item__public_id=item, status=AskStatus.PENDING).values_list("deadline_at", flat=True).first()
    if due is not None:
        time.sleep(max(0.0, (due - timezone.now()).total_seconds() + DEADLINE_SLACK_S))
