"""Everything the dashboard is told live, sent only after the database commits.

Channel layers deliver at most once and may be down; a failed push is logged and
never turns a decision into an error, because the HTTP response already tells the
reviewer the truth and clients resync on reconnect.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

if TYPE_CHECKING:
    from moderation.decisions import DecisionOutcome
    from moderation.models import QueueItem

logger = logging.getLogger(__name__)

QUEUE_GROUP = "queue"


def item_group(public_id: str) -> str:
    return f"item.{public_id}"


def user_group(user_id: int) -> str:
    return f"user.{user_id}"


def _send(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:
        logger.exception("could not push %s to %s", message.get("type"), group)


def item_created_broadcast(*, item: QueueItem) -> None:
    _send(QUEUE_GROUP, {"type": "item.created", "item": str(item.public_id)})


def decision_broadcast(*, outcome: DecisionOutcome) -> None:
    """Tell everyone an item was decided (called for the winner's commit)."""
    message = {"type": "item.decided", **outcome.winner_payload()}
    _send(QUEUE_GROUP, message)
    _send(item_group(outcome.item_public_id), message)


def loser_notify(*, outcome: DecisionOutcome, reviewer_id: int) -> None:
    """Tell the losing reviewer's other open tabs their decision was not applied."""
    _send(user_group(reviewer_id), {"type": "decision.lost", **outcome.winner_payload(), "requested": outcome.requested})
