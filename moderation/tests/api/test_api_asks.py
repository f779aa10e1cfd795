"""/api/v1 and asks: submitting to a named graph with input, the item's asks, deciding an edit."""

from __future__ import annotations

import hashlib
import json

import pytest
from django.test import Client

from moderation.api.clients import apiclient_create
from moderation.items.models import QueueItem, ReviewAsk
from moderation.review.apply import item_apply
from moderation.review.decisions import InvalidDecision, item_decide
from moderation.review.submissions import INPUT_MAX_BYTES, Submission
from moderation.tests.api.test_api_items import ITEM, Api
from moderation.tests.graphs_support import ORDER_ARGS, REFUND_GRAPH

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_variant, pytest.mark.usefixtures("test_graphs")]

NO_RESPOND = {"allowed": ["approve", "edit", "reject"]}
REFUND = {**ITEM, "title": "Refund order A-1001", "graph": REFUND_GRAPH, "input": NO_RESPOND}


@pytest.fixture
def api():
    return Api(apiclient_create(name="agent", scopes=["items:write", "items:read"])[1])


def _edit(amount: int) -> list[dict]:
    return [{"type": "edit", "edited_action": {"name": "refund", "args": {**ORDER_ARGS, "amount": amount}}}]


def test_submit_to_a_named_graph_starts_it_with_the_input(api):
    response = api.post("/items", REFUND)
    assert response.status_code == 201, response.content
    body = response.json()
    [ask] = body["asks"]
    assert body["graph"] == REFUND_GRAPH and body["status"] == "pending" and body["apply_state"] == ""
    assert ask["action_requests"] == [{"name": "refund", "args": ORDER_ARGS, "description": "Refund the order?"}]
    assert ask["review_configs"][0]["allowed_decisions"] == ["approve", "edit", "reject"]
    assert ask["review_configs"][0]["args_schema"]["properties"]["amount"]["maximum"] == 150
    assert (ask["status"], ask["decided_by"], ask["decisions"], ask["applied"]) == ("pending", None, [], False)
    assert ask["id"] == ReviewAsk.objects.get().interrupt_id
    assert "review_request" not in body  # no client was ever written before asks
    assert QueueItem.objects.get().graph_input == NO_RESPOND


def test_an_unknown_graph_is_refused_listing_the_registered_ones_and_creates_nothing(api):
    response = api.post("/items", {**REFUND, "graph": "refnud"}, **{"Idempotency-Key": "typo"})
    assert response.status_code == 422, response.content
    assert response.json()["message"] == (
        "graph: unknown graph 'refnud'; this server runs moderation, t_failing, t_hitl, t_parallel, t_refund"
    )
    assert not QueueItem.objects.exists() and not ReviewAsk.objects.exists()


@pytest.mark.parametrize(
    ("graph_input", "needle"),
    [
        ({"order": "4711\x00"}, "input strings must not contain NUL"),
        ({"a\x00": 1}, "input keys must not contain NUL"),
        ({"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}}, "input nests deeper than 5"),
        ({"note": "x" * INPUT_MAX_BYTES}, "the limit is 16,384"),
        ([1, 2], "input"),
        ({"body": "harmless"}, "input may not set body"),
    ],
)
def test_bad_input_is_422_and_creates_nothing(api, graph_input, needle):
    response = api.post("/items", {**REFUND, "input": graph_input})
    assert response.status_code == 422, response.content
    assert needle in response.json()["message"]
    assert not QueueItem.objects.exists()


def test_graph_and_input_are_part_of_the_idempotent_content(api):
    first = api.post("/items", REFUND, **{"Idempotency-Key": "r1"})
    assert api.post("/items", REFUND, **{"Idempotency-Key": "r1"}).json()["id"] == first.json()["id"]
    other_input = api.post("/items", {**REFUND, "input": {**NO_RESPOND, "actions": 2}}, **{"Idempotency-Key": "r1"})
    other_graph = api.post("/items", {**REFUND, "graph": "moderation", "input": {}}, **{"Idempotency-Key": "r1"})
    assert (other_input.status_code, other_graph.status_code) == (409, 409)
    assert QueueItem.objects.count() == 1


def test_naming_the_default_graph_is_the_same_content_as_naming_none(api):
    first = api.post("/items", ITEM, **{"Idempotency-Key": "m1"})
    again = api.post("/items", {**ITEM, "graph": "moderation", "input": {}}, **{"Idempotency-Key": "m1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]


def test_a_default_submission_digests_as_before_graphs_could_be_named():
    # Items stored before the upgrade hold this digest; a retry of one must still match it.
    submission = Submission(title="t", body="b", source="s", external_id="e", metadata={"k": 1}, priority=2)
    before = json.dumps(["t", "b", "s", "e", {"k": 1}, 2], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert submission.digest() == hashlib.sha256(before.encode()).hexdigest()


def test_the_item_shows_an_edit_its_decider_and_what_the_graph_did_with_it(api, alice, settings):
    settings.REVIEWQUEUE_APPLY_INLINE = False  # the worker's half runs below, by hand
    item_id = api.post("/items", REFUND).json()["id"]
    ask_id = api.get(f"/items/{item_id}").json()["asks"][0]["id"]
    assert item_decide(item_public_id=item_id, reviewer=alice, ask=ask_id, decisions=_edit(80)).won
    decided = api.get(f"/items/{item_id}").json()
    assert (decided["status"], decided["apply_state"], decided["asks"][0]["applied"]) == ("edited", "applying", False)

    item_apply(item_id=QueueItem.objects.get(public_id=item_id).pk)
    body = api.get(f"/items/{item_id}").json()
    [ask] = body["asks"]
    assert (ask["status"], ask["decided_by"], ask["applied"]) == ("decided", "alice", True)
    assert ask["decisions"] == _edit(80) and ask["what"] == "edited refund (amount 120 → 80)"
    assert body["apply_state"] == "" and body["applied_result"] == {
        "state": "finished",
        "summary": "",
        "errors": [],
        "result": {"decisions": "edit", "reviewer": "alice", "args": [{**ORDER_ARGS, "amount": 80}]},
    }
    assert body["decision"]["by"] == "alice"


def test_an_edit_failing_the_schema_changes_nothing(api, alice):
    item_id = api.post("/items", REFUND).json()["id"]
    with pytest.raises(InvalidDecision) as refused:
        item_decide(item_public_id=item_id, reviewer=alice, decisions=_edit(9000))
    assert refused.value.field == "decisions[0].edited_action.args.amount"
    assert api.get(f"/items/{item_id}").json()["asks"][0]["status"] == "pending"


def test_the_list_filters_by_graph(api):
    refunds = [api.post("/items", REFUND).json()["id"] for _ in range(2)]
    api.post("/items", ITEM)
    listed = api.get("/items", graph=REFUND_GRAPH).json()["items"]
    assert [i["id"] for i in listed] == refunds
    assert all(i["asks"][0]["action_requests"][0]["name"] == "refund" for i in listed)
    assert len(api.get("/items", graph="moderation").json()["items"]) == 1


def test_the_session_endpoint_decides_an_edit_as_the_readme_shows(api, alice):
    """The README's curl example: ask + LangChain decisions on /api/items/<id>/decision."""
    item_id = api.post("/items", REFUND).json()["id"]
    ask_id = api.get(f"/items/{item_id}").json()["asks"][0]["id"]
    browser = Client()
    browser.force_login(alice)

    def decide(decisions):
        return browser.post(
            f"/api/items/{item_id}/decision", {"ask": ask_id, "decisions": decisions}, content_type="application/json"
        )

    bad = decide(_edit(-1))
    assert bad.status_code == 400, bad.content
    assert (bad.json()["error"], bad.json()["field"]) == ("invalid_decision", "decisions[0].edited_action.args.amount")
    won = decide(_edit(80))
    assert won.status_code == 200, won.content
    assert (won.json()["ask"], won.json()["what"]) == (ask_id, "edited refund (amount 120 → 80)")
    lost = decide([{"type": "approve"}])
    assert lost.status_code == 409
    assert lost.json()["message"].startswith("Already reviewed by alice (edited refund (amount 120 → 80),")
