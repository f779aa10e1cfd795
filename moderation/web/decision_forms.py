"""The item page's decision forms: what each ask offers, and a posted form read back as decisions.

Every ask, the moderation graph's ``publish`` or any agent's, shows each action's arguments
and a control per type its ``allowed_decisions`` lists; an edit has an input per argument,
typed by ``args_schema`` or by the proposed values. Plain HTML posts, with fields:

- ``ask`` (the interrupt id), ``note``, and ``reason`` (a reject's reason code, per ask);
- ``action-<i>-type``, ``action-<i>-message``, and for an edit ``action-<i>-arg-<key>`` per
  argument (or ``action-<i>-args``, JSON);
- or ``decision`` (approve / reject for every action; a quorum vote) or ``decisions`` (JSON).

``form_decision_read`` turns a post into what ``item_decide`` takes, which validates it;
``form_field_for`` maps the guard's error field back to the form's input.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from moderation.core.jsonparse import json_parse
from moderation.graphs.asks import AskSpec
from moderation.graphs.registry import DEFAULT_GRAPH
from moderation.items.models import ReviewAsk
from moderation.records.models import ReasonCode
from moderation.records.reasons import decisions_rejecting
from moderation.web.display import tool_description_display, value_display

TYPE_LABELS = {"approve": "Approve", "edit": "Edit", "reject": "Reject", "respond": "Respond"}
VOTE_KINDS = ("approve", "reject")
_INPUT_TYPES = {"number": "number", "integer": "number", "string": "text", "boolean": "checkbox"}


class FormInvalid(ValueError):
    """A post that cannot be read as decisions; ``field`` is the form field to mark."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class FormDecision:
    """What ``item_decide`` is called with."""

    decision: str | None
    decisions: list[dict[str, Any]] | None
    note: str
    reason: str | None = None


@dataclass
class ArgInput:
    """One argument's input in an edit form (an object or a list: a small JSON editor, ``widget == "json"``)."""

    name: str
    key: str
    label: str
    widget: str  # number, text, textarea, select, checkbox, json
    value: str = ""
    checked: bool = False
    required: bool = False
    step: str = ""
    min: Any = None
    max: Any = None
    max_length: int | None = None
    options: list[tuple[str, str]] = field(default_factory=list)  # (value, label)
    help: str = ""
    error: str = ""


@dataclass
class ActionForm:
    index: int
    name: str
    description: str
    args: list[tuple[str, str]]
    allowed: list[str]
    type_field: str
    message_field: str
    edit_inputs: list[ArgInput]
    chosen: str = ""
    message: str = ""
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def choices(self) -> list[tuple[str, str]]:
        return [(kind, TYPE_LABELS[kind]) for kind in self.allowed]

    @property
    def can_edit(self) -> bool:
        return "edit" in self.allowed

    @property
    def takes_message(self) -> bool:
        return "reject" in self.allowed or "respond" in self.allowed

    @property
    def type_error(self) -> str:
        return self.errors.get(self.type_field, "")

    @property
    def message_error(self) -> str:
        return self.errors.get(self.message_field, "")

    @property
    def edit_error(self) -> str:
        return self.errors.get(f"action-{self.index}-edit", "")

    @property
    def buttons(self) -> list[tuple[str, str]]:
        """The one-action form's submit buttons, edit aside (it has its own, first in the form)."""
        return [(kind, label) for kind, label in self.choices if kind != "edit"]


@dataclass
class AskForm:
    ask: ReviewAsk
    form_id: str
    actions: list[ActionForm]
    note: str = ""
    errors: dict[str, str] = field(default_factory=dict)
    reasons: list[ReasonCode] = field(default_factory=list)
    reason: str = ""
    vote: bool = False  # a quorum ask: one vote for the whole ask (templates/moderation/_vote_form.html)

    @property
    def votes(self) -> list[tuple[str, str]]:
        """A quorum ask's buttons: the votes every action allows (the tally resolves the ask, all its actions at once)."""
        return [(kind, f"Vote {kind}") for kind in VOTE_KINDS if all(kind in action.allowed for action in self.actions)]

    @property
    def takes_reason(self) -> bool:
        # No codes apply (the item's reason rule): no field, and the message goes as typed.
        return bool(self.reasons) and any("reject" in action.allowed for action in self.actions)

    @property
    def single(self) -> bool:
        return len(self.actions) == 1

    @property
    def interrupt_id(self) -> str:
        return self.ask.interrupt_id


def ask_forms_build(
    *,
    asks: list[ReviewAsk],
    posted: Mapping[str, str] | None = None,
    errors: dict[str, str] | None = None,
    reasons: list[ReasonCode] | None = None,
    vote: bool = False,
) -> list[AskForm]:
    """A form per open ask; the posted ask's form is refilled with ``posted`` and shows ``errors``.

    ``reasons``: the reason codes a reject may name (the item's reason rule's; none: no
    field). ``vote``: the item is decided by quorum, whose votes are only approve or reject (the guard refuses the rest).
    """
    forms = []
    for n, ask in enumerate(asks):
        # A post naming no ask was for the only one open (the guard's own default).
        mine = posted is not None and posted.get("ask", ask.interrupt_id if len(asks) == 1 else None) == ask.interrupt_id
        forms.append(
            _ask_form(
                ask,
                form_id="decide-form" if n == 0 else f"decide-form-{n + 1}",
                posted=posted if mine else None,
                errors=(errors or {}) if mine else {},
                reasons=reasons or [],
                vote=vote,
            )
        )
    return forms


def _ask_form(
    ask: ReviewAsk,
    *,
    form_id: str,
    posted: Mapping[str, str] | None,
    errors: dict[str, str],
    reasons: list[ReasonCode],
    vote: bool = False,
) -> AskForm:
    spec = AskSpec.from_payload(ask.payload)
    # The built-in content graph asks about the item itself (its title, excerpt, source, flags,
    # risk), which the page shows above the form: its arguments would only repeat them.
    repeats_item = ask.item_id is not None and ask.item.graph == DEFAULT_GRAPH
    actions = []
    for i, (action, config) in enumerate(zip(spec.actions, spec.configs, strict=False)):
        inputs = _edit_inputs(i, action=action, config=config, posted=posted, errors=errors)
        actions.append(
            ActionForm(
                index=i,
                name=action["name"],
                description=tool_description_display(name=action["name"], description=action.get("description", "")),
                args=[] if repeats_item else [(key, value_display(value)) for key, value in action["args"].items()],
                allowed=[k for k in config["allowed_decisions"] if not vote or k in VOTE_KINDS],
                type_field=f"action-{i}-type",
                message_field=f"action-{i}-message",
                edit_inputs=inputs,
                chosen=(posted or {}).get(f"action-{i}-type", ""),
                message=(posted or {}).get(f"action-{i}-message", ""),
                errors={k: v for k, v in errors.items() if k in (f"action-{i}-type", f"action-{i}-message", f"action-{i}-edit")},
            )
        )
    return AskForm(
        ask=ask,
        form_id=form_id,
        actions=actions,
        note=(posted or {}).get("note", ""),
        errors=errors,
        reasons=reasons,
        reason=(posted or {}).get("reason", ""),
        vote=vote,
    )


def _edit_inputs(
    i: int, *, action: dict, config: dict, posted: Mapping[str, str] | None, errors: dict[str, str]
) -> list[ArgInput]:
    if "edit" not in config["allowed_decisions"]:
        return []
    args = action["args"]
    props, required = _arg_props(action=action, config=config)
    inputs = []
    for key, prop in props.items():
        name = f"action-{i}-arg-{key}"
        current = args.get(key)
        widget = _widget(prop, current=current)
        one = ArgInput(
            name=name,
            key=key,
            label=str(prop.get("title") or key),
            widget=widget,
            required=key in required,
            help=str(prop.get("description") or ""),
            error=errors.get(name, ""),
        )
        if widget == "checkbox":
            one.required = False  # an unchecked box is a value (false), not a missing one
            one.checked = (name in posted) if posted is not None else bool(current)
        elif posted is not None:
            one.value = posted.get(name, "")
        elif current is not None or (widget == "json" and key in args):
            one.value = json.dumps(current, indent=2, ensure_ascii=False) if widget == "json" else _plain(current)
        if widget == "number":
            one.step = "1" if _type(prop) == "integer" else "any"
            one.min, one.max = prop.get("minimum"), prop.get("maximum")
        if widget in ("text", "textarea"):
            one.max_length = prop.get("maxLength")
        if widget == "select":
            one.options = [(_plain(option), _plain(option)) for option in prop["enum"]]
        inputs.append(one)
    return inputs


# A proposed value's JSON type, when no args_schema says it: what its input reads back.
_INFERRED = {bool: "boolean", int: "number", float: "number", str: "string"}


def _arg_props(*, action: dict, config: dict) -> tuple[dict[str, dict], set[str]]:
    """Each argument's input and which are required: the ``args_schema``'s properties, else one per
    proposed argument, typed by its value (a number stays a number, not an integer: 120 may become 79.5)."""
    schema = config.get("args_schema")
    if props := _schema_props(schema):
        return props, set(schema.get("required") or [])
    args = action["args"]
    return {key: {"type": _INFERRED[type(v)]} if type(v) in _INFERRED else {} for key, v in args.items()}, set(args)


def _schema_props(schema: Any) -> dict[str, dict]:
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return {}
    return {k: v for k, v in schema["properties"].items() if isinstance(v, dict)}


def _type(prop: dict) -> str:
    kind = prop.get("type")
    if isinstance(kind, list):  # ["number", "null"]: the first that is not null
        kind = next((k for k in kind if k != "null"), None)
    return kind if isinstance(kind, str) else ""


def _widget(prop: dict, *, current: Any = None) -> str:
    if isinstance(prop.get("enum"), list) and prop["enum"]:
        return "select"
    widget = _INPUT_TYPES.get(_type(prop), "json")
    # A text of several lines (a message, an address) keeps its line breaks.
    return "textarea" if widget == "text" and isinstance(current, str) and "\n" in current else widget


def _plain(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, ensure_ascii=False)


# --- reading a post --------------------------------------------------------------------------------


def form_decision_read(*, spec: AskSpec | None, data: Mapping[str, str]) -> FormDecision:
    """The decisions a posted form stands for; ``FormInvalid`` for a field that cannot be read.

    Only reading happens here (numbers, JSON, a choice missing); whether the decisions
    are allowed and the edited arguments valid is the guard's to say, before any lock.
    """
    note = data.get("note", "")
    reason = data.get("reason") or None
    if "decisions" in data:
        try:
            decisions = json_parse(data["decisions"])
        except ValueError:
            raise FormInvalid("decisions is not valid JSON", field="decisions") from None
        return FormDecision(decision=None, decisions=decisions, note=note, reason=reason)
    if spec is None or not any(f"action-{i}-type" in data for i in range(len(spec.actions))):
        decision = data.get("decision")
        return FormDecision(decision=decision, decisions=None, note=note, reason=reason if decision == "reject" else None)
    single = len(spec.actions) == 1
    decisions = [
        _decision_read(i, action=action, config=config, data=data, note=note if single else "")
        for i, (action, config) in enumerate(zip(spec.actions, spec.configs, strict=False))
    ]
    return FormDecision(decision=None, decisions=decisions, note=note, reason=reason if decisions_rejecting(decisions) else None)


def _decision_read(i: int, *, action: dict, config: dict, data: Mapping[str, str], note: str) -> dict[str, Any]:
    kind = data.get(f"action-{i}-type", "")
    if not kind:
        raise FormInvalid(f"choose what to do with {action['name']}", field=f"action-{i}-type")
    message = data.get(f"action-{i}-message", "").strip() or note.strip()
    if kind in ("reject", "respond"):
        return {"type": kind, **({"message": message} if message else {})}
    if kind == "edit":
        return {
            "type": "edit",
            "edited_action": {"name": action["name"], "args": _args_read(i, action=action, config=config, data=data)},
        }
    return {"type": kind}


def _args_read(i: int, *, action: dict, config: dict, data: Mapping[str, str]) -> dict[str, Any]:
    name = f"action-{i}-args"
    if name in data:  # the whole arguments as one JSON object (a script's post)
        try:
            args = json_parse(data[name])
        except ValueError as exc:
            raise FormInvalid(f"not valid JSON: {exc}", field=name) from None
        if not isinstance(args, dict):
            raise FormInvalid("the arguments must be a JSON object ({…})", field=name)
        return args
    props, required = _arg_props(action=action, config=config)
    # Arguments the schema does not describe have no input; they go back unchanged.
    args = {k: v for k, v in action["args"].items() if k not in props}
    for key, prop in props.items():
        name = f"action-{i}-arg-{key}"
        widget = _widget(prop, current=action["args"].get(key))
        if widget == "checkbox":
            # An unticked box the agent never set stays unset: the edit changes what the reviewer changed.
            if name in data or key in action["args"]:
                args[key] = name in data
            continue
        raw = data.get(name, "")
        if widget in ("text", "textarea") and not _schema_props(config.get("args_schema")) and name in data:
            args[key] = raw  # no schema: an emptied text is the empty text the reviewer meant
            continue
        if not raw.strip():
            if key in required:
                raise FormInvalid("required", field=name)
            continue
        args[key] = _value_read(raw, prop=prop, widget=widget, field=name)
    return args


def _value_read(raw: str, *, prop: dict, widget: str, field: str) -> Any:
    if widget == "select":
        for option in prop["enum"]:
            if _plain(option) == raw:
                return option
        raise FormInvalid(f"choose one of {', '.join(_plain(o) for o in prop['enum'])}", field=field)
    if widget == "number":
        try:
            number = float(raw)
        except ValueError:
            raise FormInvalid("enter a number", field=field) from None
        if not math.isfinite(number):
            raise FormInvalid("enter a finite number", field=field)
        if _type(prop) == "integer" and not number.is_integer():
            raise FormInvalid("enter a whole number", field=field)
        # 80, not 80.0: what the agent proposed was most likely an int, and the loser reads "120 → 80".
        return int(number) if number.is_integer() and abs(number) < 2**53 else number
    if widget == "json":
        try:
            return json_parse(raw)
        except ValueError as exc:
            raise FormInvalid(f"not valid JSON: {exc}", field=field) from None
    return raw


_GUARD_FIELD = re.compile(r"^decisions\[(\d+)\]\.(type|message|edited_action)(?:\.args)?(?:\.([^.\[]+))?")


def form_field_for(*, spec: AskSpec | None, guard_field: str) -> str:
    """The form field a guard error (``decisions[0].edited_action.args.amount``) belongs to; "" for the whole form."""
    if guard_field in ("note", "reason"):
        return guard_field
    match = _GUARD_FIELD.match(guard_field or "")
    if spec is None or match is None or int(match.group(1)) >= len(spec.actions):
        return ""
    i, part, key = int(match.group(1)), match.group(2), match.group(3)
    if part == "type":
        return f"action-{i}-type"
    if part == "message":
        return "note" if len(spec.actions) == 1 else f"action-{i}-message"
    if "edit" not in spec.configs[i]["allowed_decisions"]:
        return f"action-{i}-edit"
    props, _ = _arg_props(action=spec.actions[i], config=spec.configs[i])
    return f"action-{i}-arg-{key}" if key in props else f"action-{i}-edit"
