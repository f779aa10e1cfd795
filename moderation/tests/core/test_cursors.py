"""moderation.core.cursors: a cursor reads back only in the list it was made for, and only as made."""

import pytest

from moderation.core.cursors import CursorInvalid, cursor_make, cursor_read


def test_a_cursor_reads_back_its_key():
    key = {"k": ["2026-01-01T00:00:00+00:00", 7], "f": True}
    assert cursor_read(token=cursor_make(key=key, salt="a list"), salt="a list") == key


# Tokens are made in the test, not at collection: a signed token carries the time it was made, and
# xdist's workers must collect the same test ids.
@pytest.mark.parametrize(
    "make",
    [
        lambda: cursor_make(key=[1], salt="another list"),  # given out, but for another list
        lambda: cursor_make(key=[1], salt="a list")[:-2] + "xx",  # damaged
        lambda: "!!!",
        lambda: "",
    ],
    ids=["another-list", "damaged", "not-base64", "empty"],
)
def test_a_cursor_not_given_out_for_the_list_is_refused(make):
    with pytest.raises(CursorInvalid):
        cursor_read(token=make(), salt="a list")
