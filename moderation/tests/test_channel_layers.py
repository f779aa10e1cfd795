"""The embedded channel layer (reviewqueue.channel_layers): channels' in-memory layer, swept at most once a second."""

import asyncio

import pytest
from channels.layers import InMemoryChannelLayer as ChannelsInMemoryChannelLayer

from reviewqueue import channel_layers
from reviewqueue.channel_layers import InMemoryChannelLayer

pytestmark = pytest.mark.asyncio


@pytest.fixture
def sweeps(monkeypatch):
    """How many times the full walk over channels and groups ran."""
    walked = []
    walk = ChannelsInMemoryChannelLayer._clean_expired

    def counted(self):
        walked.append(1)
        walk(self)

    monkeypatch.setattr(ChannelsInMemoryChannelLayer, "_clean_expired", counted)
    return walked


async def test_many_messages_cost_one_walk_per_interval(sweeps):
    layer = InMemoryChannelLayer()
    channels = [await layer.new_channel() for _ in range(50)]
    for channel in channels:
        await layer.group_add("queue", channel)
    for n in range(20):
        await layer.group_send("queue", {"type": "item.decided", "n": n})
        for channel in channels:
            assert (await layer.receive(channel))["n"] == n
    assert len(sweeps) == 1  # channels' own layer walks 50 channels and the group 1,020 times here

    control = ChannelsInMemoryChannelLayer()
    channel = await control.new_channel()
    await control.group_add("queue", channel)
    await control.group_send("queue", {"type": "item.decided"})
    await control.receive(channel)
    assert len(sweeps) == 3  # the unthrottled walk, seen by the same counter: one per send and per receive


async def test_expired_messages_and_memberships_still_go_once_the_interval_passes(monkeypatch, sweeps):
    clock = [1000.0]
    monkeypatch.setattr(channel_layers.time, "monotonic", lambda: clock[0])
    layer = InMemoryChannelLayer(expiry=60, group_expiry=86400)
    stale, live = await layer.new_channel(), await layer.new_channel()
    await layer.group_add("queue", stale)
    await layer.group_add("queue", live)
    await layer.send(stale, {"type": "item.decided"})
    layer.channels[stale]._queue[0] = (0.0, layer.channels[stale]._queue[0][1])  # expired long ago

    await layer.group_send("queue", {"type": "item.created"})  # the first sweep: drops stale and its message
    assert stale not in layer.groups["queue"] and live in layer.groups["queue"]

    await layer.group_add("queue", stale)
    await layer.send(stale, {"type": "item.decided"})
    layer.channels[stale]._queue[0] = (0.0, layer.channels[stale]._queue[0][1])
    clock[0] += 0.5
    await layer.group_send("queue", {"type": "item.created"})
    assert stale in layer.groups["queue"]  # within the interval: not swept yet
    clock[0] += 0.6
    await asyncio.wait_for(layer.receive(live), 1)
    assert stale not in layer.groups["queue"]
    assert len(sweeps) == 2
