"""An edit's arguments checked as the tool will take them: JSON Schema's meaning, not Python's.

- ``pattern`` and ``patternProperties`` are ECMA-262 regular expressions, as JSON Schema
  says, run by ``regress``. jsonschema runs them with Python's ``re``, whose ``$`` also
  matches before a trailing newline (``"EUR\\n"`` passed ``^[A-Z]{3}$`` and failed the
  tool) and whose ``\\d`` and ``\\w`` take any script's digits and letters.
- ``format`` is checked, with jsonschema's ``FormatChecker`` for the schema's draft.
- An argument the schema does not name is refused unless the schema allows extra ones
  (``additionalProperties``, ``patternProperties``, ``unevaluatedProperties``) or the
  agent proposed it itself, unchanged.
- No number may be NaN or infinite, and no string or key may hold a control character,
  except tab, line feed and carriage return in free text: a string whose own schema
  gives it no ``pattern``, ``format``, ``enum`` or ``const``. A top-level argument whose
  schema has a ``pattern`` holds whatever that pattern allows.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

import jsonschema
import regress
from jsonschema.exceptions import ValidationError

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


def args_check(*, args: dict[str, Any], schema: dict[str, Any] | None, proposed: dict[str, Any]) -> None:
    """Refuse (``ArgsInvalid``) edited ``args`` the tool would not take; ``proposed``: the agent's own."""
    props = schema.get("properties") if schema else None
    props = props if isinstance(props, dict) else {}
    _values_check(args, props=props)
    if not schema:
        return
    if props and not any(schema.get(key, False) is not False for key in _EXTRA_ALLOWED):
        for key in args:
            if key not in props and not (key in proposed and proposed[key] == args[key]):
                raise ArgsInvalid(f"{key!r} is not an argument this action takes; it takes {', '.join(props)}",
                                  path=_path([key]))
    try:
        validator = _validator_class(jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator))
        errors = sorted(validator(schema, format_checker=validator.FORMAT_CHECKER).iter_errors(args),
                        key=lambda e: list(e.path))
    except regress.RegressError as exc:
        raise ArgsInvalid(f"the ask's args_schema has a pattern that is not an ECMA-262 regular expression ({exc}); "
                          "the arguments cannot be checked, so no edit is taken") from None
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
        raise ArgsInvalid(f"an argument's name must not contain the control character U+{ord(found.group()):04X}",
                          path=_path(path))


def _path(parts: Any) -> str:
    return "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in parts)


@functools.cache
def _regex(pattern: str) -> regress.Regex:
    return regress.Regex(pattern, "u")  # JSON Schema 2020-12 asks for Unicode patterns


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Any:
    if validator.is_type(instance, "string") and _regex(pattern).find(instance) is None:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any, schema: dict[str, Any]) -> Any:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _regex(pattern).find(key) is not None:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


@functools.cache
def _validator_class(base: type) -> type:
    return jsonschema.validators.extend(base, {"pattern": _pattern, "patternProperties": _pattern_properties})
