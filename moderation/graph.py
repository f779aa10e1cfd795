"""Each queue item's LangGraph run: pre-screen, pause for a human, apply the decision.

START -> prescreen -> request_review (interrupt) -> apply_decision -> END

Every item runs under its own thread_id, so an item nobody decides stays paused in
the checkpointer and holds nothing that any other item needs.
"""

from __future__ import annotations

import threading
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, RetryPolicy, interrupt
from typing_extensions import TypedDict

from moderation.checkpointer import checkpointer_get
from moderation.faults import fault_point
from moderation.models import STATUS_FOR_DECISION, Decision, Requested
from moderation.prescreen import text_prescreen

EXCERPT_LENGTH = 280
REVIEW_NODE = "request_review"
APPLY_NODE = "apply_decision"


class ReviewState(TypedDict, total=False):
    item_id: str
    title: str
    body: str
    source: str
    flags: list[str]
    risk: int
    decision: dict[str, str]
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
    body = state["body"]
    decision = interrupt(
        {
            "item_id": state["item_id"],
            "title": state["title"],
            "excerpt": body if len(body) <= EXCERPT_LENGTH else body[: EXCERPT_LENGTH - 1] + "…",
            "source": state["source"],
            "flags": state["flags"],
            "risk": state["risk"],
            "allowed_decisions": list(Decision.values),
        }
    )
    # The guard validates before resuming; this keeps a hand-made resume honest too. A
    # withdrawal by the submitter ends the review like a decision does.
    if not isinstance(decision, dict) or decision.get("decision") not in Requested.values:
        raise ResumeValueError(f"resume value must name one of {Requested.values}, got {decision!r}")
    return {"decision": decision}


def _apply_decision(state: ReviewState) -> dict[str, Any]:
    fault_point("in_apply_node", item_key=state["item_id"])
    decision = state["decision"]
    status = STATUS_FOR_DECISION[decision["decision"]].value
    return {"result": {"status": status, "reviewer": decision["reviewer"], "decided_at": decision["decided_at"]}}


def _builder() -> StateGraph:
    builder = StateGraph(ReviewState)
    builder.add_node("prescreen", _prescreen, retry_policy=NODE_RETRY)
    builder.add_node(REVIEW_NODE, _request_review)
    builder.add_node(APPLY_NODE, _apply_decision, retry_policy=NODE_RETRY)
    builder.add_edge(START, "prescreen")
    builder.add_edge("prescreen", REVIEW_NODE)
    builder.add_edge(REVIEW_NODE, APPLY_NODE)
    builder.add_edge(APPLY_NODE, END)
    return builder


_compiled: dict[int, CompiledStateGraph] = {}
_compiled_lock = threading.Lock()


def graph_get(*, checkpointer: BaseCheckpointSaver | None = None) -> CompiledStateGraph:
    saver = checkpointer or checkpointer_get()
    graph = _compiled.get(id(saver))
    # An id can be reused once a closed saver is collected; the identity check catches it.
    if graph is None or graph.checkpointer is not saver:
        with _compiled_lock:
            graph = _compiled[id(saver)] = _builder().compile(checkpointer=saver)
    return graph


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def graph_start(*, thread_id: str, item_id: str, title: str, body: str, source: str) -> dict[str, Any]:
    """Run a new item's graph up to its interrupt; return the interrupt payload.

    ``durability="exit"`` saves one checkpoint, at the interrupt, instead of one per
    step: a start that fails midway leaves nothing to resume and no item row either
    (``item_create`` commits the row only after this returns), so the intermediate
    checkpoints bought nothing and cost a write (an fsync on SQLite) each. Resumes
    keep the default: ``graph_resume_count`` reads their per-step history.
    """
    result = graph_get().invoke(
        {"item_id": item_id, "title": title, "body": body, "source": source}, _config(thread_id), durability="exit"
    )
    interrupts = result.get("__interrupt__") or []
    if not interrupts:
        raise RuntimeError(f"graph for {thread_id} finished without asking for review")
    return interrupts[0].value


def graph_pending_review(*, thread_id: str) -> dict[str, Any] | None:
    """The payload the graph is waiting on, or None if it is not paused at review."""
    state = graph_get().get_state(_config(thread_id))
    if state.next != (REVIEW_NODE,):
        return None
    for task in state.tasks:
        if task.name == REVIEW_NODE and task.interrupts:
            return task.interrupts[0].value
    return None


def graph_resume(*, thread_id: str, decision: str, reviewer: str, note: str, decided_at: str) -> dict[str, Any]:
    """Resume a paused item with a decision (or a withdrawal) and run it to the end.

    Callers must hold the item's guard: LangGraph itself lets two resumes of one
    thread both run the review node.
    """
    value = {"decision": decision, "reviewer": reviewer, "note": note, "decided_at": decided_at}
    return graph_get().invoke(Command(resume=value), _config(thread_id))


def graph_decision_read(*, thread_id: str) -> dict[str, str] | None:
    """The decision the graph has accepted, if any (used to reconcile after a crash)."""
    values = graph_get().get_state(_config(thread_id)).values
    return values.get("decision")


def graph_resume_count(*, thread_id: str) -> int:
    """How many times the review node completed, read from the checkpoint history.

    Each completed resume leaves a checkpoint whose next step is apply_decision; two
    racing resumes leave two sibling checkpoints, which the latest state would hide.
    """
    return sum(1 for snap in graph_get().get_state_history(_config(thread_id)) if snap.next == (APPLY_NODE,))


def graph_is_finished(*, thread_id: str) -> bool:
    state = graph_get().get_state(_config(thread_id))
    return state.created_at is not None and state.next == ()


def graph_continue(*, thread_id: str) -> dict[str, Any]:
    """Re-run whatever node failed after a decision was accepted (used by recovery)."""
    return graph_get().invoke(None, _config(thread_id))


def graph_error_read(*, thread_id: str) -> str | None:
    """The error of the node that last failed on this thread, if any."""
    for task in graph_get().get_state(_config(thread_id)).tasks:
        if task.error:
            return str(task.error)
    return None
