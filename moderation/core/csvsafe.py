"""CSV a spreadsheet opens safely: every export writes through ``CsvSafeWriter``.

A spreadsheet runs a cell that starts with ``=``, ``+``, ``-`` or ``@`` (or a tab or carriage
return before one) as a formula: ``=cmd|' /C calc'!A0`` can start a program, ``=HYPERLINK(...)``
send data away (CSV injection). Exports hold text people chose (titles, notes, usernames), so
such text is written with a leading ``'``, which spreadsheets show as text. Numbers are written
as they are: a negative number is a number, never a formula.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from datetime import date
from decimal import Decimal
from typing import Any, Protocol

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


class _Writable(Protocol):
    def write(self, text: str, /) -> Any: ...


def csv_cell(value: Any) -> str | int | float | Decimal:
    """What a value becomes in an export: None is empty, a date or time ISO 8601, text defused."""
    if value is None:
        return ""
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        return value
    text = value.isoformat() if isinstance(value, date) else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


class CsvSafeWriter:
    """``csv.writer`` whose every cell goes through ``csv_cell``."""

    def __init__(self, stream: _Writable) -> None:
        self._writer = csv.writer(stream)

    def writerow(self, row: Iterable[Any]) -> Any:
        return self._writer.writerow([csv_cell(value) for value in row])

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)
