import json

import pytest

from moderation.core.jsonparse import json_parse


def test_json_reads_as_usual():
    assert json_parse('{"a": [1, 2.5, -3e2, "x", null, true]}') == {"a": [1, 2.5, -300.0, "x", None, True]}
    assert json_parse(b'{"amount": 80}') == {"amount": 80}


@pytest.mark.parametrize("text", ['{"amount": NaN}', "[Infinity]", "-Infinity", '{"amount": 1e999}', "[-1E400]"])
def test_a_non_finite_number_is_malformed_json(text):
    with pytest.raises(json.JSONDecodeError, match="is not a finite number"):
        json_parse(text)


def test_the_error_says_where_the_number_is():
    with pytest.raises(json.JSONDecodeError) as caught:
        json_parse(b'{"a": 1, "amount": NaN}')
    assert (caught.value.msg, caught.value.colno) == ("NaN is not a finite number", 20)


@pytest.mark.parametrize(
    ("text", "column"),
    [
        (r'{"a": "\ud800"}', 8),  # a high half alone
        (r'["x\uDC00"]', 4),  # a low half alone
        (r'["\ud83d\ude00 then \ud800"]', 21),  # a pair, then a half
        (r'["\ud800\\udc00"]', 3),  # a half, then an escaped backslash: no pair
    ],
)
def test_half_a_surrogate_pair_is_malformed_json_saying_where(text, column):
    """json.loads kept it as a string no encoder takes: an ask's args_schema or metadata holding one was a 500."""
    for given in (text, text.encode()):
        with pytest.raises(json.JSONDecodeError, match="half of a UTF-16 surrogate pair") as caught:
            json_parse(given)
        assert caught.value.colno == column


def test_a_whole_surrogate_pair_and_an_escaped_backslash_read_as_text():
    assert json_parse(rb'["\ud83d\ude00", "\\ud800"]') == ["\U0001f600", "\\ud800"]
