"""Two small agents the LangGraph Server under test serves (``langgraph dev``; no reviewqueue import).

- ``hitl``: proposes a tool call and pauses at a LangChain ``HITLRequest`` (as
  ``HumanInTheLoopMiddleware`` does); on resume it records what it was told in ``outcome``.
- ``fanout``: two branches pause at once (parallel interrupts), then, once both are
  answered, one more question (a later round).
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict


class HitlState(TypedDict, total=False):
    to: str
    outcome: Any


def _propose(state: HitlState) -> dict[str, Any]:
    answer = interrupt(
        {
            "action_requests": [
                {"name": "send_email", "args": {"to": state.get("to", "a@example.com")}, "description": "Send the weekly report"}
            ],
            "review_configs": [{"action_name": "send_email", "allowed_decisions": ["approve", "edit", "reject"]}],
        }
    )
    return {"outcome": answer}


hitl = StateGraph(HitlState).add_node("propose", _propose).add_edge(START, "propose").add_edge("propose", END).compile()


class FanoutState(TypedDict, total=False):
    answers: Annotated[list, operator.add]
    final: Any


def _ask(topic: str):
    def node(state: FanoutState) -> dict[str, Any]:
        return {"answers": [{topic: interrupt({"question": f"Publish the {topic} post?"})}]}

    return node


def _confirm(state: FanoutState) -> dict[str, Any]:
    return {"final": interrupt({"question": "Send the newsletter now?"})}


fanout = (
    StateGraph(FanoutState)
    .add_node("news", _ask("news"))
    .add_node("sports", _ask("sports"))
    .add_node("confirm", _confirm)
    .add_edge(START, "news")
    .add_edge(START, "sports")
    .add_edge(["news", "sports"], "confirm")
    .add_edge("confirm", END)
    .compile()
)
