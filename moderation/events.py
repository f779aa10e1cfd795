"""Everything the dashboard is told live, sent only after the database commits.

Channel layers deliver at most once and may be down; a failed push is logged and
never turns a decision into an error, because the HTTP response already tells the
reviewer the truth and clients resync on reconnect.

Groups: ``queue`` (every open queue page), ``item.<uuid>`` (every open page of that
item), ``user.<id>`` (every open page of that user), ``session.<hash>`` (every open
page of one login session, so logging out closes them).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import DatabaseError

from moderation.selectors import queue_counts

if TYPE_CHECKING:
    from moderation.outcomes import DecisionOutcome
    from moderation.models import QueueItem

logger = logging.getLogger(__name__)

QUEUE_GROUP = "queue"
# A layer that hangs (a black-holed Redis) must not hold a reviewer's HTTP response
# hostage: the push is given up after this long and the client catches up on resync.
SEND_TIMEOUT_SECONDS = 2.0

REQUESTED_NOUN = {"approve": "approval", "reject": "rejection"}


def item_group(public_id: str) -> str:
    return f"item.{public_id}"


def user_group(user_id: int) -> str:
    return f"user.{user_id}"


def session_group(session_key: str) -> str:
    # Hashed because group names travel through Redis and a session key is a credential.
    return "session." + hashlib.sha256(session_key.encode()).hexdigest()[:40]


def _send(group: str, message: dict[str, Any]) -> None:
    _send_all([(group, message)])


def _send_all(sends: list[tuple[str, dict[str, Any]]]) -> None:
    """Push to several groups in one trip into the event loop (each ``async_to_sync``
    from a plain thread starts a loop of its own), concurrently, each bounded and
    logged on its own."""
    try:
        layer = get_channel_layer()
        if layer is None:
            return
        results = async_to_sync(_group_send_all_bounded)(layer, sends)
    except Exception as exc:
        results = [exc] * len(sends)
    for (group, message), result in zip(sends, results):
        if isinstance(result, BaseException):
            logger.error("could not push %s to %s", message.get("type"), group, exc_info=result)


async def _group_send_all_bounded(layer: Any, sends: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    return await asyncio.gather(
        *(asyncio.wait_for(layer.group_send(group, message), timeout=SEND_TIMEOUT_SECONDS) for group, message in sends),
        return_exceptions=True,
    )


def _counts() -> dict[str, int]:
    # These run in on_commit callbacks; an exception there would turn a committed
    # decision into a 500, so a failed count only leaves the counts to the next resync.
    try:
        return queue_counts().as_dict()
    except DatabaseError:
        logger.exception("could not count the queue for a live update")
        return {}


def item_created_broadcast(*, item: QueueItem) -> None:
    if get_channel_layer() is None:  # nobody to tell: skip counting the queue
        return
    _send(QUEUE_GROUP, {"type": "item.created", "item": str(item.public_id), "title": item.title, "counts": _counts()})


def decision_broadcast(*, outcome: DecisionOutcome) -> None:
    """Tell everyone an item was decided (called for the winner's commit)."""
    if get_channel_layer() is None:  # nobody to tell: skip counting the queue
        return
    message = {
        "type": "item.decided", **outcome.winner_payload(), "seconds_ago": outcome.seconds_ago(), "counts": _counts(),
    }
    _send_all([(QUEUE_GROUP, message), (item_group(outcome.item_public_id), message)])


def loser_notify(*, outcome: DecisionOutcome, reviewer_id: int) -> None:
    """Tell the losing reviewer's other open tabs their decision was not applied."""
    message = (
        f"your {REQUESTED_NOUN.get(outcome.requested, outcome.requested)} of item {outcome.item_title} "
        f"was not applied: {outcome.winner} {outcome.winner_status} it first"
    )
    _send(
        user_group(reviewer_id),
        {
            "type": "decision.lost", **outcome.winner_payload(), "requested": outcome.requested,
            "seconds_ago": outcome.seconds_ago(), "message": message,
        },
    )


def presence_broadcast(*, item_public_id: str, viewers: list[str]) -> None:
    """Tell the item's pages and the queue pages who is viewing the item now."""
    message = {"type": "presence.changed", "item": item_public_id, "viewers": viewers}
    _send_all([(item_group(item_public_id), message), (QUEUE_GROUP, message)])


def session_ended_broadcast(*, session_key: str) -> None:
    """Close every socket of a session that has just logged out."""
    _send(session_group(session_key), {"type": "session.ended"})
