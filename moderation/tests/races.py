"""The verdict every guarded race in the tests must reach, whatever raced (decisions, withdrawals)."""

from __future__ import annotations

from moderation.lab.harness import RaceReport
from moderation.models import AttemptOutcome, DecisionAttempt, QueueItem


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
