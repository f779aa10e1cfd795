"""Who is looking at which item right now.

One ``Presence`` row per open item page, in the database every server process shares (SQLite
or PostgreSQL), so presence works across processes without Redis, at one small upsert per
tab per heartbeat. A row counts while its heartbeat is recent (``presence_ttl()``); a tab
that closes, or that its server closes, deletes its row; stale rows are purged when someone
joins, and pages re-read presence with each heartbeat. A failed write is logged and the
socket carries on: presence is a courtesy.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.conf import settings
from django.db import OperationalError
from django.utils import timezone

from moderation.items.models import QueueItem
from moderation.live.models import Presence
from moderation.records import events

logger = logging.getLogger(__name__)


def presence_ttl() -> timedelta:
    """How long a row counts after its page's last heartbeat: as long as its socket may stay silent.

    ``LIVE_SILENT_SECONDS`` is more than two heartbeats by default, so one heartbeat late
    under load does not make a viewer flicker.
    """
    return timedelta(seconds=settings.LIVE_SILENT_SECONDS)


@contextmanager
def _best_effort(action: str) -> Iterator[None]:
    try:
        yield
    except OperationalError:
        logger.warning("presence %s failed; carrying on without it", action, exc_info=True)


def presence_join(*, user_id: int, item_public_id: str, channel_name: str, now: datetime | None = None) -> None:
    """Record that ``channel_name`` shows the item to the user, and tell the others."""
    now = now or timezone.now()
    with _best_effort("join"):
        item_id = QueueItem.objects.values_list("pk", flat=True).get(public_id=item_public_id)
        Presence.objects.filter(last_seen__lt=now - presence_ttl()).delete()
        Presence.objects.bulk_create(
            [Presence(channel_name=channel_name, item_id=item_id, user_id=user_id, last_seen=now)],
            update_conflicts=True,
            unique_fields=["channel_name"],
            update_fields=["last_seen"],
        )
        events.presence_broadcast(item_public_id=item_public_id, viewers=presence_viewers(item_public_id=item_public_id, now=now))


def presence_touch(*, user_id: int, item_public_id: str, channel_name: str, now: datetime | None = None) -> None:
    """Heartbeat: keep the row fresh, re-joining if it had already expired."""
    now = now or timezone.now()
    with _best_effort("heartbeat"):
        fresh = Presence.objects.filter(channel_name=channel_name, last_seen__gte=now - presence_ttl())
        if not fresh.update(last_seen=now):
            presence_join(user_id=user_id, item_public_id=item_public_id, channel_name=channel_name, now=now)


def presence_leave(*, channel_name: str) -> None:
    """The page closed: drop its row and tell the others."""
    with _best_effort("leave"):
        row = Presence.objects.filter(channel_name=channel_name).select_related("item").first()
        if row is None:
            return
        row.delete()
        item_public_id = str(row.item.public_id)
        events.presence_broadcast(item_public_id=item_public_id, viewers=presence_viewers(item_public_id=item_public_id))


def presence_viewers(*, item_public_id: str, now: datetime | None = None) -> list[str]:
    """Usernames with a live page of the item, each once, sorted."""
    now = now or timezone.now()
    return sorted(
        set(
            Presence.objects.filter(item__public_id=item_public_id, last_seen__gte=now - presence_ttl()).values_list(
                "user__username", flat=True
            )
        )
    )


def presence_by_item(*, now: datetime | None = None) -> dict[str, list[str]]:
    """Every item someone is viewing, with who (for the queue page's markers)."""
    now = now or timezone.now()
    viewing: dict[str, set[str]] = {}
    for public_id, username in Presence.objects.filter(last_seen__gte=now - presence_ttl()).values_list(
        "item__public_id", "user__username"
    ):
        viewing.setdefault(str(public_id), set()).add(username)
    return {public_id: sorted(names) for public_id, names in viewing.items()}
