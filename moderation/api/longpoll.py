"""Waiting for an item's decision without polling the database.

The wait joins the item's channel group (``events.item_group``), the one the guard's
after-commit ``item.decided`` push goes to, on a channel of its own; then it re-reads
the item, so a decision committed between the first read and the join is not missed.
Any message on the group (a decision, presence) makes it read the row again; nothing
else does, so an idle wait costs no queries.
"""

from __future__ import annotations

import asyncio

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from moderation.records import events
from moderation.models import UNDECIDED_STATUSES, QueueItem
from moderation.records.selectors import client_item_get

def item_undecided(item: QueueItem) -> bool:
    # Starting, pending or needing attention: a decision may still come (recover finishes the
    # latter). A refused item never will: its answer is final too.
    return item.status in UNDECIDED_STATUSES


async def item_decision_wait(*, client_id: int, public_id: str, timeout: float) -> QueueItem | None:
    """The client's item once it is decided, or as it is after ``timeout`` seconds; None if not theirs."""
    read = sync_to_async(client_item_get)
    item = await read(client_id=client_id, public_id=public_id)
    layer = get_channel_layer()
    if item is None or not item_undecided(item) or timeout <= 0 or layer is None:
        return item
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
            except asyncio.TimeoutError:
                break
            item = await read(client_id=client_id, public_id=public_id)
    finally:
        await layer.group_discard(group, channel)
    return item
