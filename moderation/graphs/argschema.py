"""An ask's ``args_schema``, and an edit's arguments checked against it as the tool will take them.

``args_schema_check`` (at submit, and before each edit) refuses a schema over
``SCHEMA_MAX_BYTES``, ``SCHEMA_MAX_DEPTH`` or ``SCHEMA_MAX_NODES`` (``$ref`` expanded), invalid
against its draft's meta-schema (2020-12 by default), with a ``$ref`` outside itself or in a
loop, with a ``pattern`` that ``moderation.graphs.ecmaregex`` cannot match in linear time, or
with patterns whose programs together exceed ``SCHEMA_MAX_PATTERN_PROGRAM`` (their compile time).
No schema makes the server open a connection. An edit's check stops after
``CHECK_MAX_STEPS`` keyword evaluations, refusing the edit.

An edit's arguments mean what JSON Schema says, not what Python would: patterns (and
``format: regex``) are ECMA-262, ``format`` is checked, an argument the schema does not name
is refused unless the schema allows extra ones or the agent proposed it unchanged, and no
number is NaN or infinite and no string holds a control character (tab, line feed and
carriage return allowed in free text).
"""

from __future__ import annotations

import functools
import json
import math
import re
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import jsonschema
import referencing
import referencing.exceptions
from jsonschema.exceptions import SchemaError, ValidationError

from moderation.graphs.ecmaregex import PatternRefused, pattern_compile, pattern_is_ecma, pattern_search

SCHEMA_MAX_BYTES = 32 * 1024
SCHEMA_MAX_DEPTH = 24
# Subschemas with every $ref expanded: a tool's schema has tens; 16 nested anyOf levels of two refs has 65,536.
SCHEMA_MAX_NODES = 2_000
# Keyword evaluations one edit's check may take: the schema's size times the arguments', bounded. A
# tool's edit takes tens to a few thousand; 1,990 anyOf branches over 3,900 array items took minutes.
CHECK_MAX_STEPS = 20_000
# RE2 instructions over a schema's distinct patterns, about what compiling them costs (30,000 ≈ 11 ms
# for \p{L}{25}): a tool's patterns take tens to a few thousand; 40 patterns of \p{L}{400} took 5.6 s.
SCHEMA_MAX_PATTERN_PROGRAM = 200_000
_DRAFTS = (
    jsonschema.Draft202012Validator,
    jsonschema.Draft201909Validator,
    jsonschema.Draft7Validator,
    jsonschema.Draft6Validator,
)
# Where a schema holds subschemas: one, a list of them, or a map of names to them.
_ONE = (
    "additionalProperties",
    "additionalItems",
    "items",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
_DYNAMIC = ("$dynamicRef", "$recursiveRef")


def _retrieve_nothing(uri: str) -> referencing.Resource:
    raise referencing.exceptions.NoSuchResource(ref=uri)


# Remote references are refused by args_schema_check; this registry fetches nothing even if one slipped by.
_REGISTRY: referencing.Registry = referencing.Registry(retrieve=_retrieve_nothing)

# Unicode's Cc, all of it; and all of it but tab, line feed and carriage return.
_ANY_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_IN_TEXT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_SHAPED = ("format", "enum", "const")
_EXTRA_ALLOWED = ("additionalProperties", "patternProperties", "unevaluatedProperties")


class ArgsInvalid(ValueError):
    """``path`` says where in the arguments: ``.amount``, ``.items[0]``, "" for the whole."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class SchemaInvalid(ValueError):
    """An ``args_schema`` the server will not run; ``path`` says where in it (``properties.memo.pattern``)."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


def args_schema_check(*, schema: Any) -> None:
    """Refuse (``SchemaInvalid``) a schema that is malformed, too large, loops, refers outside itself,
    or has a pattern that cannot be matched in linear time (the module docstring)."""
    if not isinstance(schema, dict):
        raise SchemaInvalid("args_schema must be a JSON object")
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode()) > SCHEMA_MAX_BYTES:
        raise SchemaInvalid(f"args_schema is {len(text.encode()):,} bytes as JSON; the limit is {SCHEMA_MAX_BYTES:,}")
    _schema_checked(text)


@functools.lru_cache(maxsize=256)
def _schema_checked(text: str) -> type:
    """The validator class for a schema (its canonical JSON) that passed every check; checked once per process."""
    schema = json.loads(text)
    _depth_check(schema, depth=1)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    if cls not in _DRAFTS:
        raise SchemaInvalid("$schema must be JSON Schema draft 2020-12, 2019-09, 7 or 6 (or left out: 2020-12)", path="$schema")
    try:
        cls.check_schema(schema, format_checker=None)  # patterns are ECMA-262, checked below, not Python's re
    except SchemaError as exc:
        raise SchemaInvalid(f"args_schema is not a valid JSON Schema: {exc.message}", path=_dotted(exc.path)) from None
    _nodes_check(schema)
    return _validator_class(cls)


def _depth_check(value: Any, *, depth: int) -> None:
    if isinstance(value, (dict, list)):
        if depth > SCHEMA_MAX_DEPTH:
            raise SchemaInvalid(f"args_schema nests deeper than {SCHEMA_MAX_DEPTH} levels")
        for child in value.values() if isinstance(value, dict) else value:
            _depth_check(child, depth=depth + 1)


def _subschemas(node: dict[str, Any], path: list[Any]) -> list[tuple[Any, list[Any]]]:
    found: list[tuple[Any, list[Any]]] = []
    for key in _ONE:
        if isinstance(node.get(key), (dict, bool)):
            found.append((node[key], [*path, key]))
    for key in _LIST:
        if isinstance(node.get(key), list):
            found += [(child, [*path, key, i]) for i, child in enumerate(node[key])]
    for key in _MAP:
        if isinstance(node.get(key), dict):
            found += [(child, [*path, key, name]) for name, child in node[key].items() if isinstance(child, (dict, bool))]
    return found


def _nodes_check(root: dict[str, Any]) -> None:
    """Every subschema's keywords (refs, patterns), then the schema's size with every ``$ref`` expanded:
    no loop, at most SCHEMA_MAX_NODES."""
    children: dict[int, list[Any]] = {}
    paths: dict[int, list[Any]] = {}
    programs = _Programs()
    todo: list[tuple[Any, list[Any]]] = [(root, [])]
    while todo:
        node, path = todo.pop()
        if not isinstance(node, dict) or id(node) in children:
            continue
        paths[id(node)] = path
        subs = _subschemas(node, path)
        # $defs are met only through a $ref: counted there, as often as they are referred to.
        children[id(node)] = [child for child, where in subs if where[len(path)] not in ("$defs", "definitions")]
        _keywords_check(node, path=path, is_root=node is root, programs=programs)
        todo += subs
    for node_id, path in paths.items():
        node = _at(root, path)
        if "$ref" in node:
            target = _ref_target(root, node["$ref"], path=path)
            if isinstance(target, dict) and id(target) not in children:
                raise SchemaInvalid(
                    f"$ref {node['$ref']!r} points at something that is not a subschema", path=_dotted([*path, "$ref"])
                )
            children[node_id].append(target)
    _expanded_count(root, children=children, paths=paths)


@dataclass
class _Programs:
    """A schema's distinct patterns compiled so far, and the total size of their RE2 programs."""

    seen: set[str] = field(default_factory=set)
    total: int = 0


def _keywords_check(node: dict[str, Any], *, path: list[Any], is_root: bool, programs: _Programs) -> None:
    """The node's refs and patterns; each new pattern compiled and its program counted in ``programs``,
    whose total is bounded by SCHEMA_MAX_PATTERN_PROGRAM before the next compile."""
    for key in _DYNAMIC:
        if key in node:
            raise SchemaInvalid(f"{key} is not taken: only $ref to a JSON pointer inside the schema", path=_dotted([*path, key]))
    if "$id" in node and not is_root:
        raise SchemaInvalid("$id is taken at the schema's root only", path=_dotted([*path, "$id"]))
    patterns = [("pattern", node["pattern"])] if isinstance(node.get("pattern"), str) else []
    if isinstance(node.get("patternProperties"), dict):
        patterns += [("patternProperties", key) for key in node["patternProperties"]]
    for keyword, pattern in patterns:
        if pattern in programs.seen:
            continue
        try:
            programs.total += pattern_compile(pattern).programsize
        except PatternRefused as exc:
            raise SchemaInvalid(str(exc), path=_dotted([*path, keyword])) from None
        programs.seen.add(pattern)
        if programs.total > SCHEMA_MAX_PATTERN_PROGRAM:
            raise SchemaInvalid(
                f"args_schema's patterns compile to more than {SCHEMA_MAX_PATTERN_PROGRAM:,} instructions "
                "for the matcher; use fewer or simpler patterns",
                path=_dotted([*path, keyword]),
            )


def _ref_target(root: dict[str, Any], ref: str, *, path: list[Any]) -> Any:
    where = _dotted([*path, "$ref"])
    if not ref.startswith("#") or (len(ref) > 1 and not ref.startswith("#/")):
        raise SchemaInvalid(
            f"$ref {ref!r} is not a JSON pointer inside this schema (#/$defs/...): "
            "the server fetches nothing and resolves no anchor",
            path=where,
        )
    node: Any = root
    for part in ref[2:].split("/") if len(ref) > 1 else []:
        part = unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise SchemaInvalid(f"$ref {ref!r} points nowhere in this schema", path=where)
    return node


def _expanded_count(root: dict[str, Any], *, children: dict[int, list[Any]], paths: dict[int, list[Any]]) -> None:
    """Subschemas counted as validation meets them, every $ref expanded (post-order, iterative: refs chain deep)."""
    counts: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if not isinstance(node, dict):
            continue
        key = id(node)
        if done:
            on_path.discard(key)
            counts[key] = 1 + sum(counts.get(id(c), 1) for c in children[key])
            if counts[key] > SCHEMA_MAX_NODES:
                raise SchemaInvalid(
                    f"args_schema expands to more than {SCHEMA_MAX_NODES:,} subschemas once its $refs "
                    "are followed: checking an edit against it would cost too much"
                )
            continue
        if key in counts:
            continue
        if key in on_path:
            raise SchemaInvalid(
                "args_schema refers to itself in a loop through $ref: recursive schemas are not taken", path=_dotted(paths[key])
            )
        on_path.add(key)
        stack.append((node, True))
        stack += [(child, False) for child in children[key] if isinstance(child, dict) and id(child) not in counts]


def _at(root: Any, path: list[Any]) -> Any:
    for part in path:
        root = root[part]
    return root


def _dotted(parts: Any) -> str:
    return ".".join(str(p) for p in parts)


def args_check(*, args: dict[str, Any], schema: dict[str, Any] | None, proposed: dict[str, Any]) -> None:
    """Refuse (``ArgsInvalid``) edited ``args`` the tool would not take; ``proposed``: the agent's own.

    A schema ``args_schema_check`` refuses (an item stored before it was checked at submit)
    refuses every edit, saying why: nothing else would check them as the tool will.
    """
    props = schema.get("properties") if schema else None
    props = props if isinstance(props, dict) else {}
    _values_check(args, props=props)
    if not schema:
        return
    try:
        args_schema_check(schema=schema)
        validator = _schema_checked(json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
    except SchemaInvalid as exc:
        where = f" (at {exc.path})" if exc.path else ""
        raise ArgsInvalid(
            f"this ask's args_schema cannot check an edit: {exc}{where}; approve, reject or respond instead"
        ) from None
    if props and not any(schema.get(key, False) is not False for key in _EXTRA_ALLOWED):
        for key in args:
            if key not in props and not (key in proposed and proposed[key] == args[key]):
                raise ArgsInvalid(f"{key!r} is not an argument this action takes; it takes {', '.join(props)}", path=_path([key]))
    _steps.left = CHECK_MAX_STEPS
    try:
        errors = sorted(
            validator(schema, registry=_REGISTRY, format_checker=validator.FORMAT_CHECKER).iter_errors(args),
            key=lambda e: list(e.path),
        )
    except _Overspent:
        raise ArgsInvalid(
            f"these arguments take more than {CHECK_MAX_STEPS:,} steps to check against this ask's "
            "args_schema; send fewer of them"
        ) from None
    if errors:
        raise ArgsInvalid(errors[0].message, path=_path(errors[0].path))


def _values_check(args: dict[str, Any], *, props: dict[str, Any]) -> None:
    for key, value in args.items():
        prop = props.get(key)
        prop = prop if isinstance(prop, dict) else {}
        if isinstance(value, str) and "pattern" in prop:
            continue  # the schema says which characters it takes
        _walk(value, path=[key], controls=_ANY_CONTROL if any(k in prop for k in _SHAPED) else _CONTROL_IN_TEXT)
    for key in args:
        _key_check(key, path=[])


def _walk(value: Any, *, path: list[Any], controls: re.Pattern[str]) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ArgsInvalid("must be a finite number", path=_path(path))
    if isinstance(value, str) and (found := controls.search(value)):
        raise ArgsInvalid(f"must not contain the control character U+{ord(found.group()):04X}", path=_path(path))
    if isinstance(value, dict):
        for key, child in value.items():
            _key_check(key, path=path)
            _walk(child, path=[*path, key], controls=_CONTROL_IN_TEXT)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            _walk(child, path=[*path, index], controls=_CONTROL_IN_TEXT)


def _key_check(key: Any, *, path: list[Any]) -> None:
    if isinstance(key, str) and (found := _ANY_CONTROL.search(key)):
        raise ArgsInvalid(
            f"an argument's name must not contain the control character U+{ord(found.group()):04X}", path=_path(path)
        )


def _path(parts: Any) -> str:
    return "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in parts)


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Any:
    if validator.is_type(instance, "string") and not pattern_search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any, schema: dict[str, Any]) -> Any:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if pattern_search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


class _Overspent(Exception):
    """An edit's check took more than CHECK_MAX_STEPS keyword evaluations."""


_steps = threading.local()


def _counted(keyword: Any) -> Any:
    def counted(validator: Any, value: Any, instance: Any, schema: dict[str, Any]) -> Any:
        _steps.left -= 1
        if _steps.left < 0:
            raise _Overspent
        return keyword(validator, value, instance, schema)

    return counted


def _ecma_regex(instance: object) -> bool:
    return not isinstance(instance, str) or pattern_is_ecma(instance)


@functools.cache
def _validator_class(base: type) -> type:
    keywords = {**base.VALIDATORS, "pattern": _pattern, "patternProperties": _pattern_properties}
    # format "regex" is ECMA-262 too: jsonschema's own compiles the text with Python's re, which
    # recursed past its limit on 1,000 nested groups, a 500 on every edit of the ask.
    formats = jsonschema.FormatChecker(formats=())
    formats.checkers = {**base.FORMAT_CHECKER.checkers, "regex": (_ecma_regex, ())}
    return jsonschema.validators.extend(
        base, {name: _counted(keyword) for name, keyword in keywords.items()}, format_checker=formats
    )
