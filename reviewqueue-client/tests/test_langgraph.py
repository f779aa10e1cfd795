"""The durable glue with a real agent: forward its interrupt, resume its thread exactly once."""

from __future__ import annotations

import json
import threading
from collections import Counter
from datetime import UTC, datetime

import httpx
import pytest
from agent_support import agent_build, agent_start
from api_support import OutcomeServer
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from standardwebhooks import Webhook

from reviewqueue_client import ReviewQueue, WebhookInvalid
from reviewqueue_client.langgraph import (
    WebhookResumer,
    context_from_messages,
    decision_resume,
    decision_wait_resume,
    file_thread_lock,
    interrupts_forward,
)

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
EDIT = {"decisions": [{"type": "edit", "edited_action": {"name": "delete_customer", "args": {"customer_id": "C-8"}}}]}


@pytest.fixture
def runs():
    return Counter()


@pytest.fixture
def agent(runs):
    agent = agent_build(checkpointer=InMemorySaver(), runs=runs)
    agent_start(agent, thread_id="th-1")
    return agent


def _interrupt_id(agent) -> str:
    [pending] = agent.get_state({"configurable": {"thread_id": "th-1"}}).interrupts
    return pending.id


def _signed(event: dict, msg_id: str = "msg_1") -> tuple[dict, str]:
    body = json.dumps(event)
    now = datetime.now(tz=UTC)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(SECRET).sign(msg_id, now, body),
    }, body


def _decided(agent, resume=EDIT) -> dict:
    external = {"thread_id": "th-1", "interrupt_id": _interrupt_id(agent)}
    return {"type": "item.decided", "data": {"id": "it-1", "external": external, "decision": {"resume": resume}}}


def test_forward_submits_each_pending_interrupt_as_an_ask_keyed_by_thread_and_interrupt(agent):
    sent = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(
            201,
            json={
                "id": "it-1",
                "status": "pending",
                "graph": "ask",
                "external_id": None,
                "external": sent[-1]["external"],
                "resume": None,
                "asks": [],
                "applied_result": {},
            },
        )

    client = ReviewQueue("http://rq.test", "tok", transport=httpx.MockTransport(handler))
    [item] = interrupts_forward(client, agent, thread_id="th-1", source="support-agent", team="payments")
    [payload] = sent
    assert payload["external"] == {"thread_id": "th-1", "interrupt_id": _interrupt_id(agent)} == item.external
    assert payload["ask"]["action_requests"] == [
        {
            "name": "delete_customer",
            "args": {"customer_id": "C-7"},
            "description": payload["ask"]["action_requests"][0]["description"],
        }
    ]
    assert payload["ask"]["review_configs"][0]["allowed_decisions"] == ["approve", "edit", "reject"]
    assert payload["title"] == "Approve delete_customer" and payload["team"] == "payments"


def _recording_client(sent: list, *, refuse: bool = False) -> ReviewQueue:
    """A fake reviewqueue recording each submit; ``refuse``: as if an older client had sent the ask otherwise."""
    item = {
        "id": "it-1",
        "status": "pending",
        "graph": "ask",
        "external_id": None,
        "resume": None,
        "asks": [],
        "applied_result": {},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json={"items": [{**item, "external": {}}], "next_cursor": None})
        sent.append(json.loads(request.content))
        if refuse:
            return httpx.Response(409, json={"error": "idempotency_key_reused", "message": "other content"})
        return httpx.Response(201, json={**item, "external": sent[-1]["external"]})

    return ReviewQueue("http://rq.test", "tok", transport=httpx.MockTransport(handler))


@pytest.mark.parametrize("mode", ["batched", "per_call"])
def test_forward_titles_each_ask_with_its_tool_and_sends_the_threads_last_messages(runs, mode):
    agent = agent_build(checkpointer=InMemorySaver(), runs=runs, interrupt_mode=mode)
    agent_start(agent, thread_id="th-1")
    sent = []
    interrupts_forward(_recording_client(sent), agent, thread_id="th-1", source="support-agent")
    [payload] = sent
    assert payload["title"] == "Approve delete_customer"
    # LangChain's own description, without the call it repeats (the page shows the call beside it).
    assert payload["body"] == "delete_customer: Tool execution requires approval"
    assert payload["context"] == {
        "messages": [{"role": "human", "content": "delete C-7"}, {"role": "ai", "content": "calls delete_customer"}]
    }
    assert (payload["ask"].get("type") == "tool_approval") is (mode == "per_call")


def test_forward_sends_a_given_context_or_none():
    agent = agent_build(checkpointer=InMemorySaver(), runs=Counter())
    agent_start(agent, thread_id="th-1")
    sent = []
    summary = {"summary": "The customer asked **twice**."}
    interrupts_forward(_recording_client(sent), agent, thread_id="th-1", source="a", context=summary)
    interrupts_forward(_recording_client(sent), agent, thread_id="th-1", source="a", context=None)
    assert sent[0]["context"] == summary and "context" not in sent[1]


def test_context_from_messages_keeps_the_last_ones_within_reviewqueues_bounds():
    messages = [HumanMessage(content=f"m{n}") for n in range(10)] + [
        ToolMessage(content="ok\x07", name="crm", tool_call_id="c1"),
        AIMessage(content=""),
        HumanMessage(content="x" * 5000),
    ]
    context = context_from_messages(messages)
    assert [m["content"][:3] for m in context["messages"]] == ["m6", "m7", "m8", "m9", "ok ", "xxx"]
    assert context["messages"][4] == {"role": "tool", "content": "ok ", "name": "crm"}
    assert len(context["messages"][5]["content"]) == 4000
    assert context_from_messages([]) is None and context_from_messages(None) is None


def test_forward_answers_with_the_item_an_older_client_made_of_the_same_interrupt(agent):
    sent = []
    [item] = interrupts_forward(_recording_client(sent, refuse=True), agent, thread_id="th-1", source="support-agent")
    assert item.id == "it-1" and len(sent) == 1


def test_a_webhook_resumes_the_thread_with_the_edit_once_and_duplicates_are_no_ops(agent, runs):
    resumer = WebhookResumer(agent, client=_reporting_client([]), secret=SECRET)
    headers, body = _signed(_decided(agent))
    first = resumer(headers, body)
    assert first.resumed and runs == Counter({"C-8": 1})
    assert not resumer(headers, body).resumed  # the same delivery again
    assert not resumer(*_signed(json.loads(body), msg_id="msg_2")).resumed  # a redelivery
    assert runs == Counter({"C-8": 1})
    with pytest.raises(WebhookInvalid):
        resumer(headers, body.replace("C-8", "C-9"))


def test_concurrent_deliveries_and_a_racing_long_poll_run_the_tool_once(agent, runs, tmp_path):
    lock = file_thread_lock(str(tmp_path))
    event = _decided(agent)
    resumer = WebhookResumer(agent, client=_reporting_client([]), secret=SECRET, thread_lock=lock)
    decided = {
        "id": "it-1",
        "status": "edited",
        "graph": "ask",
        "external_id": None,
        "external": event["data"]["external"],
        "resume": EDIT,
        "asks": [],
        "applied_result": {},
    }
    client = ReviewQueue("http://rq.test", "tok", transport=httpx.MockTransport(lambda r: httpx.Response(200, json=decided)))
    barrier = threading.Barrier(5)
    outcomes = []

    def deliver(n: int) -> None:
        barrier.wait()
        outcomes.append(resumer(*_signed(event, msg_id=f"msg_{n}")).resumed)

    def poll() -> None:
        barrier.wait()
        outcomes.append(decision_wait_resume(client, agent, item_id="it-1", timeout=1, thread_lock=lock).resumed)

    workers = [threading.Thread(target=deliver, args=(n,)) for n in range(4)] + [threading.Thread(target=poll)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(outcomes) == [False, False, False, False, True] and runs == Counter({"C-8": 1})


def test_a_decision_for_an_interrupt_the_thread_no_longer_waits_on_is_a_no_op(agent, runs):
    stale = decision_resume(agent, thread_id="th-1", interrupt_id="not-pending", resume=EDIT)
    assert not stale.resumed and runs == Counter()


def _reporting_client(reports: list) -> ReviewQueue:
    """A fake reviewqueue that records each outcome report (and answers it as accepted)."""

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/items/it-1/outcome"
        reports.append(json.loads(request.content))
        return httpx.Response(
            201,
            json={
                "id": "it-1",
                "status": "edited",
                "graph": "ask",
                "external_id": None,
                "external": None,
                "resume": None,
                "asks": [],
                "applied_result": {},
            },
        )

    return ReviewQueue("http://rq.test", "tok", transport=httpx.MockTransport(handler))


@pytest.mark.parametrize(
    ("resume", "status", "message"),
    [
        (EDIT, "done", "done"),
        (
            {"decisions": [{"type": "reject", "message": "keep C-7"}]},
            "done",
            "done",
        ),  # a rejection is the decision, not a failure
        (
            {"decisions": [{"type": "edit", "edited_action": {"name": "delete_customer", "args": {"customer_id": 5}}}]},
            "failed",
            "delete_customer: Error invoking tool 'delete_customer'",
        ),
    ],
)
def test_after_resuming_the_glue_reports_done_or_the_tools_failure_once(agent, runs, resume, status, message):
    reports = []
    resumer = WebhookResumer(agent, client=_reporting_client(reports), secret=SECRET)
    headers, body = _signed(_decided(agent, resume=resume))

    first = resumer(headers, body)
    again = resumer(*_signed(json.loads(body), msg_id="msg_2"))

    assert (first.resumed, first.reported, again.resumed, again.reported) == (True, True, False, False)
    [report] = reports
    assert report["status"] == status and report["message"].startswith(message), report
    assert (status == "failed") == bool(first.errors)


def test_a_report_that_could_not_be_sent_leaves_the_resume_done(agent, runs):
    down = ReviewQueue(
        "http://rq.test",
        "tok",
        transport=httpx.MockTransport(
            lambda r: httpx.Response(503, json={"error": "busy", "message": "try later"}, headers={"Retry-After": "86400"})
        ),
    )
    resumed = WebhookResumer(agent, client=down, secret=SECRET)(*_signed(_decided(agent)))
    assert (resumed.resumed, resumed.reported) == (True, False) and runs == Counter({"C-8": 1})


def test_a_resumer_cannot_be_built_without_the_client_its_outcomes_are_reported_with():
    with pytest.raises(TypeError, match="client"):
        WebhookResumer(InMemorySaver(), secret=SECRET)  # no way to build one that drops its outcomes


def test_an_outcome_report_that_meets_a_500_once_is_sent_again_and_stored(agent, runs):
    with OutcomeServer(faults=["500"]) as api, ReviewQueue(api.url, "tok") as client:
        resumed = WebhookResumer(agent, client=client, secret=SECRET)(*_signed(_decided(agent)))
    assert (resumed.resumed, resumed.reported) == (True, True) and runs == Counter({"C-8": 1})
    assert len(api.arrivals) == 2 and api.stored == {"status": "done", "message": "done"}
