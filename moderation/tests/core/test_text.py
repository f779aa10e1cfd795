import pytest
from django.template.defaultfilters import truncatechars

from moderation.core.text import TextInvalid, text_check, text_excerpt


def test_a_text_that_fits_is_kept_whole():
    assert text_excerpt(text="", length=5) == ""
    assert text_excerpt(text="abcde", length=5) == "abcde"


def test_a_longer_text_is_cut_with_the_ellipsis_inside_the_length():
    cut = text_excerpt(text="abcdef", length=5)
    assert cut == "abcd…" and len(cut) == 5


def test_it_cuts_where_the_template_filter_did():
    for text in ("x" * 119, "x" * 120, "x" * 121, "A post to review: " * 20):
        assert text_excerpt(text=text, length=120) == truncatechars(text, 120)


def test_a_nul_is_refused_naming_the_field_and_other_text_passes():
    assert text_check(text="ünïcode\n\ttext", field="note") == "ünïcode\n\ttext"
    with pytest.raises(TextInvalid, match=r"NUL \(\\u0000\)") as caught:
        text_check(text="spam\x00", field="reason")
    assert caught.value.field == "reason"
