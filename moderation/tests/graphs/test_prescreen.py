import re
import time

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from moderation.graphs.prescreen import text_prescreen


def test_plain_text_has_no_flags_and_no_risk():
    screen = text_prescreen(title="Lentil soup", body="Onion, carrot and lentils. Simmer for 25 minutes.")
    assert screen.flags == []
    assert screen.risk == 0


def test_spam_is_flagged_for_links_shouting_and_watch_words():
    screen = text_prescreen(title="BUY NOW!!!", body="CLICK HERE FOR FREE MONEY http://x.test/a http://x.test/b")
    assert "2 links" in screen.flags
    assert "shouting" in screen.flags
    assert "excessive punctuation" in screen.flags
    assert any(f.startswith("watch words: buy now, click here, free money") for f in screen.flags)
    assert screen.risk >= 50


def test_risk_is_capped_and_deterministic():
    body = " ".join(f"https://spam.test/{i} crypto scam winner idiot" for i in range(20))
    first = text_prescreen(title="x", body=body)
    assert first.risk == 100
    assert first == text_prescreen(title="x", body=body)


def test_short_uppercase_text_is_not_shouting():
    assert "shouting" not in text_prescreen(title="OK", body="FYI").flags


def test_unicode_addresses_and_links_are_still_flagged():
    screen = text_prescreen(title="Kontakt", body="schreib an jürgen.müller@straße.de oder www.beispiel.de")
    assert "contact details" in screen.flags
    assert "1 link" in screen.flags


@pytest.mark.parametrize(
    "body",
    ["mail me at ...@x.com", "at x@y.", "x@y..", "a@b", "@example.com", "x@-.com", "joe@mail.c", "x+@y.z", "Ω@ω.ω"],
)
def test_addresses_match_as_the_old_pattern_did(body):
    assert ("contact details" in text_prescreen(title="t", body=body).flags) == bool(_OLD_EMAIL_RE.search(f"t\n{body}"))


# The patterns before they were made linear: an oracle for what gets flagged, on texts
# short enough that its backtracking costs nothing.
_OLD_LINK_RE = re.compile(r"\b(?:https?://|www\.)\S+", re.IGNORECASE)
_OLD_EMAIL_RE = re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.]+\b")
_pieces = st.sampled_from(
    [
        "a",
        "Z",
        "é",
        "Ω",
        "ω",
        "中",
        "_",
        "1",
        "²",
        ".",
        "+",
        "-",
        "@",
        " ",
        "\n",
        "!",
        "/",
        ":",
        "http://",
        "www.",
        "HTTPS://",
        "com",
        "BUY NOW",
        "scam",
    ]
)


@hsettings(max_examples=400, deadline=None)
@given(st.lists(_pieces, max_size=40).map("".join), st.lists(_pieces, max_size=8).map("".join))
def test_flags_and_risk_are_those_of_the_old_patterns(body, title):
    text = f"{title}\n{body}"
    screen = text_prescreen(title=title, body=body)
    links = len(_OLD_LINK_RE.findall(text))
    assert (f"{links} link{'s' if links != 1 else ''}" in screen.flags) == bool(links)
    letters = [c for c in _OLD_LINK_RE.sub("", text) if c.isalpha()]
    shouting = len(letters) >= 20 and sum(c.isupper() for c in letters) / len(letters) > 0.6
    assert ("shouting" in screen.flags) == shouting
    assert ("contact details" in screen.flags) == bool(_OLD_EMAIL_RE.search(text))


def _fill(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


# Shapes that make a backtracking matcher rescan: runs a candidate can start inside of,
# separators a greedy run gives back one by one, and text no fast path covers.
ADVERSARIAL_SHAPES = {
    "dotted run (a.a.a.)": lambda n: _fill("a.", n),
    "dotted run, then @": lambda n: _fill("a.", n - 1) + "@",
    "hyphen run after @ (a@a-a-)": lambda n: "a@" + _fill("a-", n - 2),
    "many @ (a@a@a@)": lambda n: _fill("a@", n),
    "domain then dots (x@y....)": lambda n: "x@y" + "." * (n - 3),
    "plus and @ (a+@x-)": lambda n: _fill("a+@x-", n),
    "scheme run (http://http://)": lambda n: _fill("http://", n),
    "www run": lambda n: _fill("www.", n),
    "one letter run": lambda n: "a" * n,
    "one punctuation run": lambda n: "!" * n,
    "shouting run": lambda n: "A" * n,
    "whitespace run": lambda n: " " * n,
    "many URLs": lambda n: _fill("see https://example.test/p?q=1 and www.x.test/y ", n),
    "many addresses": lambda n: _fill("write to joe.bloggs+x@mail.example.org now ", n),
    "mixed scripts": lambda n: _fill("Grüße ПРИВЕТ Γειά שלום مرحبا 你好世界 नमस्ते 😀👍🏽 ÉCOLE e\u0301 ǅ Ⅻ ⓐ ", n),
}


# Each 16 times the one before: linear time grows 16-fold (9 to 19 measured), quadratic 256-fold.
SIZES = (4_000, 64_000, 1_000_000)
# Room over linear growth for noise; and a floor under the smallest times, which are fractions of a millisecond.
GROWTH_SLACK, FLOOR_S = 3, 0.001


@pytest.mark.parametrize("shape", ADVERSARIAL_SHAPES)
def test_adversarial_bodies_are_screened_in_linear_time(shape):
    # CPU time of this thread, best of three, each size judged against the one before it in
    # the same run, so a busy or slower machine slows both alike. Small sizes first: the old
    # patterns took 8 s on the dotted run at 64 KB, so a regression fails there in seconds
    # instead of hanging on the megabyte.
    before = None
    for size in SIZES:
        body = ADVERSARIAL_SHAPES[shape](size)
        took = min(_cpu_seconds(lambda: text_prescreen(title="t", body=body)) for _ in range(3))  # noqa: B023 - called at once
        if before is not None:
            smaller, smaller_took = before
            limit = GROWTH_SLACK * size / smaller * max(smaller_took, FLOOR_S)
            assert took < limit, (
                f"{shape}: {size:,} characters took {took * 1000:.1f} ms, "
                f"{smaller:,} took {smaller_took * 1000:.2f} ms: more than linear"
            )
        before = size, took


def _cpu_seconds(run) -> float:
    start = time.thread_time()
    run()
    return time.thread_time() - start
