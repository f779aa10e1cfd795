"""Waiting for an item's decision without polling the database, and without holding a connection.

The wait joins the item's channel group (``events.item_group``), the one the guard's
after-commit ``item.decided`` push goes to, on a channel of its own; then it re-reads
the item, so a decision committed between the first read and the join is not missed.
Any message on the group (a decision, presence) makes it read the row again; nothing
else does, so an idle wait costs no queries.

Each read gives its database connection back at once (to the pool on PostgreSQL): a
sleeping wait holds none, so waits beyond ``DB_POOL_SIZE`` cannot starve the pages. A
wait counts against the caps of ``moderation.live.waits`` while it runs.
"""

from __future__ import annotations

import asyncio

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import connections

from moderation.items.models import UNDECIDED_STATUSES, QueueItem
from moderation.live.waits import wait_slot_hold
from moderation.records import events
from moderation.records.selectors import client_item_get


def item_undecided(item: QueueItem) -> bool:
    # Starting, pending or needing attention: a decision may still come (recover finishes the
    # latter). A refused item never will: its answer is final too.
    return item.status in UNDECIDED_STATUSES


def _item_read(*, client_id: int, public_id: str) -> QueueItem | None:
    try:
        return client_item_get(client_id=client_id, public_id=public_id)
    finally:
        # The request's thread would keep its connection until the request ends, and the wait
        # sleeps next. A connection inside a transaction is its owner's (a test's, say): left open.
        for connection in connections.all(initialized_only=True):
            if not connection.in_atomic_block:
                connection.close()


async def item_decision_wait(*, client_id: int, public_id: str, timeout: float) -> QueueItem | None:
    """The client's item once it is decided, or as it is after ``timeout`` seconds; None if not theirs.

    Only a wait that has to sleep counts against the caps (``moderation.live.waits``): past
    one it raises ``WaitRefused`` after a single read, having joined nothing.
    """
    read = sync_to_async(_item_read)
    item = await read(client_id=client_id, public_id=public_id)
    layer = get_channel_layer()
    if item is None or not item_undecided(item) or timeout <= 0 or layer is None:
        return item
    with wait_slot_hold(client_id=client_id):
        group = events.item_group(str(item.public_id))
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            item = await read(client_id=client_id, public_id=public_id)
            while item is not None and item_undecided(item):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(layer.receive(channel), timeout=remaining)
                except TimeoutError:
                    break
                item = await read(client_id=client_id, public_id=public_id)
        finally:
            await layer.group_discard(group, channel)
    return item
