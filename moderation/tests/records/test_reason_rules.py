"""Reason rules per team and per graph: each level of the resolution, the item page's reject form,
the moderators' JSON API, bulk, the ``team`` command and the admin, and the message an agent's
pass-through ask receives."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError
from django.test import Client

from moderation.api.clients import apiclient_create
from moderation.items.models import AskStatus, ItemStatus, QueueItem
from moderation.records.models import DecisionAttempt, ReasonCode, ReasonOffer, ReasonRule
from moderation.records.reasons import ReasonInvalid, reason_rule, reason_rule_save
from moderation.review.bulk import BulkInvalid, items_decide_bulk
from moderation.review.decisions import InvalidDecision, item_decide
from moderation.review.items import item_create
from moderation.tests.api.test_api_items import Api

pytestmark = pytest.mark.django_db

ACTIVE = ["spam", "abuse", "off_topic", "duplicate", "other"]
FOR_TOOL_CALLS = ["other", "wrong_arguments", "not_permitted", "needs_information", "wrong_action"]  # the ask graph's kind
TOOL_CALL = {
    "action_requests": [{"name": "delete_customer", "args": {"id": "C-7"}, "description": "Delete customer C-7?"}],
    "review_configs": [{"action_name": "delete_customer", "allowed_decisions": ["approve", "reject"]}],
}
MESSAGE = "do not delete paying customers"


@pytest.fixture(autouse=True)
def _codes(reasons, settings):
    """The seeded codes; codes required wherever no rule says otherwise (the production default)."""
    settings.REJECT_REASON_REQUIRED = True
    settings.REJECT_REASON_REQUIRED_BY_GRAPH = {"ask": False}


def _resolved(team_id, graph):
    rule = reason_rule(team_id=team_id, graph=graph)
    return rule.code_names, rule.required, rule.source


# --- resolution -----------------------------------------------------------------------------


def test_each_level_of_the_resolution_in_its_order(payments, settings):
    # 4. The global setting.
    assert _resolved(None, "moderation") == (ACTIVE, True, "REJECT_REASON_REQUIRED")
    assert _resolved(payments.pk, "moderation") == (ACTIVE, True, "REJECT_REASON_REQUIRED")
    # 3. The setting by graph, over the global one.
    assert _resolved(payments.pk, "ask") == (FOR_TOOL_CALLS, False, "REJECT_REASON_REQUIRED_BY_GRAPH['ask']")
    # 2. The team's own rule, over both settings, for every graph of the team.
    reason_rule_save(team=payments, offer=ReasonOffer.LISTED, codes=["spam", "abuse"], required=True)
    assert _resolved(payments.pk, "ask") == (["spam", "abuse"], True, "team payments")
    assert _resolved(payments.pk, "moderation") == (["spam", "abuse"], True, "team payments")
    assert _resolved(None, "ask") == (FOR_TOOL_CALLS, False, "REJECT_REASON_REQUIRED_BY_GRAPH['ask']")  # no team: settings
    # 1. The team's rule for the graph, over the team's own.
    reason_rule_save(team=payments, graph="ask", offer=ReasonOffer.NONE)
    assert _resolved(payments.pk, "ask") == ([], False, "team payments, graph ask")
    assert _resolved(payments.pk, "moderation") == (["spam", "abuse"], True, "team payments")
    # Another team's rules are not this one's.
    other = payments.__class__.objects.create(slug="other", name="Other")
    assert _resolved(other.pk, "ask") == (FOR_TOOL_CALLS, False, "REJECT_REASON_REQUIRED_BY_GRAPH['ask']")


def test_a_listed_rule_offers_only_its_active_codes_and_one_left_with_none_requires_none(payments):
    reason_rule_save(team=payments, offer=ReasonOffer.LISTED, codes=["duplicate", "spam"], required=True)
    assert _resolved(payments.pk, "x")[:2] == (["spam", "duplicate"], True)  # the admin's order
    ReasonCode.objects.filter(code__in=["spam", "duplicate"]).update(active=False)
    assert _resolved(payments.pk, "x")[:2] == ([], False)  # a reject is never made impossible


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"offer": "some"}, "offer must be one of"),
        ({"offer": ReasonOffer.LISTED, "codes": ["spam", "nope"]}, "unknown or retired reason codes: 'nope'"),
        ({"offer": ReasonOffer.LISTED, "codes": []}, "list the codes"),
        ({"offer": ReasonOffer.NONE, "required": True}, "offers no codes cannot require one"),
        ({"graph": "g" * 65, "offer": ReasonOffer.ALL}, "at most 64 characters"),
        ({"graph": "a\x00", "offer": ReasonOffer.ALL}, "NUL"),
    ],
)
def test_a_bad_rule_is_refused_and_nothing_is_saved(payments, kwargs, message):
    with pytest.raises(ReasonInvalid, match=message):
        reason_rule_save(team=payments, **kwargs)
    assert not ReasonRule.objects.exists()


def test_the_database_refuses_a_rule_that_offers_none_and_requires_one(payments):
    with pytest.raises(IntegrityError):
        ReasonRule.objects.create(team=payments, offer=ReasonOffer.NONE, required=True)


# --- the guard --------------------------------------------------------------------------------


def _team_item():
    return item_create(title="A post", body="Some text.", source="test", team="payments")


def _unchanged(item) -> None:
    item.refresh_from_db()
    assert item.status == ItemStatus.PENDING and item.asks.get().status == AskStatus.PENDING
    assert not DecisionAttempt.objects.filter(item=item).exists()


def test_the_guard_judges_a_reject_by_the_items_own_rule(payments, alice):
    reason_rule_save(team=payments, offer=ReasonOffer.LISTED, codes=["abuse"], required=True)
    item = _team_item()
    for reason, needle in [
        (None, "choose a reason for the rejection: one of abuse"),
        ("spam", "'spam' does not apply to this item; choose from abuse"),
    ]:
        with pytest.raises(InvalidDecision, match=needle) as caught:
            item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject", reason=reason)
        assert caught.value.field == "reason"
        _unchanged(item)
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject", reason="abuse", note="rude").won
    # Required: the code goes in front of the message, as content graphs expect.
    assert item.asks.get().decisions == [{"type": "reject", "message": "abuse: rude"}]


def test_a_rule_with_no_codes_refuses_a_code_and_lets_a_reject_go_without(payments, alice):
    reason_rule_save(team=payments, offer=ReasonOffer.NONE)
    item = _team_item()
    with pytest.raises(InvalidDecision, match="no reason codes apply to this item's rejections"):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject", reason="spam")
    _unchanged(item)
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject", note="not for us").won
    assert item.asks.get().decisions == [{"type": "reject", "message": "not for us"}]


# --- an agent's ask: the message exactly as typed ---------------------------------------------


@pytest.fixture
def agent():
    return Api(apiclient_create(name="agent", scopes=["items:write", "items:read"])[1])


def _ask(agent: Api, thread: str = "t1") -> str:
    answer = agent.post(
        "/items",
        {
            "title": "Agent: delete C-7",
            "body": "The agent asks.",
            "source": "agent",
            "team": "payments",
            "ask": TOOL_CALL,
            "external": {"thread_id": thread, "interrupt_id": "i" * 32},
        },
    )
    assert answer.status_code == 201, answer.content
    return answer.json()["id"]


def _page_reject(moderator, item_id: str, **fields):
    http = Client()
    http.force_login(moderator)
    ask = QueueItem.objects.get(public_id=item_id).asks.get().interrupt_id
    return http.post(f"/items/{item_id}/", {"ask": ask, "action-0-type": "reject", **fields})


def test_with_no_codes_for_asks_the_page_offers_none_and_the_agent_gets_the_message_as_typed(payments, alice, agent):
    reason_rule_save(team=payments, offer=ReasonOffer.LISTED, codes=["spam"], required=True)  # the team's content rule
    reason_rule_save(team=payments, graph="ask", offer=ReasonOffer.NONE)
    item_id = _ask(agent)
    http = Client()
    http.force_login(alice)
    page = http.get(f"/items/{item_id}/").content.decode()
    assert 'name="reason"' not in page and "Spam or advertising" not in page
    assert _page_reject(alice, item_id, note=MESSAGE).status_code in (200, 302)
    body = agent.get(f"/items/{item_id}").json()
    assert body["status"] == "rejected"
    assert body["resume"] == {"decisions": [{"type": "reject", "message": MESSAGE}]}
    assert body["asks"][0]["reason"] == ""


def test_an_optional_code_reaches_the_agent_as_data_and_the_message_stays_as_typed(payments, alice, agent):
    reason_rule_save(team=payments, graph="ask", offer=ReasonOffer.LISTED, codes=["other"], required=False)
    item_id = _ask(agent)
    assert _page_reject(alice, item_id, note=MESSAGE, reason="other").status_code in (200, 302)
    body = agent.get(f"/items/{item_id}").json()
    assert body["resume"] == {"decisions": [{"type": "reject", "message": MESSAGE}]}
    assert body["asks"][0]["reason"] == "other"


def test_a_required_code_goes_in_front_of_an_asks_message_when_the_operator_says_so(payments, alice, agent):
    reason_rule_save(team=payments, graph="ask", offer=ReasonOffer.LISTED, codes=["other"], required=True)
    item_id = _ask(agent)
    assert item_decide(item_public_id=item_id, reviewer=alice, decision="reject", note=MESSAGE, reason="other").won
    assert agent.get(f"/items/{item_id}").json()["resume"] == {"decisions": [{"type": "reject", "message": f"other: {MESSAGE}"}]}


# --- the page and the moderators' JSON API ----------------------------------------------------


def test_the_page_offers_only_the_rules_codes_and_refuses_another(payments, alice):
    reason_rule_save(team=payments, offer=ReasonOffer.LISTED, codes=["abuse", "other"], required=True)
    item = _team_item()
    http = Client()
    http.force_login(alice)
    page = http.get(f"/items/{item.public_id}/").content.decode()
    offered = [c for c in ACTIVE if f'<option value="{c}"' in page]
    assert offered == ["abuse", "other"] and "(required to reject)" in page
    response = _page_reject(alice, str(item.public_id), reason="spam", note="x")
    assert response.status_code == 400
    assert "does not apply to this item; choose from abuse, other" in response.content.decode()
    _unchanged(item)


def test_the_json_api_refuses_a_code_the_rule_does_not_offer_with_its_field(payments, alice):
    reason_rule_save(team=payments, offer=ReasonOffer.NONE)
    item = _team_item()
    http = Client()
    http.force_login(alice)
    response = http.post(
        f"/api/items/{item.public_id}/decision",
        json.dumps({"decision": "reject", "reason": "spam"}),
        content_type="application/json",
    )
    body = response.json()
    assert (response.status_code, body["error"], body["field"]) == (400, "invalid_decision", "reason"), body
    assert "no reason codes apply" in body["message"]
    _unchanged(item)
    response = http.post(
        f"/api/items/{item.public_id}/decision", json.dumps({"decision": "reject", "note": "no"}), content_type="application/json"
    )
    assert response.status_code == 200 and response.json()["outcome"] == "won"


def test_bulk_judges_every_items_rule_before_deciding_any(payments, alice, make_item):
    reason_rule_save(team=payments, offer=ReasonOffer.NONE)
    mine, plain = _team_item(), make_item()
    keys = [str(mine.public_id), str(plain.public_id)]
    with pytest.raises(BulkInvalid, match="reason: choose a reason"):  # the plain item's global rule needs one
        items_decide_bulk(item_public_ids=keys, reviewer=alice, decision="reject", note="", reason=None)
    with pytest.raises(BulkInvalid, match="no reason codes apply"):  # the team's takes none
        items_decide_bulk(item_public_ids=keys, reviewer=alice, decision="reject", note="", reason="spam")
    assert not DecisionAttempt.objects.exists()
    [result] = items_decide_bulk(item_public_ids=keys[:1], reviewer=alice, decision="reject", note="", reason=None)
    assert result.outcome == "won"


# --- the team command and the admin -----------------------------------------------------------


def _team(*args: str) -> str:
    out = StringIO()
    call_command("team", *args, stdout=out)
    return out.getvalue()


def test_the_team_command_sets_shows_and_clears_rules(payments):
    said = _team("payments", "--reason-codes", "spam,abuse", "--reason-required", "on")
    assert "reasons spam, abuse required" in said
    said = _team("payments", "--reason-graph", "ask", "--reason-codes", "none")
    assert "reasons spam, abuse required; for ask: no codes" in said
    assert _resolved(payments.pk, "ask")[:2] == ([], False)
    _team("payments", "--reason-graph", "ask", "--reason-clear")
    assert _resolved(payments.pk, "ask")[:2] == (["spam", "abuse"], True)
    _team("payments", "--reason-codes", "all", "--reason-required", "off")
    assert _resolved(payments.pk, "ask")[:2] == (FOR_TOOL_CALLS, False)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--reason-codes", "spam,nope"], "unknown or retired reason codes: 'nope'"),
        (["--reason-codes", "none", "--reason-required", "on"], "offers no codes cannot require one"),
        (["--reason-graph", "ask"], "--reason-graph needs"),
        (["--reason-clear", "--reason-codes", "all"], "--reason-clear goes alone"),
    ],
)
def test_the_team_command_refuses_a_bad_rule_and_changes_nothing(payments, args, message):
    with pytest.raises(CommandError, match=f"nothing changed: .*{message}"):
        _team("payments", "--name", "Renamed", *args)
    payments.refresh_from_db()
    assert payments.name == "Payments" and not ReasonRule.objects.exists()


def test_the_admin_saves_a_teams_rule_and_refuses_a_bad_one(admin_client, payments):
    url = "/admin/moderation/reasonrule/add/"
    rule = {"team": payments.pk, "graph": "ask"}
    bad = admin_client.post(url, {**rule, "offer": "none", "required": "on"})
    assert bad.status_code == 200 and "cannot require one" in bad.content.decode()
    bad = admin_client.post(url, {**rule, "offer": "listed"})
    assert "list the codes the rule offers" in bad.content.decode()
    assert not ReasonRule.objects.exists()
    saved = admin_client.post(url, {**rule, "offer": "listed", "codes": ["other"], "required": "on"})
    assert saved.status_code == 302, saved.content.decode()[:2000]
    assert _resolved(payments.pk, "ask") == (["other"], True, "team payments, graph ask")
    again = admin_client.post(url, {**rule, "offer": "all"})
    assert again.status_code == 200 and ReasonRule.objects.count() == 1  # one rule per team and graph
