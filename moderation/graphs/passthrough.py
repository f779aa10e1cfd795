"""The built-in pass-through graph (registered as ``ask``): an agent's interrupt, submitted over /api/v1, put to humans as is.

START -> request_review (interrupt with the ask) -> finish -> END
START -> request_each, once per ask of ``asks`` (parallel interrupts) -> finish -> END
(and again from START with the next round's ``asks``: ``ask_round_input``)

It interrupts with the agent's own interrupt value, so the ask renders and is decided as an
in-process one would be. Each answer is kept under the agent's interrupt id (``answers``),
so the agent is resumed with ``{interrupt_id: value}`` read from this state
(``ask_answers``), partial answers included. Its outcome (``moderation.graphs.outcome``) is
those decisions; what the agent did next is its own report (``POST
/api/v1/items/{id}/outcome``). Who resumes a deployment, under which locks:
``moderation.review.remote``.
"""

from __future__ import annotations

from typing import Annotated, Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send, interrupt
from typing_extensions import TypedDict

from moderation.graphs.asks import PAST, RESUME_META_KEYS
from moderation.graphs.outcome import OUTCOME_KEY

NAME = "ask"
REVIEW_NODE = "request_review"
EACH_NODE = "request_each"


def _merged(left: dict[str, Any] | None, right: dict[str, Any]) -> dict[str, Any]:
    return {**(left or {}), **right}


class AskState(TypedDict, total=False):
    item_id: str
    title: str
    body: str
    source: str
    ask: Any
    asks: list[dict[str, Any]]  # several interrupts of the agent's thread: [{"interrupt_id", "value"}]
    external: dict[str, Any]
    context: dict[str, Any]  # why the agent asks ({summary, messages}), for the reviewer only
    answer: Any
    answers: Annotated[dict[str, Any], _merged]  # asks' answers by the agent's interrupt id
    result: dict[str, Any]
    outcome: dict[str, Any]


def ask_external(*, graph: str, graph_input: dict[str, Any]) -> dict[str, str] | None:
    """The asking agent's own ids an item's ask was submitted with (None for an item of any other graph);
    an item of several interrupts names them all in ``interrupt_id``, space-separated."""
    if graph != NAME or not (graph_input or {}).get("external"):
        return None
    external = graph_input["external"]
    return {**external, "interrupt_id": " ".join(ask_interrupts(graph_input=graph_input))} if "asks" in graph_input else external


def ask_context(*, graph: str, graph_input: dict[str, Any]) -> dict[str, Any] | None:
    """Why the agent asks, as its ask was submitted with it (``{summary, messages}``); None when it sent none."""
    return (graph_input or {}).get("context") or None if graph == NAME else None


def ask_interrupts(*, graph_input: dict[str, Any]) -> list[str]:
    """The agent's interrupt ids an item of this graph asks about (its ``asks``, or its one ask's ``external``)."""
    if "asks" in graph_input:
        return [a["interrupt_id"] for a in graph_input["asks"]]
    interrupt_id = (graph_input.get("external") or {}).get("interrupt_id")
    return [interrupt_id] if interrupt_id else []


def ask_answers(*, graph_input: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """What the agent is resumed with, ``{interrupt_id: value}``, for every ask answered so far in ``values``
    (the thread's state) but those withdrawn (which resume nothing)."""
    answers = values.get("answers") or {}
    if "asks" not in graph_input and "answer" in values:
        answers = {interrupt_id: values["answer"] for interrupt_id in ask_interrupts(graph_input=graph_input)}
    return {interrupt_id: _decisions(answer) for interrupt_id, answer in answers.items() if not _withdrawn(answer)}


def ask_round_input(*, asks: list[dict[str, Any]]) -> dict[str, Any]:
    """What a finished thread of this graph runs again from (``graph_run_again``) to ask ``asks`` as its next
    round: the agent's thread asked again after a decision."""
    return {"asks": asks}


def asks_answered(*, values: dict[str, Any]) -> set[str]:
    """The agent's interrupt ids answered in ``values`` (the thread's state), every round's."""
    return set(values.get("answers") or {})


def asks_asked(*, values: dict[str, Any]) -> set[str]:
    """The agent's interrupt ids the thread asked, every round's: those answered and those of its current round."""
    return asks_answered(values=values) | {a["interrupt_id"] for a in values.get("asks") or []}


def _fan_out(state: AskState) -> Any:
    return [Send(EACH_NODE, ask) for ask in state["asks"]] if state.get("asks") else REVIEW_NODE


def _request_review(state: AskState) -> dict[str, Any]:
    return {"answer": interrupt(state["ask"])}


def _request_each(ask: dict[str, Any]) -> dict[str, Any]:
    return {"answers": {ask["interrupt_id"]: interrupt(ask["value"])}}


def _withdrawn(answer: Any) -> bool:
    return isinstance(answer, dict) and bool(answer.get("withdrawn"))


def _decisions(answer: Any) -> Any:
    return {k: v for k, v in answer.items() if k not in RESUME_META_KEYS} if isinstance(answer, dict) else answer


def _finish(state: AskState) -> dict[str, Any]:
    if "asks" in state:
        answers = state.get("answers") or {}
        withdrawn = bool(answers) and all(_withdrawn(a) for a in answers.values())
        decisions = {interrupt_id: _decisions(a) for interrupt_id, a in answers.items()}
        listed = [one for d in decisions.values() for one in (d.get("decisions", [d]) if isinstance(d, dict) else [])]
        summary = _summary({"decisions": listed}, withdrawn=withdrawn)
        return {
            "result": {"status": "withdrawn" if withdrawn else "decided", "answers": answers},
            OUTCOME_KEY: {"summary": summary, "errors": [], "decisions": decisions},
        }
    answer = state["answer"]
    withdrawn = _withdrawn(answer)
    decisions = _decisions(answer)
    return {
        "result": {"status": "withdrawn" if withdrawn else "decided", "answer": answer},
        OUTCOME_KEY: {"summary": _summary(decisions, withdrawn=withdrawn), "errors": [], "decisions": decisions},
    }


def _summary(decisions: Any, *, withdrawn: bool) -> str:
    if withdrawn:
        return "withdrawn by its submitter; the agent gets a rejection"
    listed = decisions.get("decisions", [decisions]) if isinstance(decisions, dict) else []
    words = [PAST.get(d.get("type"), "") for d in listed if isinstance(d, dict)] if isinstance(listed, list) else []
    return "returned to the agent" + (": " + ", ".join(words) if words and all(words) else "")


def build(checkpointer: BaseCheckpointSaver) -> Any:
    builder = StateGraph(AskState)
    builder.add_node(REVIEW_NODE, _request_review)
    builder.add_node(EACH_NODE, _request_each)
    builder.add_node("finish", _finish)
    builder.add_conditional_edges(START, _fan_out, [REVIEW_NODE, EACH_NODE])
    builder.add_edge(REVIEW_NODE, "finish")
    builder.add_edge(EACH_NODE, "finish")
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=checkpointer)
