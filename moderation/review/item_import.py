"""Reading many items from a JSON lines or CSV file, each line judged on its own.

Besides title, body and source a line may name its approval policy (README "Approval
policies"): ``team`` (a slug), ``policy`` (a JSON object; in CSV its JSON text) and
``requested_by`` (a username). A blank CSV cell of these three leaves it unset.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from moderation.core.jsonparse import json_parse

ITEM_FIELDS = ("title", "body", "source", "team", "policy", "requested_by")
REQUIRED_FIELDS = ("title", "body")
# Optional columns a CSV line may leave blank: unset, not an empty team or user.
BLANK_IS_UNSET = ("team", "policy", "requested_by")
FORMATS = ("jsonl", "csv")


@dataclass(frozen=True)
class ItemRow:
    """One line of the file: the item's fields, or why the line cannot be an item."""

    line: int
    fields: dict[str, Any]
    error: str = ""


class ItemFileError(ValueError):
    """The file as a whole cannot be read (e.g. a CSV without title and body columns)."""


def item_format_guess(*, name: str) -> str:
    return "csv" if name.lower().endswith(".csv") else "jsonl"


def item_rows_read(*, stream: TextIO, fmt: str) -> Iterator[ItemRow]:
    """Yield every item line of ``stream``; a bad line is yielded with its error, not raised."""
    if fmt == "jsonl":
        yield from _jsonl_rows(stream)
    elif fmt == "csv":
        yield from _csv_rows(stream)
    else:
        raise ItemFileError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")


def _jsonl_rows(stream: TextIO) -> Iterator[ItemRow]:
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            value = json_parse(line)
        except json.JSONDecodeError as exc:
            yield ItemRow(number, {}, f"not valid JSON: {exc.msg} (column {exc.colno})")
            continue
        if not isinstance(value, dict):
            yield ItemRow(number, {}, f"must be a JSON object with {', '.join(REQUIRED_FIELDS)}, not {type(value).__name__}")
            continue
        yield _row_check(number, value)


def _csv_rows(stream: TextIO) -> Iterator[ItemRow]:
    # Bodies may be longer than csv's default field limit (128 KiB); item_create's own
    # limit is the one that refuses them, with a message naming it.
    csv.field_size_limit(sys.maxsize)
    reader = csv.DictReader(stream)
    header = reader.fieldnames or []
    missing = [f for f in REQUIRED_FIELDS if f not in header]
    unknown = [f for f in header if f not in ITEM_FIELDS]
    if missing or unknown:
        raise ItemFileError(
            f"the CSV header must name {', '.join(REQUIRED_FIELDS)} (and optionally "
            f"{', '.join(f for f in ITEM_FIELDS if f not in REQUIRED_FIELDS)}); "
            f"missing: {', '.join(missing) or 'none'}, unknown: {', '.join(unknown) or 'none'}"
        )
    for record in reader:
        if None in record:
            yield ItemRow(reader.line_num, {}, f"has {len(header) + len(record[None])} fields; the header names {len(header)}")
            continue
        yield _row_check(
            reader.line_num, {k: v for k, v in record.items() if v is not None and not (k in BLANK_IS_UNSET and not v.strip())}
        )


def _row_check(number: int, value: dict[str, Any]) -> ItemRow:
    unknown = sorted(str(k) for k in value if k not in ITEM_FIELDS)
    if unknown:
        return ItemRow(number, {}, f"unknown field {', '.join(unknown)}; fields are {', '.join(ITEM_FIELDS)}")
    missing = [f for f in REQUIRED_FIELDS if f not in value]
    if missing:
        return ItemRow(number, {}, f"missing {', '.join(missing)}")
    not_text = [k for k, v in value.items() if k != "policy" and not isinstance(v, str)]
    if not_text:
        return ItemRow(number, {}, f"{', '.join(not_text)} must be text")
    fields = dict(value)
    if isinstance(fields.get("policy"), str):  # a CSV cell
        try:
            fields["policy"] = json_parse(fields["policy"])
        except json.JSONDecodeError as exc:
            return ItemRow(number, {}, f"policy is not valid JSON: {exc.msg} (column {exc.colno})")
    if "policy" in fields and not isinstance(fields["policy"], dict):
        return ItemRow(number, {}, f"policy must be a JSON object, not {type(fields['policy']).__name__}")
    return ItemRow(number, fields)
