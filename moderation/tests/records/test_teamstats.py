"""The team page's numbers (moderation.records.teamstats): tallied per team and day, read without the items."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from moderation.items.models import ReviewAsk
from moderation.policies.models import Team
from moderation.records import teamstats
from moderation.records.models import DecisionAttempt
from moderation.records.teamstats import fleiss_kappa, team_stats_read, wait_quantile
from moderation.review.deadlines import ask_deadline_fire
from moderation.review.decisions import item_decide
from moderation.review.items import item_create

# Counter rows are written by an upsert whose SQL differs per backend.
pytestmark = pytest.mark.postgres_variant


def test_fleiss_kappa_is_one_for_full_agreement_zero_at_chance_and_none_below_two_items():
    assert fleiss_kappa([Counter(approve=3), Counter(reject=3), Counter(approve=2)]) == 1.0
    assert fleiss_kappa([Counter(approve=1, reject=1), Counter(approve=1, reject=1)]) == pytest.approx(-1.0)
    # Fleiss (1971)'s form on a small table: two items, three raters.
    assert fleiss_kappa([Counter(approve=2, reject=1), Counter(approve=3)]) == pytest.approx(-0.2)
    assert fleiss_kappa([Counter(approve=2)]) is None


def test_quantiles_interpolate_within_the_bucket():
    assert wait_quantile(Counter({10: 1, 30: 1}), 0.5) == 10
    assert wait_quantile(Counter({60: 4}), 0.5) == pytest.approx(45)  # halfway through (30, 60]
    assert wait_quantile(Counter(), 0.5) is None


@pytest.mark.django_db(transaction=True)
def test_a_teams_day_tallies_decisions_waits_races_misses_escalations_and_agreement(payments, alice, bob, carol):
    leads = Team.objects.create(slug="leads", name="Leads")
    Team.objects.filter(pk=payments.pk).update(approvals=2, escalate_to=leads, on_deadline="escalate", deadline_seconds=60)
    payments.refresh_from_db()
    today = timezone.localdate()
    voted = [item_create(title=f"Refund {i}", body="Order.", source="shop", team="payments") for i in range(3)]
    for item, votes in zip(voted, [("approve", "approve"), ("reject", "reject"), ("approve", "reject")], strict=False):
        for who, vote in zip((alice, bob), votes, strict=False):
            item_decide(item_public_id=item.public_id, reviewer=who, decision=vote)
    late = item_create(title="Refund late", body="Order.", source="shop", team="payments")
    ReviewAsk.objects.filter(item=late).update(deadline_at=timezone.now() - timedelta(seconds=1))
    assert ask_deadline_fire(ask_pk=ReviewAsk.objects.get(item=late).pk).acted  # escalated to the leads
    with CaptureQueriesContext(connection) as queries:
        stats = team_stats_read(team=payments, days=7, today=today)
    assert not [q for q in queries.captured_queries if "decisionattempt" in q["sql"].lower() or "COUNT(" in q["sql"].upper()]
    totals = stats.totals
    # Two items settled by bob's second vote; the split one waits for a second approval.
    assert DecisionAttempt.objects.filter(item__in=voted, outcome="won").count() == 2
    assert totals.decided == 2
    assert stats.moderators == [teamstats.ModeratorRow(name="bob", decided=2, lost_races=0)]
    assert totals.p50 is not None and 0 <= totals.p50 <= 10
    assert totals.escalations == 1
    assert stats.agreement.items == 3
    assert stats.agreement.kappa == pytest.approx(
        fleiss_kappa([Counter(approve=2), Counter(reject=2), Counter(approve=1, reject=1)])
    )
    assert len(stats.days) == 7 and stats.days[-1].day == today
    assert stats.pending == 1  # the split vote; the late item left for the leads
    assert team_stats_read(team=leads, days=7, today=today).pending == 1


def race_lose(*, item, user, monkeypatch) -> None:
    """``user`` loses a real race on ``item``: asked before the winner was recorded (not a stale page)."""
    before = timezone.now() - timedelta(seconds=5)
    with monkeypatch.context() as patched:
        patched.setattr(timezone, "now", lambda: before)
        assert not item_decide(item_public_id=item.public_id, reviewer=user, decision="reject").won


@pytest.mark.django_db
def test_a_moderator_who_only_lost_races_is_counted_among_the_moderators(payments, alice, carol, monkeypatch):
    """Issue 40.9: "Decisions per moderator" left out a moderator who only lost races."""
    item = item_create(title="Refund", body="Order.", source="shop", team="payments")
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve").won
    race_lose(item=item, user=carol, monkeypatch=monkeypatch)
    stats = team_stats_read(team=payments, days=7, today=timezone.localdate())
    assert stats.moderators == [
        teamstats.ModeratorRow(name="alice", decided=1, lost_races=0),
        teamstats.ModeratorRow(name="carol", decided=0, lost_races=1),
    ]
    assert stats.totals.lost_races == 1
