"""Every test graph: small graphs that ask the way agents ask (LangChain's HITLRequest).

Registered per test with ``override_settings(REVIEWQUEUE_GRAPHS=TEST_GRAPHS)`` (the
``test_graphs`` fixture) and, for processes the tests start, with the environment of
``TEST_GRAPHS_ENV``. Each name always maps to the same builder, so ``graph_get``'s
cache per (name, saver) never serves one test another test's graph.

The askers built on ``hitl_request`` keep each resume value in the state verbatim, so a
test reads exactly what the guard sent into the graph; ``t_refund`` proposes a shop's
refund, shaped by its start state, for the dashboard, API and e2e tests.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

from examples.refund_agent.agent import INTERRUPT_ON, TOOLS, QueueItemAdapter, RefundAgentState
from examples.refund_agent.model import ScriptedChatModel
from moderation.graphs.runtime import START_INDEX, graph_asks_pending, graph_forks, graph_resume_count

REFUND = "refund"
REFUND_ARGS = {"amount": 120, "to": "acct-1"}
REFUND_SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 1, "maximum": 100}, "to": {"type": "string", "minLength": 1}},
    "required": ["amount", "to"],
    "additionalProperties": False,
}
ALL_TYPES = ["approve", "edit", "reject", "respond"]

REFUND_GRAPH = "t_refund"
ORDER_ARGS = {"order_id": "A-1001", "amount": 120, "currency": "EUR"}
ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "title": "Order"},
        "amount": {"type": "number", "title": "Amount", "minimum": 0, "maximum": 150},
        "currency": {"type": "string", "enum": ["EUR", "USD"], "title": "Currency"},
        "notify": {"type": "boolean", "title": "Notify the customer"},
    },
    "required": ["order_id", "amount", "currency"],
    "additionalProperties": False,
}

TEST_GRAPHS = {
    "moderation": "moderation.graphs.builtin:build",
    "t_hitl": "moderation.tests.graphs_support:build_hitl",
    "t_parallel": "moderation.tests.graphs_support:build_parallel",
    "t_failing": "moderation.tests.graphs_support:build_failing",
    REFUND_GRAPH: "moderation.tests.graphs_support:build_refund",
}
TEST_GRAPHS_ENV = {"REVIEWQUEUE_EXTRA_GRAPHS": ",".join(f"{k}={v}" for k, v in TEST_GRAPHS.items() if k != "moderation")}


class AskState(TypedDict, total=False):
    item_id: str
    title: str
    body: str
    source: str
    answers: Annotated[list[dict[str, Any]], operator.add]
    schema: bool  # t_refund: False leaves out the args_schema (the page types its inputs by the proposed values)
    allowed: list[str]  # t_refund: the decision types offered
    actions: int  # t_refund: refunds proposed in one ask
    rounds: int
    asks: int  # t_hitl: how many times in a row it asks before finishing (1 by default)
    result: dict[str, Any]


def hitl_request(*, name: str = REFUND, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """LangChain's HITLRequest for one action that allows every decision type, with an args_schema."""
    return {
        "action_requests": [{"name": name, "args": dict(args or REFUND_ARGS), "description": f"Run {name}?"}],
        "review_configs": [{"action_name": name, "allowed_decisions": ALL_TYPES, "args_schema": REFUND_SCHEMA}],
    }


def _asker(label: str, *, name: str = REFUND):
    def node(state: AskState) -> dict[str, Any]:
        return {"answers": [{"node": label, "value": interrupt(hitl_request(name=name))}]}

    return node


def _finish(state: AskState) -> dict[str, Any]:
    return {
        "result": {
            "answers": len(state.get("answers", [])),
            "types": [d["type"] for a in state.get("answers", []) for d in a["value"]["decisions"]],
        }
    }


def _fail(state: AskState) -> dict[str, Any]:
    raise RuntimeError("downstream tool is down")


def _ask_again(state: AskState) -> str:
    return "ask" if len(state.get("answers", [])) < state.get("asks", 1) else "finish"


def build_hitl(checkpointer: Any) -> Any:
    """START -> ask (one HITLRequest, all four types) -> finish; with ``asks`` N in its start
    state it asks N times in a row (N rounds), then finishes."""
    builder = StateGraph(AskState)
    builder.add_node("ask", _asker("ask"))
    builder.add_node("finish", _finish)
    builder.add_edge(START, "ask")
    builder.add_conditional_edges("ask", _ask_again, ["ask", "finish"])
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=checkpointer)


def build_parallel(checkpointer: Any) -> Any:
    """Two asks at once: nodes ``left`` and ``right`` both start from START and interrupt."""
    builder = StateGraph(AskState)
    builder.add_node("left", _asker("left", name="refund"))
    builder.add_node("right", _asker("right", name="notify"))
    builder.add_node("finish", _finish)
    builder.add_edge(START, "left")
    builder.add_edge(START, "right")
    builder.add_edge(["left", "right"], "finish")
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=checkpointer)


def build_failing(checkpointer: Any) -> Any:
    """Asks, then its next node always raises: a decision whose apply fails."""
    builder = StateGraph(AskState)
    builder.add_node("ask", _asker("ask"))
    builder.add_node("fail", _fail)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "fail")
    builder.add_edge("fail", END)
    return builder.compile(checkpointer=checkpointer)


def _propose_refund(state: AskState) -> dict[str, Any]:
    config: dict[str, Any] = {"action_name": REFUND, "allowed_decisions": state.get("allowed") or ALL_TYPES}
    if state.get("schema", True):
        config["args_schema"] = ORDER_SCHEMA
    answer = interrupt(
        {
            "action_requests": [
                {"name": REFUND, "args": {**ORDER_ARGS, "order_id": f"A-{1001 + n}"}, "description": "Refund the order?"}
                for n in range(state.get("actions", 1))
            ],
            "review_configs": [config],
        }
    )
    decisions = answer["decisions"]
    return {
        "rounds": state.get("rounds", 0) + 1,
        "result": {
            "decisions": ", ".join(d["type"] for d in decisions),
            "reviewer": answer.get("reviewer", ""),
            "args": [d["edited_action"]["args"] for d in decisions if d["type"] == "edit"],
        },
    }


def _after_refund(state: AskState) -> str:
    # A response answers the agent instead of acting: it proposes again (a second round).
    return "propose" if state["result"]["decisions"] == "respond" and state["rounds"] < 2 else END


def build_refund(checkpointer: Any) -> Any:
    """Proposes ``refund`` of ORDER_ARGS (its start state may set ``allowed``, ``schema``, ``actions``);
    a respond proposes once more; the result names the decisions and any edited args."""
    builder = StateGraph(AskState)
    builder.add_node("propose", _propose_refund)
    builder.add_edge(START, "propose")
    builder.add_conditional_edges("propose", _after_refund, ["propose", END])
    return builder.compile(checkpointer=checkpointer)


# The example refund agent with LangChain's HumanInTheLoopMiddleware as it comes (no
# args_schema): the queue then takes any edit, and the tool is what refuses a wrong type.
# Registered per test (with the pass-through ``ask``: ``AGENT_GRAPHS``), not in TEST_GRAPHS, whose list tests name.
PLAIN_AGENT = "t_plain_agent"
AGENT_GRAPHS = {
    **TEST_GRAPHS,
    "ask": "moderation.graphs.passthrough:build",
    PLAIN_AGENT: "moderation.tests.graphs_support:build_plain_agent",
}


def build_plain_agent(checkpointer: Any) -> Any:
    return create_agent(
        model=ScriptedChatModel(),
        tools=TOOLS,
        state_schema=RefundAgentState,
        checkpointer=checkpointer,
        middleware=[HumanInTheLoopMiddleware(interrupt_on=INTERRUPT_ON), QueueItemAdapter()],
    )


def wrong_type_edit(*, order_id: str = "A-17") -> dict[str, Any]:
    """An edit of the refund whose amount is not a number: the refund tool refuses it."""
    return {
        "type": "edit",
        "edited_action": {"name": "refund_payment", "args": {"order_id": order_id, "amount": "lots", "currency": "EUR"}},
    }


def item_resumes(item: Any) -> int:
    return graph_resume_count(name=item.graph, thread_id=item.thread_id)


def item_forks(item: Any) -> int:
    return graph_forks(name=item.graph, thread_id=item.thread_id)


def item_waiting_on(item: Any) -> list[str]:
    """The interrupt ids the item's graph is paused at."""
    return [p.interrupt_id for p in graph_asks_pending(name=item.graph, thread_id=item.thread_id)]


@contextmanager
def one_start_index_dropped() -> Iterator[None]:
    """A negative control's PostgreSQL: without the index that refuses a thread's second start
    (``runtime.START_INDEX``, migration 0031), put back as it was after. Nothing on SQLite, which has none."""
    from django.db import connection

    if connection.vendor != "postgresql":
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [START_INDEX])
        ((definition,),) = cursor.fetchall()
        cursor.execute(f"DROP INDEX {START_INDEX}")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            # The control's doubly started threads go (the checkpoints outlive a test's rows), or the index could not return.
            cursor.execute(
                "DELETE FROM checkpoints WHERE thread_id IN (SELECT thread_id FROM checkpoints WHERE "
                "metadata->>'reviewqueue_run' = 'start' GROUP BY thread_id, checkpoint_ns HAVING count(*) > 1)"
            )
            cursor.execute(definition)
