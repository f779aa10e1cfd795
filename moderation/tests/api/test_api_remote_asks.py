"""/api/v1 asks from agents running elsewhere: POST /items with ``ask``, run by the pass-through graph."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from django.core.exceptions import ValidationError as DjangoValidationError
from django.test import Client

from moderation.api.clients import apiclient_create
from moderation.delivery.models import WebhookDelivery, WebhookEndpoint
from moderation.graphs.asks import AskSpec
from moderation.graphs.runtime import PendingAsk
from moderation.items.models import QueueItem, ReviewAsk
from moderation.policies.models import Team
from moderation.review.apply import asks_create, item_apply
from moderation.review.decisions import InvalidDecision, item_decide
from moderation.review.submissions import Submission, submission_check
from moderation.tests.api.test_api_items import Api

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_variant]

# A JSON Schema as a tool's pydantic model gives it: nested objects under $defs, anyOf.
ARGS_SCHEMA = {
    "type": "object",
    "required": ["customer"],
    "properties": {"customer": {"$ref": "#/$defs/Customer"}, "reason": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
    "$defs": {
        "Customer": {
            "type": "object",
            "required": ["id"],
            "properties": {
                "id": {"type": "string"},
                "address": {
                    "type": "object",
                    "properties": {
                        "lines": {
                            "type": "array",
                            "items": {"type": "object", "properties": {"text": {"type": "string", "maxLength": 80}}},
                        }
                    },
                },
            },
        }
    },
}
HITL = {
    "action_requests": [
        {"name": "delete_customer", "args": {"customer": {"id": "C-7"}}, "description": "Delete customer C-7?"},
        {"name": "send_email", "args": {"to": "c7@example.com"}, "description": ""},
    ],
    "review_configs": [
        {"action_name": "delete_customer", "allowed_decisions": ["approve", "edit", "reject"], "args_schema": ARGS_SCHEMA},
        {"action_name": "send_email", "allowed_decisions": ["approve", "reject", "respond"]},
    ],
}
EXTERNAL = {"thread_id": "support-thread-9", "interrupt_id": "a" * 32, "run_id": "run-1"}
ASK = {
    "title": "Agent: delete customer C-7",
    "body": "The support agent proposes two actions.",
    "source": "support-agent",
    "ask": HITL,
    "external": EXTERNAL,
}

# The clock the deadline tests read: a deadline is now + its seconds, exactly, however busy the machine.
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def api():
    return Api(apiclient_create(name="agent", scopes=["items:write", "items:read"])[1])


def _depth(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels - 1):
        value = {"k": value}
    return value


def test_a_hitl_ask_renders_as_in_process_asks_do_and_its_natural_key_is_thread_and_interrupt(api):
    response = api.post("/items", ASK)
    assert response.status_code == 201, response.content
    body = response.json()
    [ask] = body["asks"]
    assert body["graph"] == "ask" and body["status"] == "pending" and body["external"] == EXTERNAL
    assert [a["name"] for a in ask["action_requests"]] == ["delete_customer", "send_email"]
    assert ask["review_configs"][0] == {
        "action_name": "delete_customer",
        "allowed_decisions": ["approve", "edit", "reject"],
        "args_schema": ARGS_SCHEMA,
    }
    assert body["external_id"] == f"support-thread-9:{'a' * 32}" and body["resume"] is None and ask["resume"] is None
    again = api.post("/items", ASK)
    assert again.status_code == 200 and again.json()["id"] == body["id"]
    assert QueueItem.objects.count() == 1


def test_the_decision_comes_back_in_langchains_resume_format_with_the_reject_note_unmangled(api, alice, reasons):
    item_id = api.post("/items", ASK).json()["id"]
    decisions = [
        {"type": "edit", "edited_action": {"name": "delete_customer", "args": {"customer": {"id": "C-8"}}}},
        {"type": "reject", "message": "do not delete paying customers"},
    ]
    assert item_decide(item_public_id=item_id, reviewer=alice, decisions=decisions).won
    body = api.get(f"/items/{item_id}").json()
    assert body["resume"] == {"decisions": decisions} and body["asks"][0]["resume"] == {"decisions": decisions}
    item_apply(item_id=QueueItem.objects.get(public_id=item_id).pk)
    body = api.get(f"/items/{item_id}").json()
    assert body["applied_result"]["state"] == "finished"
    assert body["applied_result"]["result"]["answer"]["decisions"] == decisions


def test_any_other_json_is_the_generic_review_ask_resumed_with_the_decision(api, alice):
    item_id = api.post("/items", {**ASK, "ask": ["any", {"json": 1}], "external": None}).json()["id"]
    [ask] = api.get(f"/items/{item_id}").json()["asks"]
    assert ask["action_requests"] == [{"name": "review", "args": {"value": ["any", {"json": 1}]}, "description": ""}]
    assert item_decide(item_public_id=item_id, reviewer=alice, decisions=[{"type": "respond", "message": "use v2"}]).won
    assert api.get(f"/items/{item_id}").json()["resume"] == {"type": "respond", "message": "use v2"}


def test_an_edit_failing_the_asks_own_schema_is_refused_before_any_lock(api, alice):
    item_id = api.post("/items", ASK).json()["id"]
    bad = [{"type": "edit", "edited_action": {"name": "delete_customer", "args": {"customer": {"id": 7}}}}, {"type": "approve"}]
    with pytest.raises(InvalidDecision) as refused:
        item_decide(item_public_id=item_id, reviewer=alice, decisions=bad)
    assert refused.value.field == "decisions[0].edited_action.args.customer.id"
    assert ReviewAsk.objects.get().status == "pending"


def test_an_ask_may_nest_32_levels_not_33(api):
    assert api.post("/items", {**ASK, "ask": _depth(32)}).status_code == 201
    refused = api.post("/items", {**ASK, "ask": _depth(33), "external": {"thread_id": "t2", "interrupt_id": "i2"}})
    assert refused.status_code == 422 and refused.json()["message"] == "ask: ask nests deeper than 32 levels"
    assert QueueItem.objects.count() == 1


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"ask": {"x": "y" * 70_000}}, "ask: ask is 70,008 bytes as JSON; the limit is 65,536"),
        ({"ask": {"x": "nul\u0000"}}, "ask: ask strings must not contain NUL (\\u0000) characters"),
        ({"graph": "moderation"}, "graph: an ask runs under the built-in 'ask' graph; leave graph out"),
        ({"input": {"a": 1}}, "input: an ask is its graph's whole input; leave input out"),
        ({"ask": None}, "external: external names the agent behind an ask; send it with ask"),
        ({"external": {"thread_id": "t", "interrupt_id": "i" * 65}}, "external.interrupt_id"),
        ({"external": {"thread": "t"}}, "external.thread"),
    ],
)
def test_bad_asks_are_422_naming_the_field_and_create_nothing(api, change, needle):
    response = api.post("/items", {**ASK, **change})
    assert response.status_code == 422, response.content
    assert needle in response.json()["message"]
    assert not QueueItem.objects.exists()


def test_a_reject_on_an_ask_needs_no_content_moderation_reason_but_other_graphs_still_do(api, alice, reasons, settings):
    settings.REJECT_REASON_REQUIRED = True
    item_id = api.post("/items", {**ASK, "ask": {"question": "ship it?"}}).json()["id"]
    assert item_decide(item_public_id=item_id, reviewer=alice, decision="reject", note="not yet").won
    assert api.get(f"/items/{item_id}").json()["resume"] == {"type": "reject", "message": "not yet"}
    post = api.post("/items", {"title": "A post", "body": "text", "source": "s"}).json()["id"]
    with pytest.raises(InvalidDecision) as refused:
        item_decide(item_public_id=post, reviewer=alice, decision="reject", note="no")
    assert refused.value.field == "reason"


def test_item_decided_webhooks_echo_external_and_carry_the_resume_value(api, alice):
    WebhookEndpoint.objects.create(name="agent", url="http://agent.test/hooks", events=["item.created", "item.decided"])
    item_id = api.post("/items", ASK).json()["id"]
    decisions = [{"type": "approve"}, {"type": "reject", "message": "no email"}]
    assert item_decide(item_public_id=item_id, reviewer=alice, decisions=decisions).won
    created, decided = (d.payload["data"] for d in WebhookDelivery.objects.filter(item_public_id=item_id).order_by("sequence"))
    assert created["external"] == EXTERNAL and created["decision"] is None
    assert decided["external"] == EXTERNAL and decided["decision"]["resume"] == {"decisions": decisions}


def test_the_item_page_shows_the_agents_ids_and_needs_no_reason_for_a_reject(api, alice, settings):
    settings.REJECT_REASON_REQUIRED = True
    item_id = api.post("/items", ASK).json()["id"]
    browser = Client()
    browser.force_login(alice)
    page = browser.get(f"/items/{item_id}/").content.decode()
    assert f"thread <code>support-thread-9</code> · interrupt <code>{'a' * 32}</code> · run <code>run-1</code>" in page
    assert "required to reject" not in page


EDIT_C8 = [
    {"type": "edit", "edited_action": {"name": "delete_customer", "args": {"customer": {"id": "C-8"}, "reason": "dup"}}},
    {"type": "approve"},
]
EDITS_C8 = [
    {
        "index": 0,
        "action": "delete_customer",
        "changes": [
            {"arg": "customer", "change": "changed", "before": {"id": "C-7"}, "after": {"id": "C-8"}},
            {"arg": "reason", "change": "added", "before": None, "after": "dup"},
        ],
    }
]


def test_what_an_edit_changed_is_in_the_item_decided_webhook_and_the_ask(api, alice):
    WebhookEndpoint.objects.create(name="agent", url="http://agent.test/hooks", events=["item.decided"])
    item_id = api.post("/items", ASK).json()["id"]
    assert item_decide(item_public_id=item_id, reviewer=alice, decisions=EDIT_C8).won
    [decided] = (d.payload["data"] for d in WebhookDelivery.objects.filter(item_public_id=item_id))
    assert decided["decision"]["edits"] == EDITS_C8
    assert decided["decision"]["what"] == (
        'edited delete_customer (customer {"id": "C-7"} → {"id": "C-8"}, reason added: dup); approved send_email'
    )
    assert api.get(f"/items/{item_id}").json()["asks"][0]["edits"] == EDITS_C8


XSS = '<script>alert("x")</script>'
CONTEXT = {
    "summary": f"The customer **asked twice**. {XSS}\n\n[pay](javascript:alert(1)) ![pixel](http://evil.test/p.png)",
    "messages": [
        {"role": "human", "content": f"Delete my account\nplease {XSS}"},
        {"role": "tool", "name": "crm_lookup", "content": "C-7: 2 open orders"},
    ],
}


def test_an_ask_carries_the_agents_context_rendered_without_html(api, alice):
    response = api.post("/items", {**ASK, "context": CONTEXT})
    assert response.status_code == 201, response.content
    item = QueueItem.objects.get()
    assert item.graph_input["context"] == CONTEXT
    browser = Client()
    browser.force_login(alice)
    page = browser.get(f"/items/{item.public_id}/").content.decode()
    section = page[page.index('<section class="card agent-context" id="agent-context">') :]
    section = section[: section.index("</section>")]
    assert XSS not in page and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in section
    assert "<strong>asked twice</strong>" in section  # the Markdown, rendered
    assert 'href="javascript' not in section
    assert "<img" not in section  # no request leaves the page for an image
    assert "Delete my account<br>please &lt;script&gt;" in section
    assert '<strong class="role">tool · crm_lookup</strong>' in section


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"context": {"summary": "x" * 8001}}, "context.summary"),
        ({"context": {"messages": [{"role": "ai", "content": "hi"}] * 21}}, "context.messages"),
        ({"context": {"messages": [{"role": "ai", "content": "x" * 4001}]}}, "context.messages[0].content"),
        ({"context": {"messages": [{"role": "ai"}]}}, "context.messages[0].content"),
        ({"context": {"summary": "hi", "html": "<b>"}}, "context.html"),
        ({"context": "a summary"}, "context"),
        (
            {"context": {"summary": "bell \u0007"}},
            "context.summary: context.summary must not contain the control character U+0007",
        ),
        ({"context": {"messages": [{"role": "ai", "content": "nul \u0000"}]}}, "context.messages[0].content"),
        (
            {"context": {"summary": "hi"}, "ask": None, "external": None},
            "context: context says why an agent asks; send it with ask",
        ),
        ({"context": {"messages": [{"role": "ai", "content": "y" * 4000}] * 9}}, "context: context is larger than 32768 bytes"),
    ],
)
def test_a_bad_context_is_422_naming_the_field_and_creates_nothing(api, change, needle):
    response = api.post("/items", {**ASK, **change})
    assert response.status_code == 422, response.content
    assert needle in response.json()["message"], response.json()["message"]
    assert not QueueItem.objects.exists()


@pytest.mark.parametrize(
    ("context", "field"),
    [
        ("a summary", "context"),
        ({"summary": 3}, "context.summary"),
        ({"messages": {"role": "ai"}}, "context.messages"),
        ({"messages": [{"role": "ai", "content": 7}]}, "context.messages[0]"),
        ({"messages": [{"role": "ai", "content": "hi", "html": "<b>"}]}, "context.messages[0]"),
    ],
)
def test_the_service_refuses_a_context_of_another_shape_whoever_submits_it(context, field):
    # The API's schema refuses these first; a submission from elsewhere meets the service's own check.
    submission = Submission(title="t", body="b", source="s", ask=HITL, context=context)
    with pytest.raises(DjangoValidationError) as refused:
        submission_check(submission=submission, idempotency_key=None)
    assert list(refused.value.message_dict) == [field]


# --- issue 41: an outsider's args_schema, and an ask's own deadline -------------------------------


def _with_schema(schema, **ask_fields) -> dict:
    configs = [{**HITL["review_configs"][0], "args_schema": schema}, HITL["review_configs"][1]]
    return {**ASK, "ask": {**HITL, "review_configs": configs, **ask_fields}}


def _nested_anyof(levels: int) -> dict:
    defs = {f"l{i}": {"anyOf": [{"$ref": f"#/$defs/l{i + 1}"}, {"$ref": f"#/$defs/l{i + 1}"}]} for i in range(levels)}
    return {
        "type": "object",
        "$defs": {**defs, f"l{levels}": {"type": "string"}},
        "properties": {"customer": {"$ref": "#/$defs/l0"}},
    }


@pytest.mark.parametrize(
    ("schema", "field", "needle"),
    [
        ({"$ref": "#"}, "review_configs[0].args_schema", "refers to itself in a loop through $ref"),
        ({"type": 5}, "review_configs[0].args_schema.type", "not a valid JSON Schema"),
        ({"multipleOf": 0}, "review_configs[0].args_schema.multipleOf", "0 is less than or equal to the minimum of 0"),
        ({"minimum": "x"}, "review_configs[0].args_schema.minimum", "'x' is not of type 'number'"),
        (
            {"properties": {"customer": {"$ref": "http://127.0.0.1:8697/x.json"}}},
            "review_configs[0].args_schema.properties.customer.$ref",
            "the server fetches nothing",
        ),
        (
            {"properties": {"memo": {"type": "string", "pattern": "^(?!admin)"}}},
            "review_configs[0].args_schema.properties.memo.pattern",
            "lookahead and lookbehind cannot be matched in linear time",
        ),
        (_nested_anyof(16), "review_configs[0].args_schema", "expands to more than 2,000 subschemas"),
        ("a string", "review_configs[0].args_schema", "args_schema must be a JSON object"),
    ],
)
def test_an_args_schema_the_server_will_not_run_is_422_at_submit_naming_where(api, schema, field, needle):
    response = api.post("/items", _with_schema(schema))
    assert response.status_code == 422, response.content
    message = response.json()["message"]
    assert message.startswith(f"ask.{field}: ") and needle in message
    assert not QueueItem.objects.exists()


def test_a_pattern_that_backtracks_is_taken_at_submit_and_checked_in_linear_time(api, alice):
    schema = {"type": "object", "properties": {"memo": {"type": "string", "pattern": "^(a+)+$"}, "n": {"type": "integer"}}}
    memo = "a" * 40 + "!"  # a backtracking engine needs hours for this one
    ask = {
        "action_requests": [{"name": "pay", "args": {"memo": memo, "n": 1}, "description": ""}],
        "review_configs": [{"action_name": "pay", "allowed_decisions": ["approve", "edit"], "args_schema": schema}],
    }
    item_id = api.post("/items", {**ASK, "ask": ask}).json()["id"]
    edit = [{"type": "edit", "edited_action": {"name": "pay", "args": {"memo": memo, "n": 2}}}]
    with pytest.raises(InvalidDecision) as refused:
        item_decide(item_public_id=item_id, reviewer=alice, decisions=edit)
    assert refused.value.field == "decisions[0].edited_action.args.memo" and "does not match" in str(refused.value)


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {"type": 5},
        {"multipleOf": 0},
        {"minimum": "x"},
        {"type": "object", "properties": {"customer": {"$ref": "http://127.0.0.1:1/x.json"}}},
    ],
)
def test_an_item_stored_with_such_a_schema_refuses_an_edit_with_a_clear_400_not_a_500(api, alice, schema):
    """Items asked before the schema was checked at submit: an edit is refused saying why; approve still works."""
    item_id = api.post("/items", ASK).json()["id"]
    ask = ReviewAsk.objects.get()
    ask.payload["review_configs"][0]["args_schema"] = schema
    ask.save(update_fields=["payload"])
    browser = Client()
    browser.force_login(alice)
    edit = [
        {"type": "edit", "edited_action": {"name": "delete_customer", "args": {"customer": {"id": "C-8"}}}},
        {"type": "approve"},
    ]
    response = browser.post(f"/api/items/{item_id}/decision", {"decisions": edit}, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["field"] == "decisions[0].edited_action.args"
    assert "this ask's args_schema cannot check an edit: " in response.json()["message"]
    assert ReviewAsk.objects.get().status == "pending"
    assert item_decide(item_public_id=item_id, reviewer=alice, decisions=[{"type": "approve"}] * 2).won


@pytest.fixture
def approve_after_an_hour(payments):
    """The probe's team: a 3600 s deadline, then approve (as ``deadline``, no human)."""
    Team.objects.filter(pk=payments.pk).update(deadline_seconds=3600, on_deadline="approve", sources=["support-agent"])
    return payments


def test_an_asks_own_deadline_obeys_the_rule_a_submitted_policy_does(api, approve_after_an_hour):
    policy = api.post("/items", {**ASK, "policy": {"deadline_seconds": 2}})
    assert policy.status_code == 422 and "approves sooner than its approve after 3600 s" in policy.json()["message"]
    sooner = api.post("/items", _with_schema(ARGS_SCHEMA, deadline_seconds=2))
    assert sooner.status_code == 422, sooner.content
    assert sooner.json()["message"] == (
        "ask.deadline_seconds: an ask's own deadline may make its item's policy stricter, never weaker: "
        "deadline_seconds 2 approves sooner than its approve after 3600 s"
    )
    huge = api.post("/items", _with_schema(ARGS_SCHEMA, deadline_seconds=10**15))
    assert huge.status_code == 422 and "deadline_seconds must be a whole number from 1 to" in huge.json()["message"]
    assert not QueueItem.objects.exists()
    # Later than the team's approval is stricter: taken.
    with mock.patch("django.utils.timezone.now", return_value=NOW):
        later = api.post("/items", _with_schema(ARGS_SCHEMA, deadline_seconds=7200))
    assert later.status_code == 201, later.content
    assert ReviewAsk.objects.get().deadline_at == NOW + timedelta(seconds=7200)


def test_an_interrupt_raised_later_with_a_weaker_deadline_keeps_the_policys(api, approve_after_an_hour):
    """A LangGraph deployment's or an in-process graph's interrupt never meets the submit check: asks_create holds it."""
    item = QueueItem.objects.get(public_id=api.post("/items", ASK).json()["id"])
    spec = AskSpec.from_payload({**ReviewAsk.objects.get().payload, "deadline_seconds": 2})
    with mock.patch("django.utils.timezone.now", return_value=NOW):
        [weaker] = asks_create(item=item, asked=[PendingAsk(interrupt_id="later", spec=spec)], round=2)
        [stricter] = asks_create(
            item=item, asked=[PendingAsk(interrupt_id="later2", spec=replace(spec, deadline_seconds=7200))], round=3
        )
    assert weaker.deadline_at == NOW + timedelta(seconds=3600)
    assert stricter.deadline_at == NOW + timedelta(seconds=7200)


@pytest.mark.parametrize("field", ["args_schema", "metadata"])
def test_half_a_surrogate_pair_in_an_ask_is_400_malformed_and_creates_nothing(api, field):
    """A JSON string escape of half a UTF-16 pair (\\ud800) was read into a string no encoder takes: a 500 at submit."""
    payload = {**_with_schema({"type": "object", "description": "MARK-args_schema"}), "metadata": {"note": "MARK-metadata"}}
    response = api.post("/items", json.dumps(payload).replace(f'"MARK-{field}"', '"half \\ud800"'))
    assert response.status_code == 400 and response.json()["error"] == "malformed_request", response.content
    assert not QueueItem.objects.exists()


def test_an_ask_whose_format_regex_argument_nests_deeply_refuses_an_edit_with_a_400_not_a_500(api, alice):
    """The agent proposes 1,000 nested groups for a ``format: regex`` argument; any edit (the form pre-fills it) was a 500."""
    deep = "(" * 1000 + ")" * 1000
    schema = {"type": "object", "properties": {"r": {"type": "string", "format": "regex"}, "n": {"type": "integer"}}}
    ask = {
        "action_requests": [{"name": "pay", "args": {"r": deep, "n": 1}, "description": ""}],
        "review_configs": [{"action_name": "pay", "allowed_decisions": ["approve", "edit"], "args_schema": schema}],
    }
    item_id = api.post("/items", {**ASK, "ask": ask}).json()["id"]
    browser = Client()
    browser.force_login(alice)
    edit = [{"type": "edit", "edited_action": {"name": "pay", "args": {"r": deep, "n": 2}}}]
    response = browser.post(f"/api/items/{item_id}/decision", {"decisions": edit}, content_type="application/json")
    assert response.status_code == 400 and response.json()["field"] == "decisions[0].edited_action.args.r", response.content
    assert ReviewAsk.objects.get().status == "pending"
