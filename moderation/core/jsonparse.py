"""Reading JSON that comes from outside (a request, a form field, a socket frame, a file).

Python's parser takes ``NaN``, ``Infinity`` and ``-Infinity``, and reads ``1e999`` as
infinity; none of them is JSON (RFC 8259), no tool's schema can judge them (every
comparison with NaN is false, so ``NaN`` passed ``maximum``), and PostgreSQL's jsonb
cannot store them. It also reads ``"\\ud800"``, half a UTF-16 surrogate pair, into a string
no encoder takes: an ask's ``args_schema`` or ``metadata`` holding one was a 500 at submit.
Every JSON the product parses is read with ``json_parse``.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# A \u escape of half a UTF-16 surrogate pair without its other half: json.loads keeps it as a
# string no encoder takes (UTF-8, PostgreSQL). Where it is; _lone_surrogate says whether it is one.
_LONE_SURROGATE_ESCAPE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


class _NotFinite(ValueError):
    def __init__(self, token: str) -> None:
        super().__init__(f"{token[:20]} is not a finite number")
        self.token = token


def json_parse(text: str | bytes) -> Any:
    """``json.loads``; a non-finite number or a lone surrogate is a ``json.JSONDecodeError`` like any other malformed JSON."""
    try:
        value = json.loads(text, parse_constant=_refuse, parse_float=_finite)
    except _NotFinite as exc:
        doc = _doc(text)
        raise json.JSONDecodeError(str(exc), doc, max(doc.find(exc.token), 0)) from None
    doc = _doc(text)
    if (escape := _LONE_SURROGATE_ESCAPE.search(doc)) and _lone_surrogate(value):
        raise json.JSONDecodeError("a string holds half of a UTF-16 surrogate pair, which is not text", doc, escape.start())
    return value


def _doc(text: str | bytes) -> str:
    return text.decode(errors="replace") if isinstance(text, bytes) else text


def _lone_surrogate(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return True
    return False


def _refuse(token: str) -> Any:
    raise _NotFinite(token)


def _finite(token: str) -> float:
    number = float(token)
    if not math.isfinite(number):
        raise _NotFinite(token)
    return number
