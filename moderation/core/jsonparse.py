"""Reading JSON that comes from outside (a request, a form field, a socket frame, a file).

Python's parser takes ``NaN``, ``Infinity`` and ``-Infinity``, and reads ``1e999`` as
infinity; none of them is JSON (RFC 8259), no tool's schema can judge them (every
comparison with NaN is false, so ``NaN`` passed ``maximum``), and PostgreSQL's jsonb
cannot store them. Every JSON the product parses is read with ``json_parse``.
"""

from __future__ import annotations

import json
import math
from typing import Any


class _NotFinite(ValueError):
    def __init__(self, token: str) -> None:
        super().__init__(f"{token[:20]} is not a finite number")
        self.token = token


def json_parse(text: str | bytes) -> Any:
    """``json.loads``; a non-finite number is a ``json.JSONDecodeError`` like any other malformed JSON."""
    try:
        return json.loads(text, parse_constant=_refuse, parse_float=_finite)
    except _NotFinite as exc:
        doc = text.decode(errors="replace") if isinstance(text, bytes) else text
        raise json.JSONDecodeError(str(exc), doc, max(doc.find(exc.token), 0)) from None


def _refuse(token: str) -> Any:
    raise _NotFinite(token)


def _finite(token: str) -> float:
    number = float(token)
    if not math.isfinite(number):
        raise _NotFinite(token)
    return number
