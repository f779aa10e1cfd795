"""Who is viewing which item: the store (rows, heartbeats, expiry) and the live join/leave."""

from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.test import Client
from django.utils import timezone

from moderation.live.models import Presence
from moderation.live.presence import (
    presence_by_item,
    presence_join,
    presence_leave,
    presence_touch,
    presence_ttl,
    presence_viewers,
)
from moderation.tests.sockets import TIMEOUT, fresh_layer, item_path, next_of, opened  # noqa: F401

# The upsert and the expiry queries are the parts that differ between SQLite and PostgreSQL.
pytestmark = pytest.mark.postgres_variant


def _public_id(item) -> str:
    return str(item.public_id)


@pytest.mark.django_db
def test_viewers_are_listed_once_each_and_sorted(alice, bob, make_item):
    item = make_item()
    presence_join(user_id=bob.pk, item_public_id=_public_id(item), channel_name="tab-b")
    presence_join(user_id=alice.pk, item_public_id=_public_id(item), channel_name="tab-a1")
    presence_join(user_id=alice.pk, item_public_id=_public_id(item), channel_name="tab-a2")
    assert presence_viewers(item_public_id=_public_id(item)) == ["alice", "bob"]
    presence_leave(channel_name="tab-a1")  # alice still has another tab open
    assert presence_viewers(item_public_id=_public_id(item)) == ["alice", "bob"]
    presence_leave(channel_name="tab-a2")
    assert presence_viewers(item_public_id=_public_id(item)) == ["bob"]
    presence_leave(channel_name="tab-unknown")  # a second goodbye is harmless


@pytest.mark.django_db
def test_a_silent_viewer_expires_and_a_heartbeat_keeps_one(alice, bob, make_item):
    item = make_item()
    long_ago = timezone.now() - presence_ttl() - timedelta(seconds=1)
    presence_join(user_id=alice.pk, item_public_id=_public_id(item), channel_name="dead-tab", now=long_ago)
    presence_join(user_id=bob.pk, item_public_id=_public_id(item), channel_name="live-tab", now=long_ago)
    presence_touch(user_id=bob.pk, item_public_id=_public_id(item), channel_name="live-tab")

    assert presence_viewers(item_public_id=_public_id(item)) == ["bob"]
    assert presence_by_item() == {_public_id(item): ["bob"]}


@pytest.mark.django_db
def test_joining_purges_expired_rows(alice, bob, make_item):
    item = make_item()
    presence_join(
        user_id=alice.pk,
        item_public_id=_public_id(item),
        channel_name="dead-tab",
        now=timezone.now() - presence_ttl() - timedelta(seconds=1),
    )
    presence_join(user_id=bob.pk, item_public_id=_public_id(item), channel_name="new-tab")
    assert list(Presence.objects.values_list("channel_name", flat=True)) == ["new-tab"]


@pytest.mark.django_db
def test_heartbeat_after_expiry_rejoins(alice, make_item):
    item = make_item()
    presence_join(
        user_id=alice.pk,
        item_public_id=_public_id(item),
        channel_name="tab",
        now=timezone.now() - presence_ttl() - timedelta(seconds=1),
    )
    presence_touch(user_id=alice.pk, item_public_id=_public_id(item), channel_name="tab")
    assert presence_viewers(item_public_id=_public_id(item)) == ["alice"]
    assert Presence.objects.count() == 1


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_join_and_leave_are_pushed_to_the_item_and_the_queue(alice, bob, make_moderator, make_item):
    item, other = await database_sync_to_async(make_item)(), await database_sync_to_async(make_item)()
    carol = await database_sync_to_async(make_moderator)("carol")
    clients = {}
    for user in (alice, bob, carol):
        clients[user.username] = Client()
        await database_sync_to_async(clients[user.username].force_login)(user)

    alice_tab, state = await opened(item_path(item), clients["alice"])
    assert state["viewers"] == ["alice"]
    carol_queue, state = await opened("/ws/queue/", clients["carol"])
    assert state["viewing"] == {_public_id(item): ["alice"]}

    bob_tab, state = await opened(item_path(item), clients["bob"])
    assert state["viewers"] == ["alice", "bob"]
    for tab in (alice_tab, carol_queue):
        joined = await next_of(tab, "presence.changed")
        if joined["viewers"] == ["alice"]:  # alice's own join may still be in flight
            joined = await next_of(tab, "presence.changed")
        assert (joined["item"], joined["viewers"]) == (_public_id(item), ["alice", "bob"])

    await bob_tab.disconnect()
    for tab in (alice_tab, carol_queue):
        left = await next_of(tab, "presence.changed")
        assert (left["item"], left["viewers"]) == (_public_id(item), ["alice"])

    # Someone on another item is not told about this one.
    other_tab, _ = await opened(item_path(other), clients["bob"])
    await alice_tab.disconnect()
    frames = []
    while not await other_tab.receive_nothing(timeout=0.3):
        frames.append(await other_tab.receive_json_from(timeout=TIMEOUT))
    assert all(frame["item"] == _public_id(other) for frame in frames)
    await other_tab.disconnect()
    await carol_queue.disconnect()
    assert not await database_sync_to_async(Presence.objects.exists)()


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_heartbeat_refreshes_presence_and_returns_state(alice, make_item):
    item = await database_sync_to_async(make_item)()
    client = Client()
    await database_sync_to_async(client.force_login)(alice)
    tab, _ = await opened(item_path(item), client)
    stale = timezone.now() - presence_ttl() + timedelta(seconds=5)
    await database_sync_to_async(Presence.objects.update)(last_seen=stale)

    await tab.send_json_to({"type": "heartbeat"})
    state = await next_of(tab, "state")
    assert state["viewers"] == ["alice"]
    assert await database_sync_to_async(lambda: Presence.objects.get().last_seen)() > stale
    await tab.disconnect()
