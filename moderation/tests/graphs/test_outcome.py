"""What a graph did, read from its final state: real agents (LangChain's middleware, in memory) and the pass-through."""

from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from examples.refund_agent.agent import build as build_refund_agent
from moderation.graphs import passthrough
from moderation.graphs.outcome import (
    ERROR_MAX_CHARS,
    ERRORS_MAX,
    SUMMARY_MAX_CHARS,
    AppliedState,
    GraphError,
    applied_result_build,
    graph_outcome_read,
)
from moderation.tests.graphs_support import build_plain_agent, wrong_type_edit

REFUND = "Hi, order A-17 arrived broken. Please refund 120 EUR."


def _decided(build, decision: Any, *, start: dict[str, Any] | None = None) -> dict[str, Any]:
    """The final state of ``build``'s graph, started and resumed once with ``decision`` (its first interrupt's answer)."""
    graph = build(InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    graph.invoke(start or {"body": REFUND, "item_id": "i", "title": "t", "source": "s"}, config)
    (asked,) = graph.get_state(config).interrupts
    graph.invoke(Command(resume={asked.id: decision}), config)
    state = graph.get_state(config)
    assert state.next == (), "the graph ran to its end"
    return state.values


def test_a_wrong_type_edit_is_the_tools_error_and_not_done():
    values = _decided(build_plain_agent, {"decisions": [wrong_type_edit()]})

    outcome = graph_outcome_read(values=values)

    (error,) = outcome.errors
    assert error.where == "tool refund_payment"
    assert error.message.startswith("Error invoking tool 'refund_payment' with kwargs")
    assert "amount: Input should be a valid number" in error.message
    assert "human reviewer replaced" not in error.message, "LangChain's edit notice is left out"
    applied = applied_result_build(state=AppliedState.FINISHED, values=values)
    assert applied["state"] == "finished with errors"
    assert applied["errors"] == [error.as_dict()]
    assert applied["summary"].startswith("Done: refund_payment was not run")


def test_an_approved_call_finishes_with_the_agents_answer_and_no_error():
    applied = applied_result_build(
        state=AppliedState.FINISHED, values=_decided(build_refund_agent, {"decisions": [{"type": "approve"}]})
    )

    assert (applied["state"], applied["summary"], applied["errors"]) == ("finished", "Done: refunded 120 EUR for order A-17.", [])
    assert "decisions" not in applied


def test_a_rejected_call_is_the_reviewers_decision_not_an_error():
    # LangChain answers a rejected call with a ToolMessage of status "error": run the real
    # middleware, so a LangChain upgrade that words it differently fails here.
    values = _decided(build_plain_agent, {"decisions": [{"type": "reject", "message": "already refunded"}]})
    assert [m.status for m in values["messages"] if isinstance(m, ToolMessage) and m.name == "refund_payment"] == ["error"]

    applied = applied_result_build(state=AppliedState.FINISHED, values=values)

    assert (applied["state"], applied["errors"]) == ("finished", [])


def test_a_state_that_exposes_its_outcome_is_read_first():
    failed_tool = ToolMessage(content="boom", name="send_email", tool_call_id="c", status="error")
    values = {
        "outcome": {"summary": "sent 2 of 3", "errors": [{"where": "mailer", "message": "bounced"}, "not an error"]},
        "messages": [failed_tool, AIMessage(content="all good")],
        "result": {"status": "answered"},
    }

    outcome = graph_outcome_read(values=values)

    assert (outcome.summary, outcome.errors, outcome.has_decisions) == ("sent 2 of 3", [GraphError("mailer", "bounced")], False)


def test_without_messages_the_summary_is_the_results():
    assert graph_outcome_read(values={"result": {"status": "approved", "reviewer": "alice"}}).summary == "approved"
    assert graph_outcome_read(values={"result": "not a dict"}).summary == ""
    assert graph_outcome_read(values=None).errors == []


def test_the_nodes_exception_comes_first_and_everything_is_bounded():
    messages = [ToolMessage(content="x" * 5000, name=f"tool{i}\x00", tool_call_id=str(i), status="error") for i in range(30)]
    values = {"messages": [*messages, AIMessage(content="y\x00" * 2000)]}

    applied = applied_result_build(state=AppliedState.FAILED, values=values, error="KeyError:\x00 'amount'")

    assert applied["state"] == "failed" and applied["error"] == "KeyError:\\x00 'amount'"
    assert applied["errors"][0] == {"where": "graph", "message": "KeyError:\\x00 'amount'"}
    assert len(applied["errors"]) == ERRORS_MAX
    assert all(len(e["message"]) <= ERROR_MAX_CHARS and "\x00" not in e["where"] for e in applied["errors"])
    assert len(applied["summary"]) == SUMMARY_MAX_CHARS and "\x00" not in applied["summary"]


def test_asking_again_keeps_its_state_with_the_errors_so_far():
    values = {"messages": [ToolMessage(content="timeout", name="refund_payment", tool_call_id="c", status="error")]}

    applied = applied_result_build(state=AppliedState.ASKED_AGAIN, values=values, asks=1)

    assert applied == {
        "state": "asked again",
        "summary": "",
        "asks": 1,
        "errors": [{"where": "tool refund_payment", "message": "timeout"}],
    }


HITL = {
    "action_requests": [{"name": "refund", "args": {"amount": 5}, "description": "Refund?"}],
    "review_configs": [{"action_name": "refund", "allowed_decisions": ["approve", "reject"]}],
}
META = {"reviewer": "alice", "decided_at": "2026-01-01T00:00:00+00:00", "note": "ok"}


@pytest.mark.parametrize(
    ("answer", "decisions", "summary"),
    [
        (
            {"decisions": [{"type": "approve"}, {"type": "reject", "message": "no"}], **META},
            {"decisions": [{"type": "approve"}, {"type": "reject", "message": "no"}]},
            "returned to the agent: approved, rejected",
        ),
        (
            {"decisions": [{"type": "reject"}], **META, "withdrawn": True},
            {"decisions": [{"type": "reject"}]},
            "withdrawn by its submitter; the agent gets a rejection",
        ),
        (
            {"type": "respond", "message": "use the spare"},
            {"type": "respond", "message": "use the spare"},
            "returned to the agent: answered",
        ),
        ("yes", "yes", "returned to the agent"),
    ],
)
def test_the_pass_through_outcome_is_the_decisions_the_agent_resumes_with(answer, decisions, summary):
    values = _decided(passthrough.build, answer, start={"ask": HITL, "item_id": "i", "title": "t", "body": "b", "source": "s"})

    applied = applied_result_build(state=AppliedState.FINISHED, values=values)

    assert (applied["state"], applied["summary"], applied["errors"], applied["decisions"]) == ("finished", summary, [], decisions)
