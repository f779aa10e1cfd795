"""The live dashboard's rules, kept out of the consumer so the consumer only translates.

Who may hold a socket, whether its login is still valid, which groups it joins, what
a client may send, and the state snapshot a page re-reads on every (re)connect and
heartbeat (so an event missed while disconnected never leaves a stale screen).
"""

from __future__ import annotations

import json
from importlib import import_module
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.contrib import auth
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from moderation import events
from moderation.models import QueueItem
from moderation.outcomes import seconds_since
from moderation.permissions import user_can_decide
from moderation.presence import PRESENCE_HEARTBEAT_SECONDS, presence_by_item, presence_viewers
from moderation.selectors import item_get, queue_counts

# Close codes a client can act on: it stops reconnecting after these.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404

FRAME_TYPES = ("heartbeat",)


class FrameError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def live_socket_admit(*, user: AbstractBaseUser | AnonymousUser, item_public_id: str | None) -> int | None:
    """None to accept the socket, else the close code to refuse it with."""
    if not user.is_authenticated:
        return CLOSE_UNAUTHENTICATED
    if not user_can_decide(user=user):
        return CLOSE_FORBIDDEN
    if item_public_id is not None and not QueueItem.objects.filter(public_id=item_public_id).exists():
        return CLOSE_NOT_FOUND
    return None


def live_session_valid(*, session_key: str | None, user_id: int) -> bool:
    """Is the socket's login session still the same moderator's? Read fresh from the store.

    The scope's session was loaded once at connect; a logout (or a password change, or
    a revoked permission) since then is visible only in the store itself.
    """
    if not session_key:
        return False
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    # Django's own check (session hash included), fed the stored session instead of a request.
    user = auth.get_user(SimpleNamespace(session=store))
    return user.pk == user_id and user_can_decide(user=user)


def live_groups(*, user_id: int, session_key: str, item_public_id: str | None) -> list[str]:
    """An item page listens to its item, a queue page to the whole queue; both to their user and session.

    Never both item and queue: every decision goes to both groups and would arrive twice.
    """
    page_group = events.item_group(item_public_id) if item_public_id else events.QUEUE_GROUP
    return [page_group, events.user_group(user_id), events.session_group(session_key)]


def live_frame_parse(*, text_data: str | None, bytes_data: bytes | None) -> str:
    """The type of a client frame; FrameError (with a code for the error frame) if it is not one we know."""
    if text_data is None:
        raise FrameError("bad_frame", "send text frames holding JSON, not binary")
    try:
        frame: Any = json.loads(text_data)
    except ValueError:
        raise FrameError("bad_json", "the frame is not valid JSON") from None
    if not isinstance(frame, dict):
        raise FrameError("bad_json", 'the frame must be a JSON object like {"type": "heartbeat"}')
    kind = frame.get("type")
    if kind not in FRAME_TYPES:
        raise FrameError("unknown_type", f"unknown frame type {kind!r}; known: {', '.join(FRAME_TYPES)}")
    return kind


def live_state_read(*, username: str, item_public_id: str | None) -> dict[str, Any]:
    """Everything a page needs to be current: sent on connect and after every heartbeat."""
    state: dict[str, Any] = {"type": "state", "you": username, "heartbeat_seconds": PRESENCE_HEARTBEAT_SECONDS}
    if item_public_id is None:
        state["counts"] = queue_counts().as_dict()
        state["viewing"] = presence_by_item()
        return state
    item = item_get(public_id=item_public_id)
    state["item"] = _item_state(item) if item is not None else None
    state["viewers"] = presence_viewers(item_public_id=item_public_id)
    return state


def _item_state(item: QueueItem) -> dict[str, Any]:
    state: dict[str, Any] = {"item": str(item.public_id), "title": item.title, "status": item.status}
    if item.decided_by is not None:
        state.update(
            winner=item.decided_by.get_username(), decided_at=item.decided_at.isoformat(),
            seconds_ago=seconds_since(item.decided_at),
        )
    return state


def live_logout_handle(sender: type, request: Any, user: AbstractBaseUser | None, **kwargs: Any) -> None:
    """``user_logged_out`` receiver: close the session's sockets at once, in every process the layer reaches."""
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if session_key:
        events.session_ended_broadcast(session_key=session_key)
