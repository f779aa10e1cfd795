"""The built-in pass-through graph: an agent's ask, submitted over /api/v1, put to humans as is.

START -> request_review (interrupt with the ask) -> finish -> END

An agent running in its own service sends the interrupt value its own graph paused at
(LangChain's ``HITLRequest``, or any JSON); this graph interrupts with that very value,
so it renders and is decided as an in-process ask would be, and finishes holding the
decisions, which the agent resumes its own thread with. Registered as ``ask``.

Its outcome (``moderation.graphs.outcome``) is those decisions, as the agent's
``Command(resume=...)`` takes them, without the reviewer and time the queue adds beside
them; what the agent then did is its own report (``POST /api/v1/items/{id}/outcome``).
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

from moderation.graphs.asks import PAST, RESUME_META_KEYS
from moderation.graphs.outcome import OUTCOME_KEY

NAME = "ask"
REVIEW_NODE = "request_review"


class AskState(TypedDict, total=False):
    item_id: str
    title: str
    body: str
    source: str
    ask: Any
    external: dict[str, Any]
    answer: Any
    result: dict[str, Any]
    outcome: dict[str, Any]


def ask_external(*, graph: str, graph_input: dict[str, Any]) -> dict[str, str] | None:
    """The asking agent's own ids an item's ask was submitted with (None for an item of any other graph)."""
    return (graph_input or {}).get("external") or None if graph == NAME else None


def _request_review(state: AskState) -> dict[str, Any]:
    return {"answer": interrupt(state["ask"])}


def _finish(state: AskState) -> dict[str, Any]:
    answer = state["answer"]
    withdrawn = isinstance(answer, dict) and bool(answer.get("withdrawn"))
    decisions = {k: v for k, v in answer.items() if k not in RESUME_META_KEYS} if isinstance(answer, dict) else answer
    return {"result": {"status": "withdrawn" if withdrawn else "decided", "answer": answer},
            OUTCOME_KEY: {"summary": _summary(decisions, withdrawn=withdrawn), "errors": [], "decisions": decisions}}


def _summary(decisions: Any, *, withdrawn: bool) -> str:
    if withdrawn:
        return "withdrawn by its submitter; the agent gets a rejection"
    listed = decisions.get("decisions", [decisions]) if isinstance(decisions, dict) else []
    words = [PAST.get(d.get("type"), "") for d in listed if isinstance(d, dict)] if isinstance(listed, list) else []
    return "returned to the agent" + (": " + ", ".join(words) if words and all(words) else "")


def build(checkpointer: BaseCheckpointSaver) -> Any:
    builder = StateGraph(AskState)
    builder.add_node(REVIEW_NODE, _request_review)
    builder.add_node("finish", _finish)
    builder.add_edge(START, REVIEW_NODE)
    builder.add_edge(REVIEW_NODE, "finish")
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=checkpointer)
