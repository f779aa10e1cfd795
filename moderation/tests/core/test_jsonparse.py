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
