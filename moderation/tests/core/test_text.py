from django.template.defaultfilters import truncatechars

from moderation.core.text import text_excerpt


def test_a_text_that_fits_is_kept_whole():
    assert text_excerpt(text="", length=5) == ""
    assert text_excerpt(text="abcde", length=5) == "abcde"


def test_a_longer_text_is_cut_with_the_ellipsis_inside_the_length():
    cut = text_excerpt(text="abcdef", length=5)
    assert cut == "abcd…" and len(cut) == 5


def test_it_cuts_where_the_template_filter_did():
    for text in ("x" * 119, "x" * 120, "x" * 121, "A post to review: " * 20):
        assert text_excerpt(text=text, length=120) == truncatechars(text, 120)
