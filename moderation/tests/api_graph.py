"""A tiny agent-like graph for the API tests: it asks, LangChain's way, whether to refund.

Registered by the tests as ``refund`` (``override_settings(REVIEWQUEUE_GRAPHS=...)``).
Its start state takes ``amount`` and ``order`` from the submit's ``input``; its result
says what the decision made it do, so a test can see the decision reached the graph.
"""

from __future__ import annotations

from typing import Any

from langchain.agents.middleware.human_in_the_loop import ActionRequest, HITLRequest, ReviewConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

GRAPHS = {"moderation": "moderation.graph:build", "refund": "moderation.tests.api_graph:build"}
AMOUNT_SCHEMA = {
    "type": "object",
    "properties": {"order": {"type": "integer"}, "amount": {"type": "integer", "minimum": 1, "maximum": 500}},
    "required": ["order", "amount"],
    "additionalProperties": False,
}


class RefundState(TypedDict, total=False):
    item_id: str
    title: str
    body: str
    source: str
    order: int
    amount: int
    result: dict[str, Any]


def _ask(state: RefundState) -> dict[str, Any]:
    request = HITLRequest(
        action_requests=[ActionRequest(
            name="refund", args={"order": state["order"], "amount": state["amount"]}, description="Refund the order?",
        )],
        review_configs=[ReviewConfig(
            action_name="refund", allowed_decisions=["approve", "edit", "reject"], args_schema=AMOUNT_SCHEMA,
        )],
    )
    [decision] = interrupt(request)["decisions"]
    if decision["type"] == "approve":
        return {"result": {"refunded": state["amount"]}}
    if decision["type"] == "edit":
        return {"result": {"refunded": decision["edited_action"]["args"]["amount"]}}
    return {"result": {"refused": decision.get("message", "")}}


def build(checkpointer: BaseCheckpointSaver) -> Any:
    builder = StateGraph(RefundState)
    builder.add_node("ask", _ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=checkpointer)
