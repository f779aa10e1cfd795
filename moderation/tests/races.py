"""The verdict every guarded race in the tests must reach, whatever raced (decisions, withdrawals)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

from django.db import connection

from moderation.items.models import QueueItem
from moderation.lab.harness import RaceReport
from moderation.records.models import AttemptOutcome, DecisionAttempt

T = TypeVar("T")


def guard_held_assert(report: RaceReport, *, items: list[str], reviewers: int) -> None:
    """What a guarded race must show: no anomaly, one acknowledged winner per item, one resume, an audit trail that agrees."""
    assert report.errors == []
    assert [str(a) for a in report.anomalies] == []
    assert len(report.attempts) == len(items) * reviewers
    assert report.lost_decisions == 0
    assert report.false_successes == 0
    assert report.double_resumes == 0
    assert report.misinformed_losers == 0
    for verdict in report.verdicts:
        assert len(verdict.acknowledged) == 1, verdict
        assert verdict.winner == verdict.acknowledged[0]
        assert verdict.resumes == 1 and not verdict.still_paused
    # The audit trail agrees: one won attempt per item, every other attempt lost to that winner.
    for item in QueueItem.objects.filter(public_id__in=items).select_related("decided_by"):
        attempts = list(DecisionAttempt.objects.filter(item=item))
        assert len(attempts) == reviewers
        assert [a.reviewer_id for a in attempts if a.outcome == AttemptOutcome.WON] == [item.decided_by_id]
        assert {a.winner_id for a in attempts} == {item.decided_by_id}


def race_rounds(rounds: int, *workers: Callable[[int], None], before: Callable[[int], None] | None = None) -> None:
    """Run ``rounds`` races: in each, every worker (one thread each, kept for all rounds) is
    released by one barrier and calls ``worker(round)``. ``before(round)`` runs once per round,
    while every worker waits at the barrier (the barrier's action). A worker's exception ends
    the run and is raised here; each thread closes its database connection."""
    upcoming = iter(range(rounds))
    barrier = threading.Barrier(len(workers), action=(lambda: before(next(upcoming))) if before else None)
    errors: list[BaseException] = []

    def run(worker: Callable[[int], None]) -> None:
        try:
            for n in range(rounds):
                barrier.wait(timeout=60)
                worker(n)
        except BaseException as exc:  # noqa: BLE001 - raised in the test's thread
            errors.append(exc)
            barrier.abort()
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(worker,)) for worker in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def first_calls_meet(call: Callable[..., T], *, parties: int, exempt: threading.Thread | None = None) -> Callable[..., T]:
    """``call`` wrapped for a naive control: each thread's first call, once it has returned, waits for the
    first calls of the other ``parties - 1`` threads (at most 120 s), so whatever each read, all have read it
    before any goes on to write, however the threads are scheduled. ``exempt``'s calls (a setup's) pass."""
    met, seen = threading.Barrier(parties, timeout=120), threading.local()

    def meeting(*args: Any, **kwargs: Any) -> T:
        result = call(*args, **kwargs)
        if threading.current_thread() is not exempt and not getattr(seen, "called", False):
            seen.called = True
            with suppress(threading.BrokenBarrierError):
                met.wait()
        return result

    return meeting


def meetings(*, parties: int) -> Callable[[str], None]:
    """``meet(key)`` for a naive control: the callers naming one key wait for each other, ``parties`` of them (at most
    120 s), so each has done what came before (read, checked, voted) before any goes on, however scheduled."""
    barriers: dict[str, threading.Barrier] = {}
    made = threading.Lock()

    def meet(key: str) -> None:
        with made:
            barrier = barriers.setdefault(key, threading.Barrier(parties, timeout=120))
        with suppress(threading.BrokenBarrierError):
            barrier.wait()

    return meet
