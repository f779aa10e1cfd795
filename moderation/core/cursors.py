"""Page cursors: the one encoding of where a keyset page starts, for the queue, the decided list and the API.

A cursor is a JSON key signed with the server's key (``django.core.signing``) and a salt per list, so a
page only ever starts at a key this server handed out for that list; each list checks the key's shape.
"""

from __future__ import annotations

from typing import Any

from django.core import signing


class CursorInvalid(ValueError):
    """A cursor this server did not give out for this list (or one damaged on the way)."""


def cursor_make(*, key: Any, salt: str) -> str:
    """The cursor for ``key`` (JSON: numbers, strings, lists, dicts) in the list named by ``salt``."""
    return signing.dumps(key, salt=salt)


def cursor_read(*, token: str, salt: str) -> Any:
    """The key a cursor of the list ``salt`` holds; ``CursorInvalid`` if its signature fails."""
    try:
        return signing.loads(token, salt=salt)
    except signing.BadSignature:
        raise CursorInvalid("not a cursor given out for this list") from None
