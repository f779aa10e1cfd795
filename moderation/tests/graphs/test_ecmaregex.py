"""ECMA-262 patterns matched by RE2 (moderation.graphs.ecmaregex): regress's meaning, in linear time."""

from __future__ import annotations

import time

import pytest
import regress
from hypothesis import given, settings
from hypothesis import strategies as st

from moderation.graphs.ecmaregex import PatternRefused, pattern_compile, pattern_search

PATTERNS = [
    r"^[A-Z]{3}$",
    r"^(a+)+$",
    r"\d+",
    r"^\w+@\w+\.\w{2,}$",
    r"[a-c-e]",
    r"[-a]",
    r"[a-]",
    r"[^]",
    r"[]",
    r"^.$",
    r"\s",
    r"\S+",
    r"[\s\S]*",
    r"[^\s]",
    r"[^\S\d]",
    r"\bfoo\b",
    r"\Bo",
    r"\u{1F600}",
    r"\uD83D\uDE00",
    r"(?<n>ab)+",
    r"a|b|",
    r"^\p{Lu}",
    r"\P{L}",
    r"\p{Script=Greek}",
    r"[\p{L}\d]+",
    r"a{2,}?",
    r"a{1,3}b",
    r"\/\.\*",
    r"[\-x]",
    r"\cJ",
    r"\x41",
    r"\0",
    r"[\b]",
    r"^$",
    r"é+",
    r"[a-z-0]",
    r"[\w-]",
    r"(?:ab|c)*d$",
    r"[\u0041-\u0043]",
    r"^[^\n]*$",
    r"\t|\v|\f|\r",
    r"a{1000}|b{2,3}c{0,}",
    r"[.]",
    r"\^\$\(\)\[\]\{\}\|\?\+",
]
ALPHABET = "aAbBcdeEfoxyzZ09_-./!@ \t\n\r\x0b\x0c\x08\u00a0\u2028\u2029\ufeffßéΑβ😀^$()[]{}|?+*\\"


def _ecma(pattern: str, text: str) -> bool:
    return regress.Regex(pattern, "u").find(text) is not None


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=60, deadline=None)
@given(text=st.text(alphabet=ALPHABET, max_size=8))
def test_every_accepted_pattern_matches_exactly_what_ecma_262_matches(pattern, text):
    assert pattern_search(pattern, text) == _ecma(pattern, text)


@pytest.mark.parametrize(
    ("pattern", "needle"),
    [
        (r"(?=a)", "lookahead and lookbehind"),
        (r"(?<!a)b", "lookahead and lookbehind"),
        (r"(a)\1", "backreference"),
        (r"(?<n>a)\k<n>", "backreference"),
        (r"(?i:a)", "group's flags"),
        (r"a{1001}", "a repeat over 1,000 ({1001})"),
        (r"a{4294967296}", "a repeat over 1,000"),  # RE2 would read a count it cannot parse as literal text
        (r"a{2,1001}", "a repeat over 1,000"),
        (r"(?:a{999}){999}", "cannot be checked in linear time"),  # RE2's own bound on the program's size
        (r"\p{sc=Grek}", "cannot be checked in linear time"),
        (r"\p{L}{400}x", "cannot be checked in linear time"),  # over 1 MiB of program: 300 ms to compile at RE2's 8 MiB
        (r"\p{Any}", "is not one this server matches"),
        (r"(?P<n>x)", "not an ECMA-262 regular expression"),
        (r"[", "not an ECMA-262 regular expression"),
        (r"\ud800", "lone surrogate"),
    ],
)
def test_what_cannot_be_matched_in_linear_time_or_is_not_ecma_is_refused_saying_why(pattern, needle):
    with pytest.raises(PatternRefused) as refused:
        pattern_compile(pattern)
    assert needle in str(refused.value)


def test_ecma_anchors_and_dot_not_pythons():
    assert not pattern_search(r"^[A-Z]{3}$", "EUR\n")  # Python's $ takes a trailing newline
    assert not pattern_search(r"^\d$", "٣")  # Python's \d takes any script's digits
    assert not pattern_search(r"^.$", "\u2028") and pattern_search(r"^.$", "😀")


def _best(call) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best


def test_a_catastrophic_pattern_costs_what_a_plain_one_costs_on_the_same_text():
    # regress needs seconds for 26 a's here, each one more doubling it; RE2 reads 100,000 as a plain pattern does.
    text = "a" * 100_000 + "!"
    assert not pattern_search(r"^(a+)+$", text) and not pattern_search(r"^a+$", text)
    assert _best(lambda: pattern_search(r"^(a+)+$", text)) < 10 * _best(lambda: pattern_search(r"^a+$", text)) + 0.005
