"""A small agent-like graph for the dashboard's tests: one ``refund`` proposed the way
LangChain's ``HumanInTheLoopMiddleware`` proposes a tool call, every decision type
allowed, the arguments described by a JSON Schema.

Registered in tests with ``override_settings(REVIEWQUEUE_GRAPHS=GRAPHS)``, and for a
server started by the e2e tests with ``REVIEWQUEUE_EXTRA_GRAPHS=refund_test=moderation.tests.hitl_graph:build``.
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

NAME = "refund_test"
ALL = ["approve", "edit", "reject", "respond"]
GRAPHS = {
    "moderation": "moderation.graph:build", NAME: "moderation.tests.hitl_graph:build",
    "refund_pair": "moderation.tests.hitl_graph:build_pair",
}
EXTRA_GRAPHS_ENV = f"{NAME}=moderation.tests.hitl_graph:build"
ARGS = {"order_id": "A-1001", "amount": 120, "currency": "EUR"}
ARGS_SCHEMA = {
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


class RefundState(TypedDict, total=False):
    item_id: str
    title: str
    body: str
    source: str
    schema: bool  # False: no args_schema (the page falls back to a JSON editor)
    allowed: list[str]
    actions: int  # refunds proposed in one ask
    rounds: int
    result: dict[str, Any]


def _propose(state: RefundState) -> dict[str, Any]:
    config: dict[str, Any] = {"action_name": "refund", "allowed_decisions": state.get("allowed") or ALL}
    if state.get("schema", True):
        config["args_schema"] = ARGS_SCHEMA
    count = state.get("actions", 1)
    answer = interrupt({
        "action_requests": [
            {"name": "refund", "args": {**ARGS, "order_id": f"A-{1001 + n}"}, "description": "Refund the order?"}
            for n in range(count)
        ],
        "review_configs": [config],
    })
    decisions = answer["decisions"]
    # A response answers the agent instead of acting: it proposes again (a second round).
    return {"rounds": state.get("rounds", 0) + 1, "result": {
        "decisions": ", ".join(d["type"] for d in decisions), "reviewer": answer.get("reviewer", ""),
        "args": [d["edited_action"]["args"] for d in decisions if d["type"] == "edit"],
    }}


def _next(state: RefundState) -> str:
    return "propose" if state["result"]["decisions"] == "respond" and state["rounds"] < 2 else END


def build(checkpointer: BaseCheckpointSaver) -> Any:
    builder = StateGraph(RefundState)
    builder.add_node("propose", _propose)
    builder.add_edge(START, "propose")
    builder.add_conditional_edges("propose", _next, ["propose", END])
    return builder.compile(checkpointer=checkpointer)


def _propose_other(state: RefundState) -> dict[str, Any]:
    interrupt({
        "action_requests": [{"name": "send_email", "args": {"to": "customer@example.test"}, "description": ""}],
        "review_configs": [{"action_name": "send_email", "allowed_decisions": ["approve", "reject"]}],
    })
    return {}


def build_pair(checkpointer: BaseCheckpointSaver) -> Any:
    """Two asks at once (parallel interrupts): a refund and an email."""
    builder = StateGraph(RefundState)
    builder.add_node("propose", _propose)
    builder.add_node("email", _propose_other)
    builder.add_edge(START, "propose")
    builder.add_edge(START, "email")
    builder.add_edge("propose", END)
    builder.add_edge("email", END)
    return builder.compile(checkpointer=checkpointer)
