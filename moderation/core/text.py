"""Cutting a person's text to a length for display."""

from __future__ import annotations


def text_excerpt(*, text: str, length: int) -> str:
    """``text`` if it fits in ``length`` characters, else its first ``length - 1`` and "…".

    The ellipsis counts within the length, as Django's ``truncatechars`` does. That filter
    also normalizes the text to count combining marks, and was a sixth of the queue rows'
    render time (1.2 of 7.7 ms a page of 25); a cut by code points is what the rows need.
    """
    return text if len(text) <= length else text[: length - 1] + "…"
