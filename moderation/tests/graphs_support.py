"""Small graphs that ask the way agents ask, for tests of the guard's asks.

Registered per test with ``override_settings(REVIEWQUEUE_GRAPHS=TEST_GRAPHS)`` (the
``test_graphs`` fixture) and, for processes the tests start, with the environment of
``TEST_GRAPHS_ENV``. Each name always maps to the same builder, so ``graph_get``'s
cache per (name, saver) never serves one test another test's graph.

Every node that asks keeps the resume value it received in the state, verbatim, so a
test reads exactly what the guard sent into the graph.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

from moderation.graphs.runtime import graph_asks_pending, graph_forks, graph_resume_count

REFUND = "refund"
REFUND_ARGS = {"amount": 120, "to": "acct-1"}
REFUND_SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 1, "maximum": 100}, "to": {"type": "string", "minLength": 1}},
    "required": ["amount", "to"],
    "additionalProperties": False,
}
ALL_TYPES = ["approve", "edit", "reject", "respond"]

TEST_GRAPHS = {
    "moderation": "moderation.graph:build",
    "t_hitl": "moderation.tests.graphs_support:build_hitl",
    "t_parallel": "moderation.tests.graphs_support:build_parallel",
    "t_rounds": "moderation.tests.graphs_support:build_rounds",
    "t_failing": "moderation.tests.graphs_support:build_failing",
}
TEST_GRAPHS_ENV = {"REVIEWQUEUE_EXTRA_GRAPHS": ",".join(f"{k}={v}" for k, v in TEST_GRAPHS.items() if k != "moderation")}


class AskState(TypedDict, total=False):
    item_id: str
    title: str
    body: str
    source: str
    answers: Annotated[list[dict[str, Any]], operator.add]
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
    return {"result": {"answers": len(state.get("answers", [])),
                       "types": [d["type"] for a in state.get("answers", []) for d in a["value"]["decisions"]]}}


def _fail(state: AskState) -> dict[str, Any]:
    raise RuntimeError("downstream tool is down")


def build_hitl(checkpointer: Any) -> Any:
    """START -> ask (one HITLRequest, all four types) -> finish."""
    builder = StateGraph(AskState)
    builder.add_node("ask", _asker("ask"))
    builder.add_node("finish", _finish)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "finish")
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


def build_rounds(checkpointer: Any) -> Any:
    """Asks, then asks again (a second round), then finishes."""
    builder = StateGraph(AskState)
    builder.add_node("first", _asker("first"))
    builder.add_node("second", _asker("second"))
    builder.add_node("finish", _finish)
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", "finish")
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


def item_resumes(item: Any) -> int:
    return graph_resume_count(name=item.graph, thread_id=item.thread_id)


def item_forks(item: Any) -> int:
    return graph_forks(name=item.graph, thread_id=item.thread_id)


def item_waiting_on(item: Any) -> list[str]:
    """The interrupt ids the item's graph is paused at."""
    return [p.interrupt_id for p in graph_asks_pending(name=item.graph, thread_id=item.thread_id)]
