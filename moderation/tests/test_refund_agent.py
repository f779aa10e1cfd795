"""The example agent (examples/refund_agent) reviewed through the queue: each decision
type reaches its tools, and what the tools did is in the item's thread."""

import io
import json
import time

import pytest
from django.core.management import CommandError, call_command
from langchain_core.messages import HumanMessage, ToolMessage

from examples.refund_agent.model import reply_next
from examples.refund_agent.tools import order_read, refund_payment
from moderation.demo import DEMO_AGENT_ITEMS, REFUND_AGENT, demo_agent_input, demo_seed
from moderation.graphs.runtime import graph_values
from moderation.items.models import AskStatus, ItemStatus, QueueItem, ReviewAsk
from moderation.policies.models import Team
from moderation.records.reasons import reason_rule
from moderation.review.decisions import InvalidDecision, item_decide
from moderation.review.items import item_create

SINGLE = "Hi, order A-17 arrived broken. Please refund 120 EUR."
TOGETHER = "Order B-9 never arrived. Refund the full amount and email me a confirmation at ben@home.example."
THEN = "Order C-3 was lost. Please refund $250, then email me once it's done."


def _agent_item(message: str) -> QueueItem:
    return item_create(
        title="Refund", body=message, source="test", graph=REFUND_AGENT, graph_input=demo_agent_input(message=message)
    )


def _tool_results(item: QueueItem) -> dict[str, ToolMessage]:
    messages = graph_values(name=REFUND_AGENT, thread_id=item.thread_id)["messages"]
    return {m.name: m for m in messages if isinstance(m, ToolMessage) and m.name != "lookup_order"}


@pytest.fixture
def decide(django_capture_on_commit_callbacks, settings):
    """``item_decide``, then the inline apply its commit queued (a test's transaction never commits)."""
    # Set here too: pytest-django reads the settings before the root conftest sets its variable.
    settings.REVIEWQUEUE_APPLY_INLINE = True

    def run(item: QueueItem, reviewer, decisions: list[dict]):
        with django_capture_on_commit_callbacks(execute=True):
            outcome = item_decide(item_public_id=item.public_id, reviewer=reviewer, decisions=decisions)
        item.refresh_from_db()
        return outcome

    return run


def _open_asks(item: QueueItem) -> list[ReviewAsk]:
    return list(item.asks.filter(status=AskStatus.PENDING).order_by("round", "position"))


def test_the_script_proposes_the_same_calls_for_the_same_conversation():
    conversation = [HumanMessage(content=SINGLE)]
    first, again = reply_next(conversation), reply_next(conversation)
    assert (
        first.tool_calls
        == again.tool_calls
        == [
            {"name": "lookup_order", "args": {"order_id": "A-17"}, "id": "call-0-0", "type": "tool_call"},
        ]
    )
    looked_up = [
        *conversation,
        first,
        ToolMessage(
            content=json.dumps(
                {"order_id": "A-17", "customer": "a@x.example", "total": 120.0, "currency": "EUR", "status": "delivered"}
            ),
            name="lookup_order",
            tool_call_id="call-0-0",
        ),
    ]
    assert [(c["name"], c["args"]) for c in reply_next(looked_up).tool_calls] == [
        ("refund_payment", {"order_id": "A-17", "amount": 120.0, "currency": "EUR"}),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("refund €80 for order a-17", ("A-17", 80.0, "EUR")),
        ("order B-9: refund 12.50 dollars please", ("B-9", 12.5, "USD")),
        ("refund order C-3", ("C-3", 300.0, "USD")),  # no amount: the order's total, in its currency
    ],
)
def test_the_script_reads_order_amount_and_currency(text, expected):
    lookup = reply_next([HumanMessage(content=text)])
    order_id = lookup.tool_calls[0]["args"]["order_id"]
    result = ToolMessage(content=json.dumps(order_read(order_id)), name="lookup_order", tool_call_id="call-0-0")
    refund = reply_next([HumanMessage(content=text), lookup, result]).tool_calls[0]
    assert (refund["args"]["order_id"], refund["args"]["amount"], refund["args"]["currency"]) == expected


@pytest.mark.django_db
def test_an_ask_carries_each_tools_argument_schema():
    ask = _open_asks(_agent_item(TOGETHER))[0]
    configs = ask.payload["review_configs"]
    assert [c["action_name"] for c in configs] == ["refund_payment", "send_email"]
    assert configs[0]["allowed_decisions"] == ["approve", "edit", "reject"]
    assert configs[0]["args_schema"]["properties"]["amount"] == {
        "exclusiveMinimum": 0,
        "maximum": 10000,
        "title": "Amount",
        "type": "number",
    }
    assert configs[1]["args_schema"]["required"] == ["to", "subject", "body"]


@pytest.mark.django_db
def test_approve_runs_the_refund_and_the_agent_answers(alice, decide):
    item = _agent_item(SINGLE)
    assert _tool_results(item) == {}, "nothing gated runs before a decision"

    assert decide(item, alice, [{"type": "approve"}]).won

    assert item.status == ItemStatus.APPROVED
    assert _tool_results(item)["refund_payment"].content == "refunded 120 EUR for order A-17"
    assert item.applied_result == {
        "state": "finished",
        "summary": "Done: refunded 120 EUR for order A-17.",
        "errors": [],
        "result": {"status": "answered", "answer": "Done: refunded 120 EUR for order A-17."},
    }


@pytest.mark.django_db
def test_edit_runs_the_refund_with_the_edited_amount(alice, decide):
    item = _agent_item(SINGLE)
    edit = {
        "type": "edit",
        "edited_action": {"name": "refund_payment", "args": {"order_id": "A-17", "amount": 80, "currency": "EUR"}},
    }

    decide(item, alice, [edit])

    assert item.status == ItemStatus.EDITED
    result = _tool_results(item)["refund_payment"]
    assert result.status == "success" and result.content.endswith("\nrefunded 80 EUR for order A-17")
    assert item.applied_result["result"]["answer"] == "Done: refunded 80 EUR for order A-17."


@pytest.mark.django_db
def test_an_edit_breaking_the_tools_schema_changes_nothing(alice):
    item = _agent_item(SINGLE)
    edit = {
        "type": "edit",
        "edited_action": {"name": "refund_payment", "args": {"order_id": "A-17", "amount": -5, "currency": "EUR"}},
    }

    with pytest.raises(InvalidDecision) as refused:
        item_decide(item_public_id=item.public_id, reviewer=alice, decisions=[edit])

    assert refused.value.field == "decisions[0].edited_action.args.amount"
    item.refresh_from_db()
    assert item.status == ItemStatus.PENDING and [a.status for a in item.asks.all()] == [AskStatus.PENDING]
    assert _tool_results(item) == {}


EDIT_TEXT = '[{"type": "edit", "edited_action": {"name": "refund_payment", "args": {%s}}}]'


@pytest.mark.postgres_variant
@pytest.mark.django_db
@pytest.mark.parametrize("via", ["json", "form"])
@pytest.mark.parametrize(
    ("args", "field"),
    [
        ('"order_id": "A-17", "amount": NaN, "currency": "EUR"', None),  # was a 500 at the write; not JSON at all
        ('"order_id": "A-17", "amount": 1e999, "currency": "EUR"', None),
        ('"order_id": "A-17", "amount": 80, "currency": "EUR\\n"', "decisions[0].edited_action.args.currency"),
        ('"order_id": "A-17", "amount": 80, "currency": "EUR", "extra": 1', "decisions[0].edited_action.args.extra"),
        ('"order_id": "A-17\\u001b[2J", "amount": 80, "currency": "EUR"', "decisions[0].edited_action.args.order_id"),
    ],
)
def test_an_edit_the_tool_would_not_take_is_refused_on_every_path_and_changes_nothing(client, alice, via, args, field):
    item = _agent_item(SINGLE)
    client.force_login(alice)
    text = EDIT_TEXT % args
    if via == "json":
        refused = client.post(
            f"/api/items/{item.public_id}/decision", f'{{"decisions": {text}}}', content_type="application/json"
        )
    else:
        refused = client.post(f"/items/{item.public_id}/", {"decisions": text}, headers={"Accept": "application/json"})
    assert refused.status_code == 400, refused.content
    assert refused.json().get("field") == (field or ("decisions" if via == "form" else None)), refused.json()
    item.refresh_from_db()
    assert item.status == ItemStatus.PENDING and [a.status for a in item.asks.all()] == [AskStatus.PENDING]
    assert _tool_results(item) == {}


@pytest.mark.django_db
def test_reject_leaves_the_refund_unrun_and_the_model_reads_why(alice, decide):
    item = _agent_item(SINGLE)

    decide(item, alice, [{"type": "reject", "message": "already refunded"}])

    assert item.status == ItemStatus.REJECTED
    result = _tool_results(item)["refund_payment"]
    assert result.status == "error"
    assert result.content == "User rejected the tool call for `refund_payment` with reason: already refunded"
    assert "refund_payment was not run (User rejected" in item.applied_result["result"]["answer"]


@pytest.mark.django_db
def test_respond_answers_in_place_of_the_email(alice, decide):
    item = _agent_item("hello? is anyone there")
    (ask,) = _open_asks(item)
    assert ask.payload["action_requests"][0]["args"]["to"] == "customer@example.com"

    decide(item, alice, [{"type": "respond", "message": "called them instead"}])

    assert item.status == ItemStatus.ANSWERED
    assert _tool_results(item)["send_email"].content == "called them instead"
    assert item.applied_result["result"]["answer"] == "Done: called them instead."


@pytest.mark.django_db
def test_one_ask_with_two_actions_takes_mixed_decisions(alice, decide):
    item = _agent_item(TOGETHER)
    (ask,) = _open_asks(item)
    assert [(a["name"], a["args"]) for a in ask.payload["action_requests"]] == [
        ("refund_payment", {"order_id": "B-9", "amount": 45.5, "currency": "EUR"}),
        (
            "send_email",
            {"to": "ben@home.example", "subject": "Your order B-9", "body": "We are refunding 45.5 EUR for order B-9."},
        ),
    ]

    decide(item, alice, [{"type": "approve"}, {"type": "reject", "message": "we call, not email"}])

    assert item.status == ItemStatus.DECIDED
    results = _tool_results(item)
    assert (results["refund_payment"].status, results["refund_payment"].content) == ("success", "refunded 45.5 EUR for order B-9")
    assert results["send_email"].status == "error" and "we call, not email" in results["send_email"].content


@pytest.mark.django_db
def test_the_email_after_the_refund_is_a_second_round_saying_what_was_refunded(alice, bob, decide):
    item = _agent_item(THEN)
    edit = {
        "type": "edit",
        "edited_action": {"name": "refund_payment", "args": {"order_id": "C-3", "amount": 200, "currency": "USD"}},
    }

    decide(item, alice, [edit])

    assert item.status == ItemStatus.PENDING and item.applied_result == {
        "state": "asked again",
        "asks": 1,
        "summary": "",
        "errors": [],
    }
    (email,) = _open_asks(item)
    assert email.round == 2
    assert email.payload["action_requests"][0]["args"] == {
        "to": "chloe@customers.example",
        "subject": "Your order C-3",
        "body": "We have refunded 200 USD for order C-3.",
    }

    decide(item, bob, [{"type": "approve"}])

    assert (item.status, item.decided_by, item.applied_result["state"]) == (ItemStatus.APPROVED, bob, "finished")
    assert _tool_results(item)["send_email"].content == "emailed chloe@customers.example: Your order C-3"


@pytest.mark.django_db
def test_without_messages_the_items_body_is_the_customers_message():
    item = item_create(title="Refund", body=SINGLE, source="test", graph=REFUND_AGENT)

    (ask,) = _open_asks(item)
    assert ask.payload["action_requests"][0]["args"] == {"order_id": "A-17", "amount": 120.0, "currency": "EUR"}
    values = graph_values(name=REFUND_AGENT, thread_id=item.thread_id)
    assert values["item_id"] == str(item.public_id), "the agent's state keeps the item's fields"


def test_the_refund_tool_takes_as_long_as_the_bench_asks(monkeypatch):
    monkeypatch.setenv("REFUND_AGENT_TOOL_SECONDS", "0.3")
    started = time.monotonic()
    assert refund_payment.invoke({"order_id": "A-17", "amount": 1, "currency": "EUR"}) == "refunded 1 EUR for order A-17"
    assert time.monotonic() - started >= 0.3


def _item_add(*args: str) -> tuple[str, str]:
    out = io.StringIO()
    try:
        call_command("item_add", *args, stdout=out, stderr=io.StringIO())
    except CommandError as exc:
        return out.getvalue(), str(exc)
    return out.getvalue(), ""


@pytest.mark.django_db
def test_item_add_names_the_graph_and_its_input():
    message = {"messages": [{"role": "user", "content": TOGETHER}]}

    out, error = _item_add(
        "--title", "Parcel", "--body", "see the conversation", "--graph", REFUND_AGENT, "--input", json.dumps(message)
    )

    assert error == ""
    item = QueueItem.objects.get()
    assert out.startswith(f"Added {item.public_id}")
    assert (item.graph, item.graph_input) == (REFUND_AGENT, message)
    assert [a["name"] for a in _open_asks(item)[0].payload["action_requests"]] == ["refund_payment", "send_email"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--graph", "refund_agnt"], "--graph: unknown graph 'refund_agnt'; this server runs ask, moderation, refund_agent"),
        (
            ["--graph", REFUND_AGENT, "--input", "{messages: 1}"],
            "--input is not valid JSON: Expecting property name enclosed in double quotes (column 2)",
        ),
        (["--graph", REFUND_AGENT, "--input", "[1, 2]"], "--input must be a JSON object, not list"),
        (["--file", "-", "--input", "{}"], "--input is for a single item (--title/--body), not --file"),
    ],
)
def test_item_add_refuses_a_bad_graph_or_input_and_creates_nothing(args, message):
    single = [] if "--file" in args else ["--title", "T", "--body", SINGLE]
    assert _item_add(*single, *args) == ("", message)
    assert not QueueItem.objects.exists()


@pytest.mark.django_db
def test_the_demo_seeds_the_agents_items_beside_the_moderation_ones(settings):
    settings.DEBUG = True
    demo_seed()

    agent_items = {i.title: i for i in QueueItem.objects.filter(graph=REFUND_AGENT)}
    assert set(agent_items) == {title for title, _, _ in DEMO_AGENT_ITEMS}
    assert QueueItem.objects.filter(graph="moderation").exists()
    actions = {title: [a["name"] for a in _open_asks(item)[0].payload["action_requests"]] for title, item in agent_items.items()}
    assert sorted(map(len, actions.values())) == [1, 1, 2]
    assert demo_seed() == (0, 0), "seeding again adds nothing"


@pytest.mark.django_db
def test_the_demos_payments_team_rejects_a_refund_for_reasons_that_fit_tool_calls(settings, reasons):
    """Issue 40.6: rejecting the demo agent's refund asked for "Spam" or "Abusive"."""
    settings.DEBUG = True
    demo_seed()
    rule = reason_rule(team_id=Team.objects.get(slug="payments").pk, graph=REFUND_AGENT)
    assert rule.code_names == ["other", "wrong_arguments", "not_permitted", "needs_information", "wrong_action"]
    assert not rule.required  # the moderator's own words reach the agent as typed


@pytest.mark.django_db(transaction=True)
def test_the_race_lab_races_the_agents_items(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    settings.REVIEWQUEUE_APPLY_INLINE = True  # no worker runs here: see the decide fixture
    out = io.StringIO()
    call_command(
        "racelab",
        "--json",
        "--graph",
        REFUND_AGENT,
        "--strategy",
        "guarded",
        "--mode",
        "threads",
        "--trials",
        "2",
        "--reviewers",
        "3",
        "--hold",
        "0.05",
        stdout=out,
        stderr=io.StringIO(),
    )
    report = json.loads(out.getvalue())

    assert report["config"]["graph"] == REFUND_AGENT
    (row,) = report["results"]
    assert (row["lost_decisions"], row["false_successes"], row["double_resumes"], row["errors"]) == (0, 0, 0, 0), row
    assert report["isolation"]["passed"], report["isolation"]
    assert not QueueItem.objects.exists()

    with pytest.raises(CommandError, match="--graph: unknown graph 'nope'"):
        call_command("racelab", "--graph", "nope")
