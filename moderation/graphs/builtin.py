"""The built-in moderation graph: pre-screen, ask a human whether to publish, apply.

START -> prescreen -> request_review (interrupt) -> apply_decision -> END

It asks the way LangChain's ``HumanInTheLoopMiddleware`` does (one ``publish``
action, approve or reject), so its items render and are decided like any agent's.
Registered as ``moderation`` in ``REVIEWQUEUE_GRAPHS``; every item runs under its own
thread_id, so an item nobody decides holds nothing any other item needs.
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy, interrupt
from typing_extensions import TypedDict

from moderation.core.faults import fault_point
from moderation.core.text import text_excerpt
from moderation.graphs.prescreen import text_prescreen

EXCERPT_LENGTH = 280
ACTION = "publish"
REVIEW_NODE = "request_review"
APPLY_NODE = "apply_decision"
STATUS_FOR_TYPE = {"approve": "approved", "reject": "rejected"}


class ReviewState(TypedDict, total=False):
    item_id: str
    title: str
    body: str
    source: str
    flags: list[str]
    risk: int
    decision: dict[str, Any]
    result: dict[str, str]


# Transient failures (connection errors, timeouts) are retried by LangGraph itself;
# programming errors are not, and surface as "needs attention".
NODE_RETRY = RetryPolicy(max_attempts=3, initial_interval=0.05, max_interval=0.5)


class ResumeValueError(ValueError):
    pass


def _prescreen(state: ReviewState) -> dict[str, Any]:
    fault_point("in_prescreen_node", item_key=state["item_id"])
    screen = text_prescreen(title=state["title"], body=state["body"])
    return {"flags": screen.flags, "risk": screen.risk}


def _request_review(state: ReviewState) -> dict[str, Any]:
    answer = interrupt(
        {
            "action_requests": [
                {
                    "name": ACTION,
                    "args": {
                        "title": state["title"],
                        "excerpt": text_excerpt(text=state["body"], length=EXCERPT_LENGTH),
                        "source": state["source"],
                        "flags": state["flags"],
                        "risk": state["risk"],
                    },
                    "description": "Publish this post?",
                }
            ],
            "review_configs": [{"action_name": ACTION, "allowed_decisions": ["approve", "reject"]}],
        }
    )
    fault_point("in_review_node", item_key=state["item_id"])
    # The guard validates before anything is resumed; this keeps a hand-made resume honest.
    decisions = answer.get("decisions") if isinstance(answer, dict) else None
    if not (isinstance(decisions, list) and len(decisions) == 1 and decisions[0].get("type") in STATUS_FOR_TYPE):
        raise ResumeValueError(f"resume value must be {{'decisions': [approve | reject]}}, got {answer!r}")
    return {"decision": answer}


def _apply_decision(state: ReviewState) -> dict[str, Any]:
    fault_point("in_apply_node", item_key=state["item_id"])
    decision = state["decision"]
    status = "withdrawn" if decision.get("withdrawn") else STATUS_FOR_TYPE[decision["decisions"][0]["type"]]
    return {"result": {"status": status, "reviewer": decision.get("reviewer", ""), "decided_at": decision.get("decided_at", "")}}


def build(checkpointer: BaseCheckpointSaver) -> Any:
    builder = StateGraph(ReviewState)
    builder.add_node("prescreen", _prescreen, retry_policy=NODE_RETRY)
    builder.add_node(REVIEW_NODE, _request_review)
    builder.add_node(APPLY_NODE, _apply_decision, retry_policy=NODE_RETRY)
    builder.add_edge(START, "prescreen")
    builder.add_edge("prescreen", REVIEW_NODE)
    builder.add_edge(REVIEW_NODE, APPLY_NODE)
    builder.add_edge(APPLY_NODE, END)
    return builder.compile(checkpointer=checkpointer)
