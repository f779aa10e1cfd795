"""Reading item files: every line is judged on its own, a bad file as a whole is refused."""

import io

import pytest

from moderation.review.item_import import ItemFileError, ItemRow, item_format_guess, item_rows_read


def _rows(text: str, fmt: str) -> list[ItemRow]:
    return list(item_rows_read(stream=io.StringIO(text, newline=""), fmt=fmt))


def test_json_lines_give_each_line_its_fields_or_its_error():
    text = "\n".join(
        [
            '{"title": "One", "body": "First."}',
            "",
            "{not json",
            '["a list"]',
            '{"title": "Two", "body": "Second.", "source": "feed", "tilte": "typo"}',
            '{"title": "Three"}',
            '{"title": "Four", "body": 4}',
            '{"title": "Five", "body": "Fifth.", "source": "feed"}',
            '{"title": "Six", "body": "Sixth.", "policy": {"approvals": NaN}}',
        ]
    )
    assert _rows(text, "jsonl") == [
        ItemRow(1, {"title": "One", "body": "First."}),
        ItemRow(3, {}, "not valid JSON: Expecting property name enclosed in double quotes (column 2)"),
        ItemRow(4, {}, "must be a JSON object with title, body, not list"),
        ItemRow(5, {}, "unknown field tilte; fields are title, body, source, team, policy, requested_by"),
        ItemRow(6, {}, "missing body"),
        ItemRow(7, {}, "body must be text"),
        ItemRow(8, {"title": "Five", "body": "Fifth.", "source": "feed"}),
        ItemRow(9, {}, "not valid JSON: NaN is not a finite number (column 60)"),
    ]


def test_csv_rows_may_span_lines_and_bodies_may_exceed_csvs_own_field_limit():
    long_body = "y" * 200_000
    text = f'title,body\r\nOne,"two\r\nlines"\r\nToo,many,fields\r\nLong,{long_body}\r\n'
    assert _rows(text, "csv") == [
        ItemRow(3, {"title": "One", "body": "two\r\nlines"}),
        ItemRow(4, {}, "has 3 fields; the header names 2"),
        ItemRow(5, {"title": "Long", "body": long_body}),
    ]


def test_policy_columns_json_objects_or_their_json_text_in_csv_and_blank_cells_unset():
    jsonl = "\n".join(
        [
            '{"title": "A", "body": "a", "team": "payments", "policy": {"approvals": 2}, "requested_by": "carol"}',
            '{"title": "B", "body": "b", "policy": "{\\"veto\\": true}"}',
            '{"title": "C", "body": "c", "policy": [2]}',
            '{"title": "D", "body": "d", "team": 7}',
        ]
    )
    assert _rows(jsonl, "jsonl") == [
        ItemRow(1, {"title": "A", "body": "a", "team": "payments", "policy": {"approvals": 2}, "requested_by": "carol"}),
        ItemRow(2, {"title": "B", "body": "b", "policy": {"veto": True}}),
        ItemRow(3, {}, "policy must be a JSON object, not list"),
        ItemRow(4, {}, "team must be text"),
    ]
    csv_text = (
        'title,body,team,policy,requested_by\r\nA,a,payments,"{""approvals"": 2}",carol\r\nB,b,,,\r\nC,c,payments,{approvals,\r\n'
    )
    assert _rows(csv_text, "csv") == [
        ItemRow(2, {"title": "A", "body": "a", "team": "payments", "policy": {"approvals": 2}, "requested_by": "carol"}),
        ItemRow(3, {"title": "B", "body": "b"}),
        ItemRow(4, {}, "policy is not valid JSON: Expecting property name enclosed in double quotes (column 2)"),
    ]


def test_csv_without_title_and_body_columns_is_refused_as_a_whole():
    with pytest.raises(ItemFileError, match="missing: body, unknown: text"):
        _rows("title,text\r\nOne,two\r\n", "csv")


def test_format_follows_the_file_name_unless_named():
    assert item_format_guess(name="items.CSV") == "csv"
    assert item_format_guess(name="items.jsonl") == item_format_guess(name="-") == "jsonl"
    with pytest.raises(ItemFileError, match="format must be one of jsonl, csv"):
        _rows("", "xml")
