"""A deterministic pre-screen: cheap signals a moderator should see before deciding.

No network and no model, so the same text always gets the same flags and score.

It runs on whatever a person submits, so every step is linear in the text's length.
The patterns cannot backtrack: each candidate starts only where a run of its characters
starts (a lookbehind), and every run is taken possessively (``*+``, ``++``, Python 3.11+),
so no character is rescanned from more than a fixed number of starting points. The old
``\\b[\\w.+-]+@…`` restarted inside every run, which made ``a.a.a.…`` quadratic (8 s at
64 KB). We rewrote the patterns rather than switch to google-re2: RE2's ``\\w`` and
``\\b`` are ASCII-only, which would change which non-English addresses are flagged, and
the standard library keeps the pre-screen free of a compiled dependency.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

LINK_RE = re.compile(r"\b(?:https?://|www\.)\S+", re.IGNORECASE)
# The same addresses as ``\b[\w.+-]+@[\w-]+\.[\w.]+\b``: a local part that holds a word
# character, a domain label, a dot, and a tail that holds a word character.
EMAIL_RE = re.compile(r"(?<![\w.+-])[.+-]*+\w[\w.+-]*+@[\w-]++\.\.*+\w")
WATCH_WORDS = (
    "buy now",
    "click here",
    "free money",
    "guaranteed",
    "limited offer",
    "crypto",
    "winner",
    "idiot",
    "hate",
    "scam",
)


@dataclass(frozen=True)
class Prescreen:
    flags: list[str] = field(default_factory=list)
    risk: int = 0


def text_prescreen(*, title: str, body: str) -> Prescreen:
    text = f"{title}\n{body}"
    lowered = text.lower()
    flags: list[str] = []
    risk = 0

    # A substring test is a fast scan; the pattern only runs where a link can start.
    links = LINK_RE.findall(text) if "http" in lowered or "www." in lowered else []
    if links:
        flags.append(f"{len(links)} link{'s' if len(links) != 1 else ''}")
        risk += min(len(links), 5) * 10

    # Links are lower-case noise; shouting is judged on the words around them.
    letters, upper = _letters_count(text)
    link_letters, link_upper = _letters_count("".join(links))
    letters -= link_letters
    upper -= link_upper
    if letters >= 20 and upper / letters > 0.6:
        flags.append("shouting")
        risk += 20

    if "!!!" in text:
        flags.append("excessive punctuation")
        risk += 5

    words = [w for w in WATCH_WORDS if w in lowered]
    if words:
        flags.append("watch words: " + ", ".join(words))
        risk += 15 * len(words)

    if "@" in text and EMAIL_RE.search(text):
        flags.append("contact details")
        risk += 10

    return Prescreen(flags=flags, risk=min(risk, 100))


# Latin-1 text (most Western text) is counted with two byte-table deletions.
_LATIN1_NON_LETTERS = bytes(b for b in range(256) if not chr(b).isalpha())
_LATIN1_NON_UPPER = bytes(b for b in range(256) if not (chr(b).isalpha() and chr(b).isupper()))


def _letters_count(text: str) -> tuple[int, int]:
    """How many letters, and how many of them upper-case, in C-level passes only."""
    try:
        raw = text.encode("latin-1")
    except UnicodeEncodeError:
        letters = "".join(filter(str.isalpha, text))
        return len(letters), sum(map(str.isupper, letters))
    return len(raw.translate(None, _LATIN1_NON_LETTERS)), len(raw.translate(None, _LATIN1_NON_UPPER))
