"""item_decision_wait: woken by the item's group, never by polling the database."""

from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace

import pytest
from channels.layers import get_channel_layer

from moderation.api import longpoll
from moderation.records import events

ITEM_ID = str(uuid.uuid4())


@pytest.fixture
def item_reads(monkeypatch, settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "reviewqueue.channel_layers.InMemoryChannelLayer"}}
    state = {"status": "pending", "reads": 0}

    def read(*, client_id: int, public_id: str):
        state["reads"] += 1
        return SimpleNamespace(status=state["status"], public_id=public_id)

    monkeypatch.setattr(longpoll, "client_item_get", read)
    return state


@pytest.mark.asyncio
async def test_an_idle_wait_reads_the_row_twice_and_no_more(item_reads):
    wait = 1.0
    started = time.monotonic()
    item = await longpoll.item_decision_wait(client_id=1, public_id=ITEM_ID, timeout=wait)
    # At its timeout: not before, and not a second timeout later.
    assert item.status == "pending" and 0.9 * wait <= time.monotonic() - started < 2 * wait
    # Once before joining the group, once after: a sleep loop would read again and again.
    assert item_reads["reads"] == 2


@pytest.mark.asyncio
async def test_the_decided_event_ends_the_wait_at_once(item_reads):
    layer = get_channel_layer()

    async def decide_later() -> None:
        await asyncio.sleep(0.2)
        item_reads["status"] = "approved"
        await layer.group_send(events.item_group(ITEM_ID), {"type": "item.decided"})

    started = time.monotonic()
    decider = asyncio.create_task(decide_later())
    item = await longpoll.item_decision_wait(client_id=1, public_id=ITEM_ID, timeout=30)
    await decider
    assert item.status == "approved" and time.monotonic() - started < 30 / 2  # woken, not timed out
    assert item_reads["reads"] == 3
    assert not layer.groups.get(events.item_group(ITEM_ID)), "the wait left the group"


@pytest.mark.asyncio
async def test_a_decision_before_the_join_is_seen_by_the_second_read(item_reads, monkeypatch):
    layer = get_channel_layer()
    group_add = layer.group_add

    async def decided_meanwhile(group, channel):
        item_reads["status"] = "rejected"  # committed after the first read, before the join
        await group_add(group, channel)

    monkeypatch.setattr(layer, "group_add", decided_meanwhile)
    started = time.monotonic()
    item = await longpoll.item_decision_wait(client_id=1, public_id=ITEM_ID, timeout=30)
    assert item.status == "rejected" and time.monotonic() - started < 30 / 2  # seen, not timed out
