"""Live events across processes without Redis: through the database, to the server.

Without ``REDIS_URL`` the channel layer lives inside the server process, so what a worker or
a ``manage.py`` command sends would reach nobody. Such a process writes each event as a row
(``relay_record``); the server reads new rows every ``RELAY_FOLLOW_SECONDS`` while a page is
open and sends them to its own layer (``relay_follow``). The server's own sends stay in
memory.

Delivery is as Redis pub/sub's: at most once, to pages open now; pages re-read the state on
every (re)connect and heartbeat. Writers prune rows after ``RELAY_KEEP_SECONDS``. Why not a
database-backed channel layer: contributors/live-updates.md.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from moderation.records.models import RelayedEvent

logger = logging.getLogger(__name__)

Sends = list[tuple[str, dict[str, Any]]]

# How often a server with open pages looks for new rows: the most an event of another
# process waits before its pages hear it.
RELAY_FOLLOW_SECONDS = 0.25
# Far longer than the server needs to read a row; rows older than this are deleted.
RELAY_KEEP_SECONDS = 60


def relay_record(*, sends: Sends) -> None:
    """Keep one event's sends for the server to pass on; prune rows past ``RELAY_KEEP_SECONDS``.

    Runs in its own transaction (callers are past their commit). Ids must become
    visible in the order they are given, because the server reads after the last id it
    has seen: SQLite's single writer does that; on PostgreSQL the table lock does it.
    """
    now = timezone.now()
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f"LOCK TABLE {RelayedEvent._meta.db_table} IN EXCLUSIVE MODE")
        RelayedEvent.objects.filter(made_at__lt=now - timedelta(seconds=RELAY_KEEP_SECONDS)).delete()
        RelayedEvent.objects.create(sends=[[group, message] for group, message in sends], made_at=now)


def relay_last() -> int:
    """The id of the newest row now (0 if none): where a server starts following."""
    return RelayedEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


def relay_read(*, after: int, made_since: datetime | None = None) -> tuple[int, list[Sends]]:
    """The rows after id ``after``, oldest first: the last id read, and the sends of those
    made at or after ``made_since`` (all of them when None)."""
    rows = list(RelayedEvent.objects.filter(pk__gt=after).order_by("pk").values_list("pk", "sends", "made_at"))
    if not rows:
        return after, []
    fresh = [row for row in rows if made_since is None or row[2] >= made_since]
    return rows[-1][0], [[(group, message) for group, message in sends] for _, sends, _ in fresh]


def relay_follow(
    *,
    deliver: Callable[[Sends], None],
    listening: Callable[[], bool],
    stop: threading.Event | None = None,
) -> None:
    """Pass every row recorded from now on to ``deliver``, while ``listening()`` (a page is open).

    The server runs this in a thread of its own until ``stop`` is set (never, in a server).
    An event made before any page listened is skipped: each page read the state when it
    connected, after that event's commit. A failed read is logged (once per outage) and tried again.
    """
    stop = stop or threading.Event()
    after: int | None = None
    made_since: datetime | None = None
    # Taken just before the last look that found no page listening: an event made before it
    # had nobody to reach, and one made after it may have (a slow look must not skip it).
    quiet_at: datetime | None = None
    failing = False
    while True:
        try:
            looked_at = timezone.now()
            if after is None:
                after = relay_last()
            if listening():
                if made_since is None:
                    made_since = quiet_at or looked_at
                after, events = relay_read(after=after, made_since=made_since)
                for sends in events:
                    deliver(sends)
            else:
                made_since, quiet_at = None, looked_at
        except Exception:  # a database outage must not end the relaying for good
            if not failing:  # once per outage, not four times a second
                logger.exception("live relay: could not pass on the events of other processes; trying again")
            failing = True
            connection.close()
        else:
            failing = False
        if stop.wait(RELAY_FOLLOW_SECONDS):
            return
