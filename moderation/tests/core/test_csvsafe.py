"""Every export's cells: text a spreadsheet would run as a formula is written as text."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from moderation.core.csvsafe import CsvSafeWriter, csv_cell


@pytest.mark.parametrize("text", ["=cmd|' /C calc'!A0", "-2+3", "+1", "@SUM(A1)", "\t=1", "\r=1", '=HYPERLINK("x")'])
def test_text_that_starts_a_formula_is_written_as_text(text):
    assert csv_cell(text) == "'" + text


@pytest.mark.parametrize(
    "value, cell",
    [
        (None, ""),
        ("plain", "plain"),
        ("a=b", "a=b"),
        (-0.125, -0.125),
        (-3, -3),
        (Decimal("-1.5"), Decimal("-1.5")),
        (datetime(2026, 12, 4, 22, 0, tzinfo=UTC), "2026-12-04T22:00:00+00:00"),
        (True, "True"),
    ],
)
def test_other_values_keep_their_meaning(value, cell):
    assert csv_cell(value) == cell


def test_the_writer_runs_every_cell_through_the_rule():
    out = io.StringIO()
    CsvSafeWriter(out).writerows([["name", "n"], ["-2+3", -2], []])
    assert list(csv.reader(io.StringIO(out.getvalue()))) == [["name", "n"], ["'-2+3", "-2"], []]
