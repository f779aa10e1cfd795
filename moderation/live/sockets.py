"""The live dashboard's rules, kept out of the consumer so the consumer only translates.

Who may hold a socket, how many one login may hold, whether its login is still valid,
which groups it joins, what a client may send and how often, and the state snapshot a
page re-reads on every (re)connect and heartbeat (so an event missed while disconnected
never leaves a stale screen).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import import_module
from types import SimpleNamespace
from typing import Any, Literal

from django.conf import settings
from django.contrib import auth
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.cache import cache

from moderation.core.jsonparse import json_parse
from moderation.core.permissions import user_can_decide, user_can_view
from moderation.items.models import QueueItem
from moderation.live.presence import (
    presence_by_item,
    presence_leave,
    presence_touch,
    presence_viewers,
)
from moderation.policies.models import TeamMembership
from moderation.policies.teams import user_is_supervisor
from moderation.records import events
from moderation.records.outcomes import seconds_since
from moderation.records.selectors import item_get, queue_counts

logger = logging.getLogger(__name__)

# Close codes a client acts on (static/moderation/live.js): after 4401 it stops
# reconnecting; after 4409 it stops and says why; after 4429 it backs off, then reconnects;
# after 4408 (its heartbeats stopped reaching us: a sleeping laptop, a throttled tab) it reconnects.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_SILENT = 4408
CLOSE_TOO_MANY_SOCKETS = 4409
CLOSE_RATE_LIMITED = 4429

LOST_DECIDE_MESSAGE = "you may no longer decide items; reload the page to follow the queue read-only"
LOST_TEAM_MESSAGE = "your teams changed; the page reconnects to follow the queues you may see now"
LOST_ITEM_MESSAGE = "you may no longer see this item (it is another team's)"

FRAME_TYPES = ("heartbeat",)
# A heartbeat is 20 characters; anything near this bound is not ours, and is refused unread.
FRAME_MAX_CHARS = 4096
# Frames dropped in a row before a socket is closed: a page that merely bursts (a tab waking
# from sleep) loses a few frames, a client that keeps flooding loses its socket.
FRAME_DROPS_TO_CLOSE = 50


class FrameError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def live_socket_admit(*, user: AbstractBaseUser | AnonymousUser, item_public_id: str | None) -> int | None:
    """None to accept the socket, else the close code to refuse it with.

    View-only users are admitted too: a socket only listens (its one frame, the heartbeat,
    re-reads state), and a viewer's socket writes no presence either (``live_heartbeat``).
    """
    if not user.is_authenticated:
        return CLOSE_UNAUTHENTICATED
    if not user_can_view(user=user):
        return CLOSE_FORBIDDEN
    # Another team's item is as absent as its page (``moderation.records.selectors.item_get``).
    if item_public_id is not None and item_get(public_id=item_public_id, viewer=user) is None:
        return CLOSE_NOT_FOUND
    return None


@dataclass(frozen=True)
class LiveRights:
    """A socket's rights as the stores have them now."""

    lost: str | None  # why the socket must end; None: it may stay
    can_decide: bool  # what its user may do now


def live_rights_read(
    *,
    session_key: str | None,
    user_id: int,
    can_decide: bool,
    item_public_id: str | None,
    groups: Sequence[str],
) -> LiveRights:
    """The socket's user's rights, read fresh from the stores.

    ``can_decide``: what the socket was admitted as. A moderator's page holds decision
    forms, so losing the decide right ends its socket (the page says to reload, and follows
    the queue read-only after that). A viewer who becomes a moderator keeps the socket,
    read-only as admitted (never counted as present on an item); the states it is sent say
    the user may now decide, and the page, rendered without forms, asks to be reloaded.

    ``groups``: what the socket joined when admitted. A queue page that joined a group its
    user may no longer join (removed from a team, no longer a supervisor) ends, and reconnects
    to the groups it may join now; an item page ends once its user may no longer see the item.

    The scope's session and user were loaded once at connect; a logout, a password change
    (Django's session hash), deleted sessions, a deactivated account, a revoked
    permission or an ended team membership since then are visible only in the database itself.
    """
    if not session_key:
        return LiveRights(lost="you have been logged out", can_decide=False)
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    # Django's own check (session hash included), fed the stored session instead of a request.
    user = auth.get_user(SimpleNamespace(session=store))
    if user.pk != user_id or not user_can_view(user=user):
        return LiveRights(lost="you have been logged out", can_decide=False)
    may_decide = user_can_decide(user=user)
    if can_decide and not may_decide:
        return LiveRights(lost=LOST_DECIDE_MESSAGE, can_decide=False)
    if item_public_id is not None and item_get(public_id=item_public_id, viewer=user) is None:
        return LiveRights(lost=LOST_ITEM_MESSAGE, can_decide=may_decide)
    if set(groups) - set(live_groups(user=user, session_key=session_key, item_public_id=item_public_id)):
        return LiveRights(lost=LOST_TEAM_MESSAGE, can_decide=may_decide)
    return LiveRights(lost=None, can_decide=may_decide)


def live_groups(*, user: AbstractBaseUser, session_key: str, item_public_id: str | None) -> list[str]:
    """An item page listens to its item, a queue page to the queue of the items its user may see; both to their user and session.

    Never both item and queue: every decision goes to both groups and would arrive twice.
    A queue page joins its teams' groups as they are when it connects (a page opened before
    joining a team hears of the team's items after its next reconnect or reload).
    """
    user_groups = [events.user_group(user.pk), events.session_group(session_key)]
    if item_public_id:
        return [events.item_group(item_public_id), *user_groups]
    if user_is_supervisor(user=user):
        return [events.QUEUE_GROUP, events.SUPERVISORS_GROUP, *user_groups]
    teams = TeamMembership.objects.filter(user_id=user.pk, removed_at__isnull=True).values_list("team_id", flat=True)
    # Not queue_groups(): that names where an item's events go, the supervisors' group among them.
    return [events.QUEUE_GROUP, *(events.team_group(team) for team in teams), *user_groups]


def live_error_frame(*, code: str, message: str) -> dict[str, str]:
    return {"type": "error", "error": code, "message": message}


def live_frame_parse(*, text_data: str | None, bytes_data: bytes | None) -> str:
    """The type of a client frame; FrameError (with a code for the error frame) if it is not one we know."""
    if text_data is None:
        raise FrameError("bad_frame", "send text frames holding JSON, not binary")
    if len(text_data) > FRAME_MAX_CHARS:
        raise FrameError("frame_too_large", f"a frame may hold at most {FRAME_MAX_CHARS} characters")
    try:
        frame: Any = json_parse(text_data)
    except RecursionError:
        raise FrameError("bad_json", "the frame nests too deeply") from None
    except ValueError:
        raise FrameError("bad_json", "the frame is not valid JSON") from None
    if not isinstance(frame, dict):
        raise FrameError("bad_json", 'the frame must be a JSON object like {"type": "heartbeat"}')
    kind = frame.get("type")
    if kind not in FRAME_TYPES:
        raise FrameError("unknown_type", f"unknown frame type {kind!r}; known: {', '.join(FRAME_TYPES)}")
    return kind


@dataclass
class FrameBudget:
    """One socket's inbound token bucket (``LIVE_FRAME_RATE`` per second, up to ``LIVE_FRAME_BURST``).

    Spent before any parsing or database work, so a frame over budget costs the server
    microseconds, not a session check, a presence write and a state read.
    """

    tokens: float
    stamp: float
    dropped_in_row: int = 0


def live_frame_budget_new(*, now: float) -> FrameBudget:
    return FrameBudget(tokens=float(settings.LIVE_FRAME_BURST), stamp=now)


def live_frame_admit(*, budget: FrameBudget, now: float) -> Literal["admit", "drop", "close"]:
    """Admit the frame, drop it unanswered, or (once, at the ``FRAME_DROPS_TO_CLOSE``-th drop in a row) close the socket."""
    rate = settings.LIVE_FRAME_RATE
    if rate <= 0:
        return "admit"
    budget.tokens = min(float(settings.LIVE_FRAME_BURST), budget.tokens + (now - budget.stamp) * rate)
    budget.stamp = now
    if budget.tokens >= 1:
        budget.tokens -= 1
        budget.dropped_in_row = 0
        return "admit"
    budget.dropped_in_row += 1
    return "close" if budget.dropped_in_row == FRAME_DROPS_TO_CLOSE else "drop"


RATE_LIMITED_FRAME = live_error_frame(
    code="rate_limited", message="too many frames from this page; the socket is closed, reconnect later"
)


def _session_sockets_key(session_key: str) -> str:
    # Hashed because cache keys travel to Redis and a session key is a credential.
    return "live-sockets:" + hashlib.sha256(session_key.encode()).hexdigest()[:40]


def live_socket_hold(*, session_key: str, channel_name: str, now: float | None = None) -> bool:
    """Count the socket against its session's cap (on connect) or keep counting it (on heartbeat).

    False if the session already holds ``LIVE_SOCKETS_PER_SESSION`` other sockets. The
    count lives in the cache, which is Redis (shared by every process) when REDIS_URL is
    set: one entry per socket with its own expiry, renewed by its heartbeat, so sockets
    of a process that died without cleaning up stop counting after ``_entry_seconds()``.
    A live process closes a socket that misses its heartbeats before its entry expires
    (``live_silent``), and releases the entry then: an open socket is never uncounted.
    Two processes updating one session at the same instant may lose one renewal (that
    socket is not counted until its next heartbeat), never refuse a socket wrongly. If
    the cache is unreachable the cap is not enforced (logged), as with the decision limit.
    """
    cap = settings.LIVE_SOCKETS_PER_SESSION
    if cap <= 0:
        return True
    now = time.time() if now is None else now
    ttl = _entry_seconds()
    key = _session_sockets_key(session_key)
    try:
        held = {name: until for name, until in (cache.get(key) or {}).items() if until > now}
        if channel_name not in held and len(held) >= cap:
            return False
        held[channel_name] = now + ttl
        cache.set(key, held, timeout=int(ttl) + 1)
    except Exception as exc:  # the cache backend's own errors (redis.ConnectionError, timeouts)
        logger.warning("live socket cap not checked: the cache is unreachable (%s: %s)", type(exc).__name__, exc)
    return True


def _entry_seconds() -> float:
    # A heartbeat interval longer than the silence that closes its socket: the entry outlives
    # the open socket, however late the close runs on a busy server.
    return settings.LIVE_SILENT_SECONDS + settings.LIVE_HEARTBEAT_SECONDS


def live_silent(*, heard_at: float, now: float) -> bool:
    """Whether a socket last heard from (admitted, or a heartbeat answered) at ``heard_at`` has missed its heartbeats."""
    return now - heard_at >= settings.LIVE_SILENT_SECONDS


def live_silent_frame() -> dict[str, str]:
    return live_error_frame(
        code="silent",
        message=f"no heartbeat for {settings.LIVE_SILENT_SECONDS:g} s: this socket is closed; reconnect",
    )


def live_socket_release(*, session_key: str, channel_name: str) -> None:
    key = _session_sockets_key(session_key)
    try:
        held = cache.get(key) or {}
        if held.pop(channel_name, None) is not None:
            cache.set(key, held, timeout=int(_entry_seconds()) + 1)
    except Exception as exc:  # as above: the entry then expires by itself
        logger.warning("live socket not released from its cap: the cache is unreachable (%s: %s)", type(exc).__name__, exc)


def too_many_sockets_message() -> str:
    return f"this login already has {settings.LIVE_SOCKETS_PER_SESSION} live pages open; close some tabs and reload this one"


# This process's sockets and the groups each has joined. /healthz reports the totals, so a
# socket whose clean-up never ran shows up as numbers that never return to zero.
_JOINED: dict[str, list[str]] = {}


async def live_groups_join(*, layer: Any, channel_name: str, groups: list[str]) -> None:
    joined = _JOINED.setdefault(channel_name, [])
    for group in groups:
        await layer.group_add(group, channel_name)
        joined.append(group)


async def live_groups_leave(*, layer: Any, channel_name: str) -> None:
    """Leave every group the socket joined; a layer error is logged and the rest are still left."""
    joined = _JOINED.pop(channel_name, [])
    while joined:
        group = joined.pop()
        try:
            await layer.group_discard(group, channel_name)
        except Exception:
            logger.warning("live: could not leave group %s", group, exc_info=True)


def live_sockets_stats() -> dict[str, int]:
    return {"sockets": len(_JOINED), "group_memberships": sum(map(len, _JOINED.values()))}


def live_heartbeat(
    *,
    session_key: str,
    user_id: int,
    username: str,
    item_public_id: str | None,
    channel_name: str,
    can_decide: bool,
    groups: Sequence[str],
) -> dict[str, Any] | None:
    """An admitted heartbeat: the fresh state, or None if the socket's rights are gone.

    Only a moderator's heartbeat marks them as viewing the item: presence tells moderators
    who else may be about to decide it, which a viewer never is.
    """
    rights = live_rights_read(
        session_key=session_key, user_id=user_id, can_decide=can_decide, item_public_id=item_public_id, groups=groups
    )
    if rights.lost is not None:
        return None
    live_socket_hold(session_key=session_key, channel_name=channel_name)
    if item_public_id and can_decide:
        presence_touch(user_id=user_id, item_public_id=item_public_id, channel_name=channel_name)
    return live_state_read(username=username, item_public_id=item_public_id, can_decide=rights.can_decide)


def live_socket_forget(*, session_key: str | None, channel_name: str, on_item: bool) -> None:
    """A socket ended, however it ended: its presence row and its place under the cap go."""
    try:
        if on_item:
            presence_leave(channel_name=channel_name)
    finally:
        if session_key:
            live_socket_release(session_key=session_key, channel_name=channel_name)


def live_state_read(*, username: str, item_public_id: str | None, can_decide: bool) -> dict[str, Any]:
    """Everything a page needs to be current: sent on connect and after every heartbeat.

    ``can_decide`` lets a page rendered for a moderator notice that it no longer may.
    """
    state: dict[str, Any] = {
        "type": "state",
        "you": username,
        "can_decide": can_decide,
        "heartbeat_seconds": settings.LIVE_HEARTBEAT_SECONDS,
    }
    if item_public_id is None:
        state["counts"] = queue_counts().as_dict()
        state["resync_seconds"] = settings.LIVE_QUEUE_RESYNC_SECONDS
        state["viewing"] = presence_by_item()
        return state
    item = item_get(public_id=item_public_id)
    state["item"] = _item_state(item) if item is not None else None
    state["viewers"] = presence_viewers(item_public_id=item_public_id)
    return state


def _item_state(item: QueueItem) -> dict[str, Any]:
    state: dict[str, Any] = {"item": str(item.public_id), "title": item.title, "status": item.status}
    if item.apply_state:  # "applying" or "failed": a page still showing "applying…" learns it is over
        state["apply_state"] = item.apply_state
    if item.decided_by is not None:
        state.update(
            winner=item.decided_by.get_username(),
            decided_at=item.decided_at.isoformat(),
            seconds_ago=seconds_since(item.decided_at),
        )
        # A quorum item: the votes it resolved with, so each voter's page can say whether theirs counted.
        resolved = item.asks.exclude(tally={}).order_by("-decided_at", "-id").values_list("tally", flat=True).first()
        if resolved:
            state["tally"] = {"summary": resolved.get("summary", ""), "voters": [v["voter"] for v in resolved.get("votes", [])]}
    return state
