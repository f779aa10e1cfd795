"""An edit's arguments against the ask's args_schema, with JSON Schema's own semantics (moderation.graphs.argschema)."""

from __future__ import annotations

import pytest

from moderation.graphs.argschema import ArgsInvalid, args_check

# As pydantic writes a tool's schema (examples/refund_agent): no additionalProperties.
REFUND = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "amount": {"type": "number", "exclusiveMinimum": 0, "maximum": 10_000},
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "to": {"type": "string", "format": "email"},
        "day": {"type": "string", "format": "date"},
        "kind": {"type": "string", "enum": ["full", "partial"]},
        "body": {"type": "string"},
        "lines": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["order_id", "amount", "currency"],
}
PROPOSED = {"order_id": "A-17", "amount": 120, "currency": "EUR"}


def _refused(args: dict, schema: dict | None = REFUND, proposed: dict = PROPOSED) -> ArgsInvalid:
    with pytest.raises(ArgsInvalid) as caught:
        args_check(args=args, schema=schema, proposed=proposed)
    return caught.value


@pytest.mark.parametrize("args", [
    {**PROPOSED, "amount": 80},
    {**PROPOSED, "to": "ana@customers.example", "day": "2026-12-01", "kind": "partial"},
    {**PROPOSED, "body": "Dear Ana,\r\n\n\tyour refund is on its way."},  # free text keeps its lines
    {**PROPOSED, "lines": ["one", "two\nthree"]},
])
def test_what_the_tool_takes_passes(args):
    args_check(args=args, schema=REFUND, proposed=PROPOSED)


def test_a_pattern_is_anchored_as_ecma_262_anchors_it():
    # Python's $ also matches before a trailing newline: jsonschema passed it, the tool (pydantic) did not.
    assert _refused({**PROPOSED, "currency": "EUR\n"}).path == ".currency"


def test_ecma_digits_are_ascii_digits():
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^\\d{3}$"}}}
    args_check(args={"code": "123"}, schema=schema, proposed={})
    assert _refused({"code": "١٢٣"}, schema=schema, proposed={}).path == ".code"  # Arabic-Indic digits: Python's \d took them


def test_pattern_properties_are_ecma_too():
    schema = {"type": "object", "patternProperties": {"^x_[a-z]+$": {"type": "integer"}}}
    args_check(args={"x_a": 1}, schema=schema, proposed={})
    assert _refused({"x_a": "one"}, schema=schema, proposed={}).path == ".x_a"


@pytest.mark.parametrize(("field", "value"), [("to", "not-an-address"), ("day", "2026-02-30")])
def test_formats_are_checked(field, value):
    assert _refused({**PROPOSED, field: value}).path == f".{field}"


def test_an_argument_the_schema_does_not_name_is_refused_naming_it():
    refused = _refused({**PROPOSED, "extra": 1})
    assert refused.path == ".extra" and "order_id, amount, currency" in str(refused)


def test_extra_arguments_pass_where_the_schema_allows_them_or_the_agent_proposed_them_unchanged():
    args_check(args={**PROPOSED, "extra": 1}, schema={**REFUND, "additionalProperties": True}, proposed=PROPOSED)
    args_check(args={**PROPOSED, "extra": 1}, schema={**REFUND, "additionalProperties": {"type": "integer"}},
               proposed=PROPOSED)
    args_check(args={**PROPOSED, "trace": "t-1", "amount": 80}, schema=REFUND, proposed={**PROPOSED, "trace": "t-1"})
    assert _refused({**PROPOSED, "trace": "t-2"}, proposed={**PROPOSED, "trace": "t-1"}).path == ".trace"


@pytest.mark.parametrize(("args", "path"), [
    ({**PROPOSED, "amount": float("nan")}, ".amount"),
    ({**PROPOSED, "amount": float("inf")}, ".amount"),
    ({**PROPOSED, "lines": [float("-inf")]}, ".lines[0]"),
])
def test_a_non_finite_number_is_refused(args, path):
    assert _refused(args).path == path


@pytest.mark.parametrize(("args", "path"), [
    ({**PROPOSED, "order_id": "A-17\x1b[2J"}, ".order_id"),  # free text: no escape sequences
    ({**PROPOSED, "body": "bell\x07"}, ".body"),
    ({**PROPOSED, "to": "ana@customers.example\n"}, ".to"),  # a format takes no line break
    ({**PROPOSED, "kind": "full\t"}, ".kind"),
    ({**PROPOSED, "lines": ["ok", "\x85"]}, ".lines[1]"),  # C1 controls too
    ({**PROPOSED, "ord\ner_id": "A-17"}, ""),
])
def test_control_characters_are_refused_unless_the_schema_allows_them(args, path):
    assert "control character" in str(refused := _refused(args)) and refused.path == path


def test_a_pattern_that_takes_control_characters_allows_them():
    schema = {"type": "object", "properties": {"raw": {"type": "string", "pattern": "^[\\s\\S]*$"}}}
    args_check(args={"raw": "\x1b[1mbold\x1b[0m"}, schema=schema, proposed={})


def test_without_a_schema_the_arguments_are_held_to_free_text_and_finite_numbers():
    args_check(args={"note": "two\nlines", "n": 1.5, "extra": True}, schema=None, proposed={})
    assert _refused({"note": "\x00"}, schema=None).path == ".note"
    assert _refused({"n": float("nan")}, schema=None).path == ".n"


def test_a_schema_pattern_that_is_not_ecma_refuses_the_edit_instead_of_passing_it_unchecked():
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "(?P<name>x)"}}}
    assert "ECMA-262" in str(_refused({"code": "x"}, schema=schema, proposed={}))
