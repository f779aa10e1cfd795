"""An edit's arguments against the ask's args_schema, with JSON Schema's own semantics (moderation.graphs.argschema)."""

from __future__ import annotations

import functools
import http.server
import math
import threading
import time

import pytest
import referencing.exceptions

from moderation.graphs.argschema import (
    _REGISTRY,
    CHECK_MAX_STEPS,
    SCHEMA_MAX_BYTES,
    SCHEMA_MAX_DEPTH,
    ArgsInvalid,
    SchemaInvalid,
    args_check,
    args_schema_check,
)

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


@pytest.mark.parametrize(
    "args",
    [
        {**PROPOSED, "amount": 80},
        {**PROPOSED, "to": "ana@customers.example", "day": "2026-12-01", "kind": "partial"},
        {**PROPOSED, "body": "Dear Ana,\r\n\n\tyour refund is on its way."},  # free text keeps its lines
        {**PROPOSED, "lines": ["one", "two\nthree"]},
    ],
)
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
    args_check(args={**PROPOSED, "extra": 1}, schema={**REFUND, "additionalProperties": {"type": "integer"}}, proposed=PROPOSED)
    args_check(args={**PROPOSED, "trace": "t-1", "amount": 80}, schema=REFUND, proposed={**PROPOSED, "trace": "t-1"})
    assert _refused({**PROPOSED, "trace": "t-2"}, proposed={**PROPOSED, "trace": "t-1"}).path == ".trace"


@pytest.mark.parametrize(
    ("args", "path"),
    [
        ({**PROPOSED, "amount": float("nan")}, ".amount"),
        ({**PROPOSED, "amount": float("inf")}, ".amount"),
        ({**PROPOSED, "lines": [float("-inf")]}, ".lines[0]"),
    ],
)
def test_a_non_finite_number_is_refused(args, path):
    assert _refused(args).path == path


@pytest.mark.parametrize(
    ("args", "path"),
    [
        ({**PROPOSED, "order_id": "A-17\x1b[2J"}, ".order_id"),  # free text: no escape sequences
        ({**PROPOSED, "body": "bell\x07"}, ".body"),
        ({**PROPOSED, "to": "ana@customers.example\n"}, ".to"),  # a format takes no line break
        ({**PROPOSED, "kind": "full\t"}, ".kind"),
        ({**PROPOSED, "lines": ["ok", "\x85"]}, ".lines[1]"),  # C1 controls too
        ({**PROPOSED, "ord\ner_id": "A-17"}, ""),
    ],
)
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


# --- the schema itself, as an outsider sends it (issue 41) -----------------------------------------


def _nested_anyof(levels: int) -> dict:
    """The probe's 1.2 KB schema: each level anyOf two $refs to the next, 2**levels paths."""
    defs = {f"l{i}": {"anyOf": [{"$ref": f"#/$defs/l{i + 1}"}, {"$ref": f"#/$defs/l{i + 1}"}]} for i in range(levels)}
    defs[f"l{levels}"] = {"type": "string"}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/l0"}}}


@pytest.mark.parametrize(
    ("schema", "needle", "path"),
    [
        ({"$ref": "#"}, "refers to itself in a loop through $ref", ""),
        (
            {"properties": {"a": {"$ref": "#/$defs/b"}}, "$defs": {"b": {"items": {"$ref": "#/$defs/b"}}}},
            "loop through $ref",
            "$defs.b",
        ),
        ({"type": 5}, "not a valid JSON Schema", "type"),
        ({"multipleOf": 0}, "0 is less than or equal to the minimum of 0", "multipleOf"),
        ({"minimum": "x"}, "'x' is not of type 'number'", "minimum"),
        ({"properties": {"a": {"$ref": "http://127.0.0.1:8697/schema"}}}, "the server fetches nothing", "properties.a.$ref"),
        ({"properties": {"a": {"$ref": "#/$defs/missing"}}}, "points nowhere", "properties.a.$ref"),
        ({"properties": {"a": {"$dynamicRef": "#meta"}}}, "$dynamicRef is not taken", "properties.a.$dynamicRef"),
        (
            {"properties": {"a": {"$id": "http://evil.example/a", "type": "string"}}},
            "$id is taken at the schema's root only",
            "properties.a.$id",
        ),
        ({"$schema": "http://json-schema.org/draft-04/schema#"}, "draft 2020-12, 2019-09, 7 or 6", "$schema"),
        ({"properties": {"a": {"pattern": "(?=a)"}}}, "lookahead", "properties.a.pattern"),
        ({"properties": {"a": {"pattern": "(a)\\1"}}}, "backreference", "properties.a.pattern"),
        ({"patternProperties": {"(?<!x)y": {}}}, "lookahead and lookbehind", "patternProperties"),
        ({"properties": {"a": {"pattern": "(?P<n>x)"}}}, "not an ECMA-262 regular expression", "properties.a.pattern"),
        (_nested_anyof(16), "expands to more than 2,000 subschemas", ""),
        ({"description": "x" * (SCHEMA_MAX_BYTES + 1)}, "the limit is 32,768", ""),
        (functools.reduce(lambda inner, _: {"not": inner}, range(SCHEMA_MAX_DEPTH), {}), "nests deeper than 24", ""),
        ("not an object", "must be a JSON object", ""),
    ],
)
def test_a_schema_the_server_will_not_run_is_refused_naming_where(schema, needle, path):
    with pytest.raises(SchemaInvalid) as refused:
        args_schema_check(schema=schema)
    assert needle in str(refused.value) and refused.value.path == path


@pytest.mark.parametrize(
    "schema",
    [
        REFUND,
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "definitions": {"a": {"type": "string"}},
            "properties": {"x": {"$ref": "#/definitions/a"}},
        },
        _nested_anyof(8),  # 256 paths: within the bound
        {"properties": {"x": {"$ref": "#/$defs/a~1b"}}, "$defs": {"a/b": {"type": "string"}}},
    ],
)
def test_schemas_a_tool_writes_pass(schema):
    args_schema_check(schema=schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {"type": "object", "properties": {"n": {"type": 5}}},
        {"type": "object", "properties": {"n": {"multipleOf": 0}}},
        {"type": "object", "properties": {"n": {"minimum": "x"}}},
        {"type": "object", "$defs": {"n": {"$ref": "#/$defs/n"}}, "properties": {"n": {"$ref": "#/$defs/n"}}},
    ],
)
def test_an_item_stored_with_such_a_schema_refuses_an_edit_saying_why_instead_of_crashing(schema):
    refused = _refused({"n": 2}, schema=schema, proposed={"n": 1})
    assert str(refused).startswith("this ask's args_schema cannot check an edit: ") and refused.path == ""


def test_a_remote_ref_is_never_fetched(tmp_path):
    hits = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            hits.append(self.headers.get("User-Agent"))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"type": "string", "description": "SECRET-FROM-INSIDE"}')

        def log_message(self, *args):
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}/schema.json"
            schema = {"type": "object", "properties": {"a": {"$ref": url}}}
            refused = _refused({"a": 5}, schema=schema, proposed={"a": 4})
        finally:
            server.shutdown()
    assert hits == [] and "SECRET" not in str(refused) and "fetches nothing" in str(refused)


def test_the_validator_resolves_in_a_registry_that_retrieves_nothing():
    # Defence in depth behind args_schema_check: the registry itself refuses any URI it does not hold.
    with pytest.raises(referencing.exceptions.Unresolvable):
        _REGISTRY.resolver().lookup("http://127.0.0.1:1/schema.json")


def _seconds(check) -> float:
    best = math.inf
    for _ in range(5):
        started = time.perf_counter()
        check()
        best = min(best, time.perf_counter() - started)
    return best


def test_a_pattern_that_backtracks_exponentially_is_checked_in_time_linear_in_the_text():
    """The probe's schema: ``^(a+)+$`` against 26 a's and a "!" (with a backtracking engine each extra
    "a" doubles the time: seconds at 26). Judged against the same check of half the text, in this run:
    linear, twice the text costs about twice as much; backtracking, 2^13 times as much."""
    evil = {"type": "object", "properties": {"memo": {"type": "string", "pattern": "^(a+)+$"}, "n": {"type": "integer"}}}

    def check(memo):
        return lambda: _refused({"memo": memo, "n": 2}, schema=evil, proposed={"memo": memo, "n": 1})

    long, short = "a" * 26 + "!", "a" * 13 + "!"
    check(long)(), check(short)()  # the schema checked and cached once, as at submit
    assert _seconds(check(long)) < 100 * _seconds(check(short))
    assert _refused({"memo": long, "n": 2}, schema=evil, proposed={}).path == ".memo"


def test_an_edit_whose_check_would_take_too_many_steps_is_refused_once_it_has_taken_them():
    """Within every schema bound, 1,000 anyOf branches over 100 items is 100,000 evaluations (1,990 over 3,900
    took minutes): the check stops at CHECK_MAX_STEPS and refuses; the same schema with a short list passes."""
    schema = {"type": "object", "properties": {"x": {"type": "array", "items": {"anyOf": [{"const": i} for i in range(1000)]}}}}
    args_schema_check(schema=schema)
    refused = _refused({"x": [999] * 100}, schema=schema, proposed={})
    assert f"more than {CHECK_MAX_STEPS:,} steps" in str(refused)
    args_check(args={"x": [999] * 5}, schema=schema, proposed={})


def test_format_regex_is_ecma_262_and_checked_without_recursion():
    """jsonschema's own "regex" format compiled the text with Python's re: 1,000 nested groups (within the
    2,000-character argument limit) raised RecursionError, a 500 on every edit of the ask."""
    schema = {"type": "object", "properties": {"r": {"type": "string", "format": "regex"}}}
    assert _refused({"r": "(" * 1000 + ")" * 1000}, schema=schema, proposed={}).path == ".r"
    assert _refused({"r": "(?P<n>x)"}, schema=schema, proposed={}).path == ".r"  # Python's, not ECMA's
    args_check(args={"r": "(?<n>a)\\k<n>"}, schema=schema, proposed={})  # ECMA's, not Python's


@pytest.mark.parametrize("bounded", [True, False], ids=["bounded", "control-unbounded"])
def test_a_schema_of_many_costly_patterns_is_refused_after_compiling_what_fits_the_bound(monkeypatch, bounded):
    """RE2 compiles holding the GIL: 40 patterns of \\p{L}{400} took 5.6 s at submit. Compiling stops once
    the patterns' programs pass the bound; the control, with no bound, compiles every one and takes the schema."""
    from moderation.graphs import argschema

    if not bounded:
        monkeypatch.setattr(argschema, "SCHEMA_MAX_PATTERN_PROGRAM", float("inf"))
    compiled: list[str] = []
    real_compile = argschema.pattern_compile

    def counted(pattern: str):
        compiled.append(pattern)
        return real_compile(pattern)

    monkeypatch.setattr(argschema, "pattern_compile", counted)
    schema = {"patternProperties": {f"^\\p{{L}}{{25}}{n}$": {"type": "string"} for n in range(40)}}
    argschema._schema_checked.cache_clear()  # checked schemas are remembered: neither arm may find the other's verdict
    try:
        if bounded:
            with pytest.raises(SchemaInvalid) as refused:
                args_schema_check(schema=schema)
            assert "more than 200,000 instructions" in str(refused.value) and refused.value.path == "patternProperties"
            assert len(compiled) < 10  # about 30,000 instructions each
        else:
            args_schema_check(schema=schema)
            assert len(compiled) == 40
    finally:
        argschema._schema_checked.cache_clear()
