"""A deterministic pre-screen: cheap signals a moderator should see before deciding.

No network and no model, so the same text always gets the same flags and score.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

LINK_RE = re.compile(r"\b(?:https?://|www\.)\S+", re.IGNORECASE)
EMAIL_RE = re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.]+\b")
WATCH_WORDS = (
    "buy now", "click here", "free money", "guaranteed", "limited offer",
    "crypto", "winner", "idiot", "hate", "scam",
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

    links = len(LINK_RE.findall(text))
    if links:
        flags.append(f"{links} link{'s' if links != 1 else ''}")
        risk += min(links, 5) * 10

    # Links are lower-case noise; shouting is judged on the words around them.
    letters = [c for c in LINK_RE.sub("", text) if c.isalpha()]
    if len(letters) >= 20:
        upper_ratio = sum(c.isupper() for c in letters) / len(letters)
        if upper_ratio > 0.6:
            flags.append("shouting")
            risk += 20

    if "!!!" in text:
        flags.append("excessive punctuation")
        risk += 5

    words = [w for w in WATCH_WORDS if w in lowered]
    if words:
        flags.append("watch words: " + ", ".join(words))
        risk += 15 * len(words)

    if EMAIL_RE.search(text):
        flags.append("contact details")
        risk += 10

    return Prescreen(flags=flags, risk=min(risk, 100))
