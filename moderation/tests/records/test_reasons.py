"""Reason codes: checked before any lock, stored on the ask and the signed attempt, sent to the graph,
shown to losers, in /api/v1 and in webhooks."""

import json
from pathlib import Path

import pytest
from django.test import Client

from moderation.api.clients import apiclient_create
from moderation.delivery.models import WebhookDelivery, WebhookEndpoint, WebhookEvent
from moderation.graphs.runtime import graph_values
from moderation.items.models import AskStatus, ItemStatus, QueueItem
from moderation.records.audit import audit_verify
from moderation.records.models import AttemptOrigin, DecisionAttempt, ReasonCode
from moderation.records.reasons import reason_rule, reason_rule_save
from moderation.review.decisions import InvalidDecision, item_decide
from moderation.review.items import item_create

pytestmark = pytest.mark.django_db

SEEDED = ["spam", "abuse", "off_topic", "duplicate", "other"]
TOOL_CALLS = ["wrong_arguments", "not_permitted", "needs_information", "wrong_action"]
DOCS = Path(__file__).resolve().parents[3] / "docs"


@pytest.fixture(autouse=True)
def _reasons_and_a_retired_one(reasons):
    ReasonCode.objects.update_or_create(code="retired", defaults={"label": "No longer used", "active": False})


@pytest.fixture
def required(settings):
    settings.REJECT_REASON_REQUIRED = True


def test_the_migration_seeds_the_default_list_in_order():
    assert [c.code for c in ReasonCode.objects.filter(active=True)] == SEEDED + TOOL_CALLS


@pytest.mark.parametrize("page", ["moderators/workbench.md", "operators/reason-codes.md"])
def test_the_docs_name_every_seeded_code(page):
    """The moderators' page listed only the content codes after the tool-call ones were seeded (issue 40.6)."""
    text = (DOCS / page).read_text()
    assert [code for code in SEEDED + TOOL_CALLS if f"`{code}`" not in text] == []


def test_an_agents_tool_call_is_offered_reasons_that_fit_tool_calls_and_content_the_content_ones(alice, make_item, payments):
    """Issue 40.6: rejecting an agent's refund asked for "Spam" or "Abusive"."""
    assert reason_rule(team_id=None, graph="ask").code_names == ["other", *TOOL_CALLS]
    assert reason_rule(team_id=None, graph="moderation").code_names == SEEDED
    # A team's rule of "every active code" offers those of the item's kind too.
    reason_rule_save(team=payments, offer="all")
    assert reason_rule(team_id=payments.pk, graph="ask").code_names == ["other", *TOOL_CALLS]
    assert reason_rule(team_id=payments.pk, graph="moderation").code_names == SEEDED
    item = item_create(
        title="Refund",
        body="b",
        source="agent",
        graph="ask",
        graph_input={
            "ask": {
                "action_requests": [{"name": "refund_payment", "args": {"amount": 120}}],
                "review_configs": [{"action_name": "refund_payment", "allowed_decisions": ["approve", "reject"]}],
            },
            "external": {},
        },
    )
    client = Client()
    client.force_login(alice)
    page = client.get(f"/items/{item.public_id}/").content.decode()
    assert "Wrong arguments" in page and "Spam" not in page and "Abusive" not in page


def _unchanged(item) -> None:
    item.refresh_from_db()
    assert item.status == ItemStatus.PENDING and item.attempt_count == 0
    assert item.asks.get().status == AskStatus.PENDING
    assert not DecisionAttempt.objects.filter(item=item).exists()


@pytest.mark.parametrize(
    "reason, needle",
    [
        (None, "choose a reason"),
        ("", "choose a reason"),
        ("nonsense", "not one of the active"),
        ("retired", "not one of the active"),
        (7, "must be a reason code"),
    ],
)
def test_a_reject_needs_an_active_reason_when_required_and_nothing_changes_without_one(
    required, alice, make_item, reason, needle
):
    item = make_item()
    with pytest.raises(InvalidDecision, match=needle) as caught:
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject", reason=reason)
    assert caught.value.field == "reason"
    _unchanged(item)


def test_a_reason_goes_with_a_reject_only(alice, make_item):
    item = make_item()
    with pytest.raises(InvalidDecision, match="rejection only") as caught:
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve", reason="spam")
    assert caught.value.field == "reason"
    _unchanged(item)


def test_an_unknown_reason_is_refused_even_when_reasons_are_optional(alice, make_item, settings):
    assert settings.REJECT_REASON_REQUIRED is False
    item = make_item()
    with pytest.raises(InvalidDecision):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject", reason="nonsense")
    _unchanged(item)
    # Optional means a reject may go without one.
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject").won


def test_the_reason_is_stored_signed_and_sent_to_the_graph_in_front_of_the_message(
    required,
    alice,
    make_item,
    django_capture_on_commit_callbacks,
):
    item = make_item()
    with django_capture_on_commit_callbacks(execute=True):  # the graph is resumed after the commit
        outcome = item_decide(
            item_public_id=item.public_id,
            reviewer=alice,
            decision="reject",
            note="link farm",
            reason="spam",
            origin=AttemptOrigin.DASHBOARD,
        )
    assert outcome.won and outcome.reason == "spam"
    ask = item.asks.get()
    assert ask.reason == "spam" and ask.decisions == [{"type": "reject", "message": "spam: link farm"}]
    attempt = DecisionAttempt.objects.get(item=item)
    assert (attempt.reason, attempt.origin, attempt.note) == ("spam", "dashboard", "link farm")
    state = graph_values(name=item.graph, thread_id=item.thread_id)
    assert state["decision"]["decisions"] == [{"type": "reject", "message": "spam: link farm"}]
    assert audit_verify().problems == []


@pytest.mark.parametrize("field, forged", [("reason", "abuse"), ("origin", "api")])
def test_an_edited_reason_or_origin_breaks_the_attempts_signature(alice, make_item, field, forged):
    from django.db import connection

    from moderation.records.audit import audit_guard_lifted

    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject", reason="spam", origin="dashboard")
    with audit_guard_lifted(), connection.cursor() as cursor:
        cursor.execute(f"UPDATE {DecisionAttempt._meta.db_table} SET {field} = %s", [forged])
    problems = [str(p) for p in audit_verify().problems]
    assert any("content does not match its hash (edited)" in p for p in problems), problems


def test_an_ask_whose_reason_differs_from_its_winning_entry_is_reported(alice, make_item):
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject", reason="spam")
    item.asks.update(reason="duplicate")
    problems = [str(p) for p in audit_verify().problems]
    assert any("decision differs from its log's winning entry" in p for p in problems), problems


def test_the_loser_is_told_the_winners_reason_and_keeps_their_own(required, alice, bob, make_item):
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject", reason="abuse")
    lost = item_decide(item_public_id=item.public_id, reviewer=bob, decision="reject", reason="spam", note="mine")
    assert not lost.won and lost.reason == "abuse"
    assert lost.loser_notice().endswith("alice rejected it first (reason: abuse)")
    assert "rejected, reason: abuse" in lost.message()
    assert lost.winner_payload()["reason"] == "abuse"
    mine = DecisionAttempt.objects.get(item=item, reviewer=bob)
    assert (mine.outcome, mine.reason, mine.note) == ("lost", "spam", "mine")


def test_the_409_page_shows_the_losers_own_note_and_reason(required, alice, bob, make_item):
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject", reason="abuse")
    http = Client()
    http.force_login(bob)
    ask = item.asks.get().interrupt_id
    response = http.post(
        f"/items/{item.public_id}/",
        {
            "ask": ask,
            "action-0-type": "reject",
            "reason": "spam",
            "note": "my own words",
        },
    )
    assert response.status_code == 409
    page = response.content.decode()
    assert "my own words" in page and 'id="lost-reason"' in page and "<code>spam</code>" in page
    assert "alice rejected this item first (reason: abuse)" in page


def test_the_item_form_offers_the_active_reasons_and_marks_a_missing_one(required, alice, make_item):
    item = make_item()
    http = Client()
    http.force_login(alice)
    page = http.get(f"/items/{item.public_id}/").content.decode()
    assert 'name="reason"' in page and ">Spam or advertising<" in page and "retired" not in page
    ask = item.asks.get().interrupt_id
    response = http.post(f"/items/{item.public_id}/", {"ask": ask, "action-0-type": "reject", "note": "x"})
    assert response.status_code == 400
    assert 'id="decide-form-reason-error"' in response.content.decode()
    _unchanged(item)
    # A reason picked before clicking Approve is not an error: only a reject takes it.
    response = http.post(f"/items/{item.public_id}/", {"ask": ask, "action-0-type": "approve", "reason": "spam"})
    assert response.status_code == 302
    item.refresh_from_db()
    assert item.status == ItemStatus.APPROVED and item.asks.get().reason == ""


def test_the_json_endpoint_takes_a_reason_and_names_the_field_when_it_is_missing(required, alice, make_item):
    item = make_item()
    http = Client()
    http.force_login(alice)
    url = f"/api/items/{item.public_id}/decision"
    response = http.post(url, json.dumps({"decision": "reject"}), content_type="application/json")
    assert response.status_code == 400 and response.json()["field"] == "reason"
    _unchanged(item)
    response = http.post(url, json.dumps({"decision": "reject", "reason": "duplicate"}), content_type="application/json")
    assert response.status_code == 200 and response.json()["reason"] == "duplicate"
    assert DecisionAttempt.objects.get(item=item).origin == AttemptOrigin.API


def test_the_api_item_and_the_webhook_carry_the_reason(required, alice):
    client, token = apiclient_create(name="pipeline", scopes=["items:write", "items:read"])
    WebhookEndpoint.objects.create(name="hook", url="http://127.0.0.1:9/", events=["item.decided"])
    auth = {"Authorization": f"Bearer {token}"}
    submitted = Client().post(
        "/api/v1/items",
        json.dumps({"title": "A post", "body": "Buy now", "source": "pipeline"}),
        content_type="application/json",
        headers=auth,
    )
    item = QueueItem.objects.get(public_id=submitted.json()["id"])
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject", reason="spam", note="ads")
    body = Client().get(f"/api/v1/items/{item.public_id}", headers=auth).json()
    assert [(a["reason"], a["decisions"]) for a in body["asks"]] == [("spam", [{"type": "reject", "message": "spam: ads"}])]
    [delivery] = WebhookDelivery.objects.filter(item_public_id=item.public_id, event=WebhookEvent.ITEM_DECIDED)
    assert delivery.payload["data"]["decision"]["reason"] == "spam"
