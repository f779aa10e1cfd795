"""Every interrupt a graph raises, read as LangChain's human-in-the-loop request.

Three shapes of interrupt value are understood, so one page renders them all:
- ``batched``: LangChain's ``HITLRequest`` (``action_requests`` + ``review_configs``),
  answered with ``{"decisions": [...]}`` in action order. Our moderation graph asks this way.
- ``per_call``: LangChain's ``ToolApprovalRequest`` (``type: "tool_approval"``, one
  tool call per interrupt), answered with one bare decision.
- ``plain``: any other graph's interrupt value, shown as one action named ``review``
  with the value as its arguments, answered with ``{"type": ..., ...}``.

Decisions are checked here, before anything is locked: their count, their types
against ``allowed_decisions``, an edit's arguments as the tool will take them
(``moderation.graphs.argschema``: its ``args_schema`` with JSON Schema's semantics, when
the request gives one), and every text's length and characters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.conf import settings

from moderation.core.text import TextInvalid, text_check
from moderation.graphs.argschema import ArgsInvalid, SchemaInvalid, args_check, args_schema_check

DECISION_TYPES = ("approve", "edit", "reject", "respond")
PLAIN_ACTION = "review"
# A "plain" interrupt offers what every graph can act on without knowing its tools.
PLAIN_ALLOWED = ["approve", "reject", "respond"]


class AskDecisionInvalid(ValueError):
    """A decision the ask cannot take; ``field`` names where (``decisions[0].edited_action.args.amount``)."""

    def __init__(self, message: str, *, field: str = "decisions") -> None:
        super().__init__(message)
        self.field = field


class AskInvalid(ValueError):
    """An ask a submitter sent that the server will not take; ``field`` names where in it (``review_configs[0].args_schema``)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


def ask_schemas_check(*, value: Any) -> None:
    """Refuse (``AskInvalid``) an ask whose review configs carry an ``args_schema`` the server will not run
    (``argschema.args_schema_check``): refused at submit, not at a moderator's edit."""
    configs = value.get("review_configs") if isinstance(value, dict) else None
    for index, config in enumerate(configs if isinstance(configs, list) else []):
        if isinstance(config, dict) and "args_schema" in config:
            try:
                args_schema_check(schema=config["args_schema"])
            except SchemaInvalid as exc:
                where = f"review_configs[{index}].args_schema" + (f".{exc.path}" if exc.path else "")
                raise AskInvalid(str(exc), field=where) from None


@dataclass(frozen=True)
class AskSpec:
    """One interrupt, normalised: its actions and, aligned with them, what each allows."""

    kind: str
    actions: list[dict[str, Any]]
    configs: list[dict[str, Any]]
    # How long the graph lets a human take (its interrupt's ``deadline_seconds``), over the item's policy.
    deadline_seconds: int | None = None

    def as_payload(self) -> dict[str, Any]:
        payload = {"kind": self.kind, "action_requests": self.actions, "review_configs": self.configs}
        return {**payload, "deadline_seconds": self.deadline_seconds} if self.deadline_seconds else payload

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> AskSpec:
        return cls(
            kind=payload["kind"],
            actions=payload["action_requests"],
            configs=payload["review_configs"],
            deadline_seconds=payload.get("deadline_seconds"),
        )


def ask_spec_from_interrupt(*, value: Any, response_schema: Any = None) -> AskSpec:
    if isinstance(value, dict) and isinstance(value.get("action_requests"), list):
        actions = [_action(request) for request in value["action_requests"]]
        by_name = {c.get("action_name"): c for c in value.get("review_configs") or [] if isinstance(c, dict)}
        configs = [_config(by_name.get(action["name"]), action["name"]) for action in actions]
        return AskSpec(kind="batched", actions=actions, configs=configs, deadline_seconds=_deadline(value))
    if isinstance(value, dict) and value.get("type") == "tool_approval":
        action = _action(value)
        allowed = _allowed_from_schema(response_schema) or list(DECISION_TYPES)
        return AskSpec(
            kind="per_call",
            actions=[action],
            configs=[{"action_name": action["name"], "allowed_decisions": allowed}],
            deadline_seconds=_deadline(value),
        )
    args = value if isinstance(value, dict) else {"value": value}
    action = {"name": PLAIN_ACTION, "args": _jsonable(args), "description": ""}
    return AskSpec(kind="plain", actions=[action], configs=[{"action_name": PLAIN_ACTION, "allowed_decisions": PLAIN_ALLOWED}])


def _deadline(value: dict[str, Any]) -> int | None:
    """A graph's own time limit for its ask: a positive whole number of seconds, else none (a bad one is ignored, not fatal)."""
    seconds = value.get("deadline_seconds")
    return seconds if isinstance(seconds, int) and not isinstance(seconds, bool) and seconds > 0 else None


def _action(request: dict[str, Any]) -> dict[str, Any]:
    args = request.get("args")
    return {
        "name": str(request.get("name", "")),
        "args": _jsonable(args if isinstance(args, dict) else {}),
        "description": str(request.get("description") or ""),
    }


def _config(config: dict[str, Any] | None, name: str) -> dict[str, Any]:
    allowed = [d for d in (config or {}).get("allowed_decisions") or DECISION_TYPES if d in DECISION_TYPES]
    out: dict[str, Any] = {"action_name": name, "allowed_decisions": allowed}
    if config and isinstance(config.get("args_schema"), dict):
        out["args_schema"] = config["args_schema"]
    return out


def _allowed_from_schema(schema: Any) -> list[str]:
    """The decision types a per-call interrupt's ``response_schema`` (a pydantic type) admits."""
    if schema is None:
        return []
    try:
        from pydantic import TypeAdapter

        text = json.dumps(TypeAdapter(schema).json_schema())
    except Exception:  # an exotic schema: offer every type, the graph still checks its answer
        return []
    return [d for d in DECISION_TYPES if f'"const": "{d}"' in text or f'"enum": ["{d}"]' in text]


def _jsonable(value: Any) -> Any:
    # Args come from a model's tool call or a graph's state: keep what JSON can hold.
    return json.loads(json.dumps(value, default=str))


def ask_decisions_validate(*, spec: AskSpec, decisions: object) -> list[dict[str, Any]]:
    """The decisions, one per action in order, cleaned; ``AskDecisionInvalid`` names the bad field."""
    if not isinstance(decisions, list):
        raise AskDecisionInvalid("decisions must be a list, one per proposed action")
    if len(decisions) != len(spec.actions):
        raise AskDecisionInvalid(
            f"this ask proposes {len(spec.actions)} action(s); send exactly {len(spec.actions)} decision(s), in order"
        )
    return [
        _decision_clean(d, action=a, config=c, where=f"decisions[{i}]")
        for i, (d, a, c) in enumerate(zip(decisions, spec.actions, spec.configs, strict=False))
    ]


def _decision_clean(decision: object, *, action: dict, config: dict, where: str) -> dict[str, Any]:
    if not isinstance(decision, dict):
        raise AskDecisionInvalid("each decision must be an object with a type", field=where)
    kind = decision.get("type")
    allowed = config["allowed_decisions"]
    if kind not in DECISION_TYPES:
        raise AskDecisionInvalid(f"type must be one of {', '.join(DECISION_TYPES)}, not {kind!r}", field=f"{where}.type")
    if kind not in allowed:
        raise AskDecisionInvalid(f"{action['name']} allows {', '.join(allowed)}, not {kind}", field=f"{where}.type")
    if kind == "approve":
        return {"type": "approve"}
    if kind == "reject":
        message = text_clean(decision.get("message"), field=f"{where}.message")
        return {"type": "reject", "message": message} if message else {"type": "reject"}
    if kind == "respond":
        message = text_clean(decision.get("message"), field=f"{where}.message")
        if not message:
            raise AskDecisionInvalid("a response needs a message to send in place of the action", field=f"{where}.message")
        return {"type": "respond", "message": message}
    return {
        "type": "edit",
        "edited_action": _edit_clean(decision.get("edited_action"), action=action, config=config, where=where),
    }


def _edit_clean(edited: object, *, action: dict, config: dict, where: str) -> dict[str, Any]:
    field = f"{where}.edited_action"
    if not isinstance(edited, dict) or not isinstance(edited.get("args"), dict):
        raise AskDecisionInvalid("an edit needs edited_action with an args object", field=field)
    # Pinned as LangChain pins it: an edit changes the arguments, never which tool runs.
    name = edited.get("name", action["name"])
    if name != action["name"]:
        raise AskDecisionInvalid(f"an edit cannot change the action from {action['name']} to {name!r}", field=f"{field}.name")
    args = edited["args"]
    _texts_check(args, field=f"{field}.args")
    if len(json.dumps(args)) > settings.DECISION_ARGS_MAX_LENGTH:
        raise AskDecisionInvalid(
            f"edited arguments are longer than {settings.DECISION_ARGS_MAX_LENGTH} characters", field=f"{field}.args"
        )
    try:
        args_check(args=args, schema=config.get("args_schema"), proposed=action["args"])
    except ArgsInvalid as exc:
        raise AskDecisionInvalid(str(exc), field=f"{field}.args{exc.path}") from None
    return {"name": action["name"], "args": args}


def _texts_check(value: Any, *, field: str) -> None:
    if isinstance(value, str):
        text_clean(value, field=field)
    elif isinstance(value, dict):
        for key, item in value.items():
            text_clean(key, field=field)
            _texts_check(item, field=f"{field}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _texts_check(item, field=f"{field}[{index}]")


def text_clean(text: object, *, field: str) -> str:
    if text is None:
        return ""
    if not isinstance(text, str):
        raise AskDecisionInvalid("must be text", field=field)
    if len(text) > settings.DECISION_NOTE_MAX_LENGTH:
        raise AskDecisionInvalid(f"is longer than {settings.DECISION_NOTE_MAX_LENGTH} characters", field=field)
    try:
        return text_check(text=text, field=field)
    except TextInvalid as exc:  # refused here, so nothing is locked or recorded
        raise AskDecisionInvalid(str(exc), field=field) from None


def ask_resume_langchain(*, spec: AskSpec, decisions: list[dict[str, Any]]) -> Any:
    """The decisions as the asking graph takes them in ``Command(resume=...)``: ``{"decisions": [...]}``
    for a ``HITLRequest``, the one decision for any other ask."""
    return {"decisions": decisions} if spec.kind == "batched" else decisions[0]


def ask_resume_value(*, spec: AskSpec, decisions: list[dict[str, Any]], meta: dict[str, Any]) -> Any:
    """What the graph is resumed with for this ask: its own shape, plus who and when where it has room."""
    resume = ask_resume_langchain(spec=spec, decisions=decisions)
    return resume if spec.kind == "per_call" else {**resume, **meta}


# What ``moderation.review.apply`` puts beside an answer (``ask_resume_value``'s ``meta``): never a decision's own key.
RESUME_META_KEYS = frozenset({"reviewer", "decided_at", "note", "withdrawn", "tally"})


def ask_resume_read(*, spec: AskSpec, value: Any) -> tuple[list[dict[str, Any]], str | None]:
    """``ask_resume_value`` read back: the decisions ``value`` answers the ask with, and the reviewer it
    names (None where the ask's shape has no room for one). ValueError for a value not of that shape."""
    if spec.kind == "per_call":
        return [value], None
    if not isinstance(value, dict):
        raise ValueError(f"a {spec.kind} ask is answered with an object, not {type(value).__name__}")
    if spec.kind == "plain":
        return [{k: v for k, v in value.items() if k not in RESUME_META_KEYS}], value.get("reviewer")
    if not isinstance(value.get("decisions"), list):
        raise ValueError("a batched ask is answered with its decisions")
    return value["decisions"], value.get("reviewer")


def decisions_kind(decisions: list[dict[str, Any]]) -> str:
    """One word for a set of decisions: their common type, or ``mixed``."""
    kinds = {d["type"] for d in decisions}
    return kinds.pop() if len(kinds) == 1 else "mixed"


PAST = {"approve": "approved", "edit": "edited", "reject": "rejected", "respond": "answered"}


class ArgChangeKind(StrEnum):
    CHANGED = "changed"
    ADDED = "added"
    REMOVED = "removed"


@dataclass(frozen=True)
class ArgChange:
    """One argument an edit changed: ``before`` is None for an added one, ``after`` for a removed one."""

    arg: str
    kind: ArgChangeKind
    before: Any = None
    after: Any = None

    def as_payload(self) -> dict[str, Any]:
        return {"arg": self.arg, "change": self.kind.value, "before": self.before, "after": self.after}

    def words(self) -> str:
        if self.kind == ArgChangeKind.ADDED:
            return f"{self.arg} added: {_short(self.after)}"
        if self.kind == ArgChangeKind.REMOVED:
            return f"{self.arg} removed (was {_short(self.before)})"
        return f"{self.arg} {_short(self.before)} → {_short(self.after)}"


@dataclass(frozen=True)
class ActionEdit:
    """What an edit decision changed in its action's arguments (``changes`` empty: sent back unchanged)."""

    index: int  # the action's place in its ask
    action: str
    changes: tuple[ArgChange, ...]

    def as_payload(self) -> dict[str, Any]:
        return {"index": self.index, "action": self.action, "changes": [c.as_payload() for c in self.changes]}


def ask_edits_diff(*, spec: AskSpec, decisions: list[dict[str, Any]]) -> list[ActionEdit]:
    """For each edit among ``decisions`` (one per action, in order), its arguments against those the agent
    proposed: changed, added and removed, in the proposal's order, then the added ones in the edit's."""
    edits = []
    for index, (decision, action) in enumerate(zip(decisions, spec.actions, strict=False)):
        if decision.get("type") != "edit":
            continue
        before, after = action["args"], decision["edited_action"]["args"]
        changes = [
            ArgChange(arg=k, kind=ArgChangeKind.REMOVED, before=v)
            if k not in after
            else ArgChange(arg=k, kind=ArgChangeKind.CHANGED, before=v, after=after[k])
            for k, v in before.items()
            if k not in after or not _same(v, after[k])
        ]
        changes += [ArgChange(arg=k, kind=ArgChangeKind.ADDED, after=v) for k, v in after.items() if k not in before]
        edits.append(ActionEdit(index=index, action=action["name"], changes=tuple(changes)))
    return edits


def _same(a: Any, b: Any) -> bool:
    # JSON's values, not Python's: true is not 1, and 80 is 80.0.
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def decisions_describe(*, spec: AskSpec, decisions: list[dict[str, Any]], messages: bool = True) -> str:
    """Plain words for what was decided: "approved publish", "edited refund (amount 120 → 80)".

    ``messages=False`` leaves out what a reviewer wrote (a reject's reason, a response),
    for people who may see decisions but not notes.
    """
    edits = {edit.index: edit for edit in ask_edits_diff(spec=spec, decisions=decisions)}
    parts = []
    for index, (decision, action) in enumerate(zip(decisions, spec.actions, strict=False)):
        kind = decision["type"]
        text = f"{PAST[kind]} {action['name']}"
        if kind == "edit":
            changes = [change.words() for change in edits[index].changes]
            text += f" ({', '.join(changes)})" if changes else " (no change)"
        elif messages and decision.get("message"):
            text += f" (“{_short(decision['message'])}”)"
        parts.append(text)
    return "; ".join(parts)


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"
