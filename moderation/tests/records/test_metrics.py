"""The series /metrics reports (moderation.records.metrics): counted after commit, queue state without a COUNT."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from e2e.server import free_port
from moderation.core.faults import fault_inject
from moderation.delivery.models import WebhookDelivery, WebhookEndpoint
from moderation.delivery.sending import delivery_attempt
from moderation.items.models import QueueItem, ReviewAsk
from moderation.policies.models import Team
from moderation.records import metrics
from moderation.records.metrics import metrics_attempt_record, metrics_exposition
from moderation.records.models import AttemptOutcome, DecisionAttempt
from moderation.review.apply import ApplyOutcome, item_apply
from moderation.review.deadlines import ask_deadline_fire
from moderation.review.decisions import ask_escalate, item_decide
from moderation.review.items import item_create
from moderation.tests.webhook_receiver import Receiver

# Counter rows are written by an upsert whose SQL differs per backend.
pytestmark = pytest.mark.postgres_variant


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _scraped() -> dict[tuple, float]:
    """The queue-state series of one scrape, keyed by (name, sorted labels)."""
    body, _ = metrics_exposition()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


@pytest.mark.django_db(transaction=True)
def test_a_race_counts_one_win_one_loss_and_the_time_to_decision(alice, bob, make_item):
    item = make_item()
    won, lost = _value("reviewqueue_decisions_total", outcome="won"), _value("reviewqueue_decisions_total", outcome="lost")
    waits = _value("reviewqueue_time_to_decision_seconds_count")
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve").won
    assert not item_decide(item_public_id=item.public_id, reviewer=bob, decision="reject").won
    assert _value("reviewqueue_decisions_total", outcome="won") == won + 1
    assert _value("reviewqueue_decisions_total", outcome="lost") == lost + 1
    assert _value("reviewqueue_time_to_decision_seconds_count") == waits + 1


@pytest.mark.django_db(transaction=True)
def test_a_loss_asked_before_the_winner_was_recorded_is_a_lost_race_and_nothing_counts_before_commit(alice, make_item):
    item = make_item()
    now = timezone.now()
    raced = DecisionAttempt(outcome=AttemptOutcome.LOST, requested_at=now - timedelta(seconds=1), winner_decided_at=now)
    stale = DecisionAttempt(outcome=AttemptOutcome.LOST, requested_at=now + timedelta(seconds=5), winner_decided_at=now)
    races, lost = _value("reviewqueue_lost_races_total"), _value("reviewqueue_decisions_total", outcome="lost")
    with transaction.atomic():
        metrics_attempt_record(attempt=raced, item_created_at=item.created_at)
        metrics_attempt_record(attempt=stale, item_created_at=item.created_at)
        assert _value("reviewqueue_lost_races_total") == races  # not yet: the transaction may roll back
    assert _value("reviewqueue_lost_races_total") == races + 1
    assert _value("reviewqueue_decisions_total", outcome="lost") == lost + 2
    with pytest.raises(RuntimeError), transaction.atomic():
        metrics_attempt_record(attempt=raced, item_created_at=item.created_at)
        raise RuntimeError("rolled back")
    assert _value("reviewqueue_lost_races_total") == races + 1


@pytest.mark.django_db(transaction=True)
def test_an_apply_observes_its_lag(alice, make_item):
    item = make_item()
    lags = _value("reviewqueue_apply_lag_seconds_count")
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    item_apply(item_id=item.pk)
    assert ReviewAsk.objects.get(item=item).applied_at is not None
    assert _value("reviewqueue_apply_lag_seconds_count") == lags + 1


@pytest.mark.django_db(transaction=True)
def test_pending_items_by_team_graph_and_band_are_read_from_counters_not_counted(payments):
    leads = Team.objects.create(slug="leads", name="Leads")
    Team.objects.filter(pk=payments.pk).update(escalate_to=leads, deadline_seconds=60, on_deadline="escalate")
    for _ in range(2):
        item_create(title="Refund", body="Order 7.", source="shop", team="payments")
    item_create(title="Post", body="Text.", source="forum")
    with CaptureQueriesContext(connection) as queries:
        scraped = _scraped()
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper() and "queueitem" in q["sql"].lower()]
    assert counts == []
    assert scraped[("reviewqueue_pending_items", (("band", "normal"), ("graph", "moderation"), ("team", "payments")))] == 2
    assert scraped[("reviewqueue_pending_items", (("band", "normal"), ("graph", "moderation"), ("team", "")))] == 1
    assert scraped[("reviewqueue_oldest_pending_age_seconds", (("team", "payments"),))] >= 0
    # An escalation moves the item to the leads, one band up, and is counted.
    escalations = _value("reviewqueue_escalations_total")
    ask = ReviewAsk.objects.filter(item__team=payments).first()
    ReviewAsk.objects.filter(pk=ask.pk).update(deadline_at=timezone.now() - timedelta(seconds=1))
    assert _scraped()[("reviewqueue_deadline_overdue_seconds", ())] > 0
    assert ask_escalate(ask_pk=ask.pk)
    scraped = _scraped()
    assert scraped[("reviewqueue_pending_items", (("band", "normal"), ("graph", "moderation"), ("team", "payments")))] == 1
    assert scraped[("reviewqueue_pending_items", (("band", "high"), ("graph", "moderation"), ("team", "leads")))] == 1
    assert _value("reviewqueue_escalations_total") == escalations + 1
    assert QueueItem.objects.filter(team=leads).count() == 1


@pytest.mark.django_db
def test_a_lockout_is_counted(alice, settings):
    settings.AXES_FAILURE_LIMIT = 2
    lockouts = _value("reviewqueue_login_lockouts_total")
    client = Client(REMOTE_ADDR="10.0.0.9")
    for _ in range(3):
        client.post(reverse("login"), {"username": "alice", "password": "wrong"})
    assert _value("reviewqueue_login_lockouts_total") >= lockouts + 1


def test_an_open_connection_is_counted_while_it_is_open():
    before = _value("reviewqueue_open_connections", kind="socket")
    with metrics.metrics_open_track(kind="socket"):
        assert _value("reviewqueue_open_connections", kind="socket") == before + 1
    assert _value("reviewqueue_open_connections", kind="socket") == before


@pytest.mark.django_db(transaction=True)
def test_a_failed_apply_is_counted(settings, alice, make_item):
    settings.REVIEWQUEUE_APPLY_INLINE = False
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    failures = _value("reviewqueue_apply_failures_total")

    def explode(key):
        raise RuntimeError("the publisher is down")

    with fault_inject("in_apply_node", explode):
        assert [r.outcome for r in item_apply(item_id=item.pk)] == [ApplyOutcome.FAILED]
    assert _value("reviewqueue_apply_failures_total") == failures + 1


@pytest.mark.django_db(transaction=True)
def test_webhook_attempts_and_failures_are_counted_by_endpoint(make_item):
    receiver = Receiver().start()
    try:
        up = WebhookEndpoint.objects.create(name="up", url=receiver.url, events=["item.created"])
        receiver.secret = up.secret
        down = WebhookEndpoint.objects.create(name="down", url=f"http://127.0.0.1:{free_port()}/", events=["item.created"])
        item = make_item()
        before = {
            e.pk: (
                _value("reviewqueue_webhook_attempts_total", endpoint=str(e.pk)),
                _value("reviewqueue_webhook_failures_total", endpoint=str(e.pk)),
            )
            for e in (up, down)
        }
        for delivery in WebhookDelivery.objects.filter(item_public_id=item.public_id):
            delivery_attempt(delivery_id=delivery.pk)
        backlog = _scraped()[("reviewqueue_webhook_backlog", (("endpoint", str(down.pk)),))]
    finally:
        receiver.stop()
    assert _value("reviewqueue_webhook_attempts_total", endpoint=str(up.pk)) == before[up.pk][0] + 1
    assert _value("reviewqueue_webhook_failures_total", endpoint=str(up.pk)) == before[up.pk][1]
    assert _value("reviewqueue_webhook_attempts_total", endpoint=str(down.pk)) == before[down.pk][0] + 1
    assert _value("reviewqueue_webhook_failures_total", endpoint=str(down.pk)) == before[down.pk][1] + 1
    assert backlog == 1  # the refused one waits for its retry


@pytest.mark.django_db(transaction=True)
def test_a_deadline_that_settles_an_ask_is_counted_by_its_action(payments):
    Team.objects.filter(pk=payments.pk).update(deadline_seconds=60, on_deadline="reject")
    item = item_create(title="Refund", body="Order 7.", source="shop", team="payments")
    ReviewAsk.objects.filter(item=item).update(deadline_at=timezone.now() - timedelta(seconds=1))
    fires = _value("reviewqueue_deadline_fires_total", action="reject")
    assert ask_deadline_fire(ask_pk=ReviewAsk.objects.get(item=item).pk).acted
    assert _value("reviewqueue_deadline_fires_total", action="reject") == fires + 1
