"""What a graph did after a decision, read from its final state: a summary and its errors.

Recorded as the item's ``applied_result`` (``moderation.review.apply``), so the item page, the
API and the ``item.applied`` webhook say the same. Read from the first of:

1. ``outcome`` in the state: ``{"summary", "errors": [{"where", "message"}], "decisions"}``;
2. ``messages`` (a LangChain agent's): each ``ToolMessage`` with ``status="error"`` is an
   error, except LangChain's stand-in for a rejected tool call; the summary is the model's
   last answer without a tool call;
3. ``result`` (the built-in graphs'): its ``summary``, ``answer`` or ``status``.

Bounded by ``SUMMARY_MAX_CHARS``, ``ERROR_MAX_CHARS`` and ``ERRORS_MAX``, and free of NUL
(PostgreSQL's JSON refuses it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage

OUTCOME_KEY = "outcome"
SUMMARY_MAX_CHARS = 500
ERROR_MAX_CHARS = 500
WHERE_MAX_CHARS = 100
ERRORS_MAX = 20
# LangChain's HumanInTheLoopMiddleware answers a rejected call with an error ToolMessage
# starting so (``_answer_message``); its edit notice ends with this line before the tool's
# own output. ``moderation/tests/graphs/test_outcome.py`` runs the real middleware, so
# it fails if a LangChain upgrade changes either.
_REJECTED = "User rejected the tool call for `{name}`"
_TOOL_RESPONSE = "\n\nTool response:\n"


class AppliedState(StrEnum):
    """What the graph did after a decision (``applied_result["state"]``)."""

    FINISHED = "finished"
    FINISHED_WITH_ERRORS = "finished with errors"  # it ran to its end, but a tool (or the graph) reported errors
    ASKED_AGAIN = "asked again"
    ASKED_AFTER_WITHDRAWAL = "asked after withdrawal"
    FAILED = "failed"  # it raised: nothing is recorded as applied; ``manage.py recover`` runs it on
    REFUSED = "refused"  # it raised at its start (a queued submit): there is nothing to decide
    APPLYING = "applying"  # a LangGraph deployment could not take the decision yet: its apply is tried again


@dataclass(frozen=True)
class GraphError:
    where: str  # "tool refund_payment", "node apply_decision", "graph"
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"where": self.where, "message": self.message}


@dataclass(frozen=True)
class GraphOutcome:
    summary: str = ""
    errors: list[GraphError] = field(default_factory=list)
    decisions: Any = None  # the pass-through graph's resume value (None: not a pass-through)
    has_decisions: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The part of ``applied_result`` this outcome fills: summary, errors and, for a pass-through, decisions."""
        out: dict[str, Any] = {"summary": self.summary, "errors": [e.as_dict() for e in self.errors]}
        if self.has_decisions:
            out["decisions"] = self.decisions
        return out


def graph_outcome_read(*, values: dict[str, Any] | None, error: str | None = None) -> GraphOutcome:
    """The outcome of a graph whose state is ``values`` (see the module docstring).

    ``error``: the exception a node of the run raised, if any, which comes first among the errors.
    """
    values = values if isinstance(values, dict) else {}
    exposed = values.get(OUTCOME_KEY) if isinstance(values.get(OUTCOME_KEY), dict) else {}
    errors = [GraphError(where="graph", message=_bounded(error, ERROR_MAX_CHARS))] if error else []
    errors += _exposed_errors(exposed) if "errors" in exposed else _tool_errors(values.get("messages"))
    summary = exposed.get("summary") if isinstance(exposed.get("summary"), str) else None
    if summary is None:
        summary = _last_answer(values.get("messages")) or _result_summary(values.get("result"))
    return GraphOutcome(
        summary=_bounded(summary, SUMMARY_MAX_CHARS),
        errors=errors[:ERRORS_MAX],
        decisions=exposed.get("decisions"),
        has_decisions="decisions" in exposed,
    )


def applied_result_build(
    *, state: AppliedState, values: dict[str, Any] | None = None, error: str | None = None, **extra: Any
) -> dict[str, Any]:
    """An item's ``applied_result``: ``state``, ``summary``, ``errors`` (``[{where, message}]``), the
    pass-through's ``decisions``, the graph's ``result`` if it has one, ``error`` (failed or
    refused, or applying: why not yet) and ``extra`` (``asks``: how many it asks now; ``tries``: how
    many applies a deployment has not taken yet). A finished graph with errors is
    ``finished with errors``, never plain ``finished``."""
    values = values if isinstance(values, dict) else {}
    outcome = graph_outcome_read(values=values, error=error)
    if state == AppliedState.FINISHED and outcome.errors:
        state = AppliedState.FINISHED_WITH_ERRORS
    result = values.get("result") if isinstance(values.get("result"), dict) else {}
    return {
        "state": state.value,
        **outcome.as_dict(),
        **({"result": result} if result else {}),
        **({"error": error.replace("\x00", "\\x00")[:ERROR_MAX_CHARS]} if error else {}),
        **extra,
    }


def _bounded(text: Any, limit: int) -> str:
    text = " ".join(str(text).replace("\x00", "\\x00").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _exposed_errors(exposed: dict[str, Any]) -> list[GraphError]:
    raw = exposed.get("errors")
    return [
        GraphError(where=_bounded(e.get("where", ""), WHERE_MAX_CHARS), message=_bounded(e.get("message", ""), ERROR_MAX_CHARS))
        for e in (raw if isinstance(raw, list) else [])
        if isinstance(e, dict)
    ]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        return "\n".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content if isinstance(b, (str, dict)))
    return str(content)


def _tool_errors(messages: Any) -> list[GraphError]:
    errors = []
    for m in messages if isinstance(messages, list) else []:
        if not (isinstance(m, ToolMessage) and m.status == "error"):
            continue
        text = _text(m.content)
        if text.startswith(_REJECTED.format(name=m.name)):
            continue
        errors.append(
            GraphError(
                where=_bounded(f"tool {m.name or '?'}", WHERE_MAX_CHARS),
                message=_bounded(text.rpartition(_TOOL_RESPONSE)[2], ERROR_MAX_CHARS),
            )
        )
    return errors


def _last_answer(messages: Any) -> str:
    for m in reversed(messages if isinstance(messages, list) else []):
        if isinstance(m, AIMessage) and not m.tool_calls:
            return _text(m.content)
    return ""


def _result_summary(result: Any) -> str:
    if not isinstance(result, dict):
        return ""
    for key in ("summary", "answer", "status"):
        if isinstance(result.get(key), str) and result[key]:
            return result[key]
    return ""
