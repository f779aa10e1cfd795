"""The dashboard websocket, through the real ASGI stack (origin check, sessions, auth)."""

import asyncio
import json

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.contrib.sessions.models import Session

from moderation.live import consumers
from moderation.live.models import Presence
from moderation.live.sockets import (
    CLOSE_RATE_LIMITED,
    CLOSE_TOO_MANY_SOCKETS,
    FRAME_DROPS_TO_CLOSE,
    live_sockets_stats,
)
from moderation.records.claims import ItemClaim, claim_take
from moderation.tests.sockets import (  # noqa: F401 (fixtures)
    TIMEOUT,
    decide,
    fresh_layer,
    item_path,
    login,
    next_of,
    opened,
    session_of,
    silent,
    socket,
)
from reviewqueue.asgi import application

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


async def test_anonymous_socket_is_refused():
    connected, code = await socket("/ws/queue/").connect(timeout=TIMEOUT)
    assert (connected, code) == (False, 4401)


async def test_inactive_user_socket_is_refused(make_viewer, make_item, login):
    viewer = await database_sync_to_async(make_viewer)("dave")
    client = await database_sync_to_async(login)(viewer)
    viewer.is_active = False
    await database_sync_to_async(viewer.save)()
    connected, code = await socket("/ws/queue/", client).connect(timeout=TIMEOUT)
    assert (connected, code) == (False, 4401)


async def test_a_viewer_follows_the_queue_and_an_item_read_only(alice, make_viewer, make_item, login):
    viewer = await database_sync_to_async(make_viewer)("dave")
    client = await database_sync_to_async(login)(viewer)
    item = await database_sync_to_async(make_item)(title="Watched")
    queue_tab, queue_state = await opened("/ws/queue/", client)
    item_tab, item_state = await opened(item_path(item), client)
    assert queue_state["can_decide"] is False and queue_state["counts"]["pending"] == 1
    assert item_state["can_decide"] is False and item_state["item"]["status"] == "pending"

    # Listening writes nothing: no presence on open or heartbeat, and no action frame is taken.
    await item_tab.send_json_to({"type": "heartbeat"})
    assert (await next_of(item_tab, "state"))["viewers"] == []
    await item_tab.send_json_to({"type": "decide", "decision": "approve"})
    assert (await next_of(item_tab, "error"))["error"] == "unknown_type"
    assert not await database_sync_to_async(Presence.objects.exists)()

    fresh = await database_sync_to_async(make_item)(title="Fresh")
    assert (await next_of(queue_tab, "item.created"))["item"] == str(fresh.public_id)
    await decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    assert (await next_of(queue_tab, "item.decided"))["winner"] == "alice"
    assert (await next_of(item_tab, "item.decided"))["winner"] == "alice"
    await database_sync_to_async(item.refresh_from_db)()
    assert item.status == "approved"

    for tab in (queue_tab, item_tab):
        await tab.disconnect()


@pytest.mark.parametrize("origin", [(b"origin", b"http://evil.example"), None], ids=["foreign", "missing"])
async def test_socket_with_foreign_or_missing_origin_is_refused(alice, login, origin):
    client = await database_sync_to_async(login)(alice)
    connected, _ = await socket("/ws/queue/", client, origin=origin).connect(timeout=TIMEOUT)
    assert not connected


async def test_socket_for_unknown_item_is_refused(alice, login):
    client = await database_sync_to_async(login)(alice)
    connected, code = await socket("/ws/items/00000000-0000-4000-8000-000000000000/", client).connect(timeout=TIMEOUT)
    assert (connected, code) == (False, 4404)


async def test_queue_socket_starts_with_the_current_state(alice, login, make_item):
    await database_sync_to_async(make_item)()
    client = await database_sync_to_async(login)(alice)
    communicator, state = await opened("/ws/queue/", client)
    assert state["you"] == "alice" and state["can_decide"] is True
    assert state["resync_seconds"] > 0
    assert state["counts"] == {"pending": 1, "decided_today": 0}
    assert state["viewing"] == {} and state["heartbeat_seconds"] > 0
    await communicator.disconnect()


async def test_item_socket_state_says_who_decided_a_decided_item(alice, bob, login, make_item):
    item = await database_sync_to_async(make_item)(title="Old news")
    await decide(item_public_id=item.public_id, reviewer=alice, decision="reject")
    communicator, state = await opened(item_path(item), await database_sync_to_async(login)(bob))
    assert state["item"]["status"] == "rejected" and state["item"]["winner"] == "alice"
    assert 0 <= state["item"]["seconds_ago"] < 60
    await communicator.disconnect()


async def test_decision_reaches_the_item_and_the_queue_but_not_other_items(alice, bob, make_moderator, login, make_item):
    item, other = await database_sync_to_async(make_item)(title="This"), await database_sync_to_async(make_item)()
    carol, dave = await database_sync_to_async(make_moderator)("carol"), await database_sync_to_async(make_moderator)("dave")
    bob_item, _ = await opened(item_path(item), await database_sync_to_async(login)(bob))
    carol_queue, _ = await opened("/ws/queue/", await database_sync_to_async(login)(carol))
    dave_other, _ = await opened(item_path(other), await database_sync_to_async(login)(dave))

    await decide(item_public_id=item.public_id, reviewer=alice, decision="approve")

    seen_by_bob = await next_of(bob_item, "item.decided")
    assert (seen_by_bob["item"], seen_by_bob["winner"], seen_by_bob["status"]) == (str(item.public_id), "alice", "approved")
    assert seen_by_bob["seconds_ago"] == 0
    seen_by_carol = await next_of(carol_queue, "item.decided")
    assert seen_by_carol["counts"] == {"pending": 1, "decided_today": 1}
    # Then what the graph did with it, to the same pages.
    for communicator in (bob_item, carol_queue):
        applied = await next_of(communicator, "item.applied")
        assert (applied["item"], applied["status"], applied["applied"]["state"]) == (str(item.public_id), "approved", "finished")
    await silent(bob_item)  # exactly once: an item page is not also in the queue group
    await silent(dave_other)
    for communicator in (bob_item, carol_queue, dave_other):
        await communicator.disconnect()


async def test_relayed_events_take_no_trip_to_a_database_thread(alice, login, make_item, monkeypatch):
    # Channels runs close_old_connections in its sync thread before every message it dispatches:
    # for a decision seen by N queue pages, N thread hops through one thread. A relay needs none.
    import channels.consumer

    hops = []
    real = channels.consumer.aclose_old_connections

    async def counted():
        hops.append(1)
        await real()

    monkeypatch.setattr(channels.consumer, "aclose_old_connections", counted)
    queue, _ = await opened("/ws/queue/", await database_sync_to_async(login)(alice))
    hops.clear()  # the connect's own
    layer = get_channel_layer()
    for n in range(5):
        await layer.group_send("queue", {"type": "item.created", "item": f"i{n}", "title": "t", "counts": {}})
    assert [(await next_of(queue, "item.created"))["item"] for _ in range(5)] == [f"i{n}" for n in range(5)]
    assert hops == []

    await layer.group_send(f"user.{alice.pk}", {"type": "rights.changed"})  # control: a handler that reads the database
    async with asyncio.timeout(30):  # however slow the machine: the hop comes before the handler runs
        while not hops:
            await asyncio.sleep(0.01)
    assert hops == [1]
    await queue.disconnect()


async def test_loser_notice_goes_to_the_losers_tabs_only(alice, bob, make_moderator, login, make_item):
    item = await database_sync_to_async(make_item)(title="Spam?")
    carol = await database_sync_to_async(make_moderator)("carol")
    bob_client, alice_client = await database_sync_to_async(login)(bob), await database_sync_to_async(login)(alice)
    bob_item_tab, _ = await opened(item_path(item), bob_client)
    bob_queue_tab, _ = await opened("/ws/queue/", bob_client)
    alice_tab, _ = await opened(item_path(item), alice_client)
    carol_tab, _ = await opened(item_path(item), await database_sync_to_async(login)(carol))

    await decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    for tab in (bob_item_tab, bob_queue_tab, alice_tab, carol_tab):
        await next_of(tab, "item.decided")
        await next_of(tab, "item.applied")
    lost = await decide(item_public_id=item.public_id, reviewer=bob, decision="reject")
    assert not lost.won

    for tab in (bob_item_tab, bob_queue_tab):
        notice = await next_of(tab, "decision.lost")
        assert notice["message"] == "your rejection of item Spam? was not applied: alice approved it first"
        assert (notice["item"], notice["winner"], notice["requested"]) == (str(item.public_id), "alice", "reject")
    for tab in (alice_tab, carol_tab):
        await silent(tab)
    for tab in (bob_item_tab, bob_queue_tab, alice_tab, carol_tab):
        await tab.disconnect()


async def test_new_item_is_announced_to_the_queue(alice, login, make_item):
    communicator, _ = await opened("/ws/queue/", await database_sync_to_async(login)(alice))
    item = await database_sync_to_async(make_item)(title="Fresh")
    created = await next_of(communicator, "item.created")
    assert created["item"] == str(item.public_id) and created["counts"]["pending"] == 1
    await communicator.disconnect()


async def test_bad_frames_get_an_error_and_change_nothing(alice, login, make_item):
    item = await database_sync_to_async(make_item)()
    communicator, _ = await opened(item_path(item), await database_sync_to_async(login)(alice))
    presence = database_sync_to_async(lambda: list(Presence.objects.values_list("channel_name", "last_seen")))
    before = await presence()
    bad_frames = [
        ({"text_data": "{not json"}, "bad_json"),
        ({"text_data": "[1, 2]"}, "bad_json"),
        ({"text_data": '{"type": NaN}'}, "bad_json"),  # not JSON, though Python's parser takes it
        ({"text_data": json.dumps({"type": "decide", "decision": "approve"})}, "unknown_type"),
        ({"text_data": json.dumps({"no": "type"})}, "unknown_type"),
        ({"bytes_data": b"\x00\x01"}, "bad_frame"),
    ]
    for frame, error in bad_frames:
        await communicator.send_to(**frame)
        reply = await next_of(communicator, "error")
        assert reply["error"] == error and reply["message"], frame

    assert await presence() == before
    await database_sync_to_async(item.refresh_from_db)()
    assert item.is_pending
    await communicator.send_json_to({"type": "heartbeat"})  # still open and working
    assert (await next_of(communicator, "state"))["item"]["status"] == "pending"
    await communicator.disconnect()


async def test_logging_out_closes_the_sessions_sockets_and_no_event_follows(alice, bob, login, make_item):
    item = await database_sync_to_async(make_item)()
    alice_client = await database_sync_to_async(login)(alice)
    item_tab, _ = await opened(item_path(item), alice_client)
    queue_tab, _ = await opened("/ws/queue/", alice_client)

    response = await database_sync_to_async(alice_client.post)("/accounts/logout/")
    assert response.status_code == 302

    for tab in (item_tab, queue_tab):
        assert (await next_of(tab, "session.ended"))["type"] == "session.ended"
        assert await tab.receive_output(timeout=TIMEOUT) == {"type": "websocket.close", "code": 4401}
    await decide(item_public_id=item.public_id, reviewer=bob, decision="approve")
    for tab in (item_tab, queue_tab):
        assert await tab.receive_nothing(timeout=0.3)
    await item_tab.disconnect()
    await queue_tab.disconnect()
    assert not await database_sync_to_async(Presence.objects.exists)()


async def test_socket_whose_session_vanished_cannot_act(alice, login, make_item):
    """A logout the layer never announced (another process, in-memory layer) is caught on the next frame."""
    item = await database_sync_to_async(make_item)()
    alice_client = await database_sync_to_async(login)(alice)
    communicator, _ = await opened(item_path(item), alice_client)
    await database_sync_to_async(Session.objects.filter(session_key=session_of(alice_client)).delete)()
    last_seen = await database_sync_to_async(lambda: Presence.objects.get().last_seen)()

    await communicator.send_json_to({"type": "heartbeat"})
    assert (await next_of(communicator, "session.ended"))["type"] == "session.ended"
    assert await communicator.receive_output(timeout=TIMEOUT) == {"type": "websocket.close", "code": 4401}
    assert await database_sync_to_async(lambda: Presence.objects.get().last_seen)() == last_seen
    await communicator.disconnect()


async def test_socket_of_a_moderator_who_lost_the_permission_cannot_act(alice, login):
    communicator, _ = await opened("/ws/queue/", await database_sync_to_async(login)(alice))
    await database_sync_to_async(alice.groups.clear)()
    await communicator.send_json_to({"type": "heartbeat"})
    assert (await next_of(communicator, "session.ended"))["type"] == "session.ended"
    await communicator.disconnect()


class ClosingServer:
    """The application behind a server that, like daphne between a client's close frame and
    the TCP close, refuses sends on a socket before telling the application it is gone."""

    def __init__(self) -> None:
        self.closing = False
        self.refused = 0

    async def __call__(self, scope, receive, send):
        async def refusing_send(message):
            if self.closing and message["type"] == "websocket.send":
                self.refused += 1
                raise RuntimeError("Attempt to send on a closed protocol")
            await send(message)

        await application(scope, receive, refusing_send)


async def test_a_send_refused_by_a_closing_socket_is_harmless_and_clean_up_runs(alice, bob, login, make_item):
    item = await database_sync_to_async(make_item)()
    server = ClosingServer()
    closing_tab, _ = await opened(item_path(item), await database_sync_to_async(login)(alice), app=server)
    assert live_sockets_stats() == {"sockets": 1, "group_memberships": 3}

    server.closing = True
    bob_tab, _ = await opened(item_path(item), await database_sync_to_async(login)(bob))  # broadcasts presence
    await decide(item_public_id=item.public_id, reviewer=bob, decision="approve")  # broadcasts the decision
    await next_of(bob_tab, "item.decided")
    await next_of(bob_tab, "item.applied")
    assert server.refused >= 2
    await closing_tab.send_input({"type": "websocket.disconnect", "code": 1001})
    await closing_tab.wait(timeout=TIMEOUT)  # the consumer ended by itself: its disconnect ran

    viewers = database_sync_to_async(lambda: sorted(Presence.objects.values_list("user__username", flat=True)))
    assert await viewers() == ["bob"]
    assert (await next_of(bob_tab, "presence.changed"))["viewers"] == ["bob"]
    assert live_sockets_stats() == {"sockets": 1, "group_memberships": 3}  # bob's only
    await bob_tab.disconnect()
    assert live_sockets_stats() == {"sockets": 0, "group_memberships": 0}
    assert await viewers() == []


async def test_a_consumer_that_fails_still_cleans_up(alice, login, make_item, monkeypatch):
    item = await database_sync_to_async(make_item)()
    communicator, _ = await opened(item_path(item), await database_sync_to_async(login)(alice))

    def broken(**kwargs):
        raise RuntimeError("the state read failed")

    monkeypatch.setattr(consumers, "live_heartbeat", broken)
    await communicator.send_json_to({"type": "heartbeat"})
    with pytest.raises(RuntimeError, match="the state read failed"):
        await communicator.wait(timeout=TIMEOUT)
    assert not await database_sync_to_async(Presence.objects.exists)()
    assert live_sockets_stats() == {"sockets": 0, "group_memberships": 0}


@pytest.mark.parametrize(
    ("text", "error"),
    [("[" * 100_000 + "]" * 100_000, "frame_too_large"), ("[" * 3000, "bad_json"), ("{" * 2000, "bad_json")],
    ids=["100k-deep", "3k-deep-unclosed", "2k-deep-objects"],
)
async def test_deeply_nested_or_huge_frame_gets_an_error_and_the_socket_stays(alice, login, make_item, text, error):
    item = await database_sync_to_async(make_item)()
    communicator, _ = await opened(item_path(item), await database_sync_to_async(login)(alice))
    presence = database_sync_to_async(lambda: list(Presence.objects.values_list("channel_name", "last_seen")))
    before = await presence()

    await communicator.send_to(text_data=text)
    reply = await next_of(communicator, "error")
    assert reply["error"] == error and reply["message"]
    assert await presence() == before
    await communicator.send_json_to({"type": "heartbeat"})
    assert (await next_of(communicator, "state"))["item"]["status"] == "pending"
    await communicator.disconnect()
    assert not await database_sync_to_async(Presence.objects.exists)()


async def test_a_flooding_socket_is_answered_only_within_its_budget_then_closed(alice, login, make_item, settings):
    settings.LIVE_FRAME_RATE, settings.LIVE_FRAME_BURST = 0.01, 10  # no refill within the test
    item = await database_sync_to_async(make_item)()
    communicator, _ = await opened(item_path(item), await database_sync_to_async(login)(alice))
    presence = database_sync_to_async(lambda: Presence.objects.get().last_seen)

    for _ in range(10):
        await communicator.send_json_to({"type": "heartbeat"})
    for _ in range(10):
        assert (await next_of(communicator, "state"))["you"] == "alice"
    touched = await presence()
    for _ in range(FRAME_DROPS_TO_CLOSE - 1):  # over budget: dropped unanswered, before any database work
        await communicator.send_json_to({"type": "heartbeat"})
    await silent(communicator)
    assert await presence() == touched

    await communicator.send_json_to({"type": "heartbeat"})  # one drop too many: told, then closed
    reply = await next_of(communicator, "error")
    assert reply["error"] == "rate_limited" and "reconnect" in reply["message"]
    assert await communicator.receive_output(timeout=TIMEOUT) == {"type": "websocket.close", "code": CLOSE_RATE_LIMITED}
    await communicator.disconnect()
    assert not await database_sync_to_async(Presence.objects.exists)()


async def test_frames_within_the_rate_are_all_answered(alice, login, settings):
    settings.LIVE_FRAME_RATE, settings.LIVE_FRAME_BURST = 1000, 2
    communicator, _ = await opened("/ws/queue/", await database_sync_to_async(login)(alice))
    for _ in range(5):
        await communicator.send_json_to({"type": "heartbeat"})
        assert (await next_of(communicator, "state"))["you"] == "alice"
    await communicator.disconnect()


async def test_a_session_may_hold_only_its_cap_of_sockets(alice, login, make_item, settings):
    settings.LIVE_SOCKETS_PER_SESSION = 3
    item = await database_sync_to_async(make_item)()
    client, other_login = await database_sync_to_async(login)(alice), await database_sync_to_async(login)(alice)
    tabs = [(await opened(path, client))[0] for path in (item_path(item), item_path(item), "/ws/queue/")]

    refused = socket(item_path(item), client)
    assert (await refused.connect(timeout=TIMEOUT))[0]  # accepted only to be told why
    reply = await refused.receive_json_from(timeout=TIMEOUT)
    assert reply["type"] == "error" and reply["error"] == "too_many_sockets" and "3 live pages" in reply["message"]
    assert await refused.receive_output(timeout=TIMEOUT) == {"type": "websocket.close", "code": CLOSE_TOO_MANY_SOCKETS}
    await refused.disconnect()
    assert await database_sync_to_async(Presence.objects.count)() == 2

    other, _ = await opened(item_path(item), other_login)  # the cap is per login session
    await tabs.pop().disconnect()
    tabs.append((await opened(item_path(item), client))[0])  # a closed tab frees its place
    for tab in [*tabs, other]:
        await tab.disconnect()
    assert live_sockets_stats() == {"sockets": 0, "group_memberships": 0}


async def test_claims_reach_the_queue_and_leaving_the_item_page_releases_the_claim(alice, bob, login, make_item):
    item = await database_sync_to_async(make_item)()
    alice_client, bob_client = await database_sync_to_async(login)(alice), await database_sync_to_async(login)(bob)
    queue, _ = await opened("/ws/queue/", bob_client)
    await database_sync_to_async(alice_client.get)(f"/items/{item.public_id}/")  # opening the item claims it
    claimed = await next_of(queue, "item.claimed")
    assert (claimed["item"], claimed["holder"], claimed["seconds_left"]) == (str(item.public_id), "alice", 300)

    page, _ = await opened(item_path(item), alice_client)
    await page.disconnect()
    released = await next_of(queue, "item.released")
    assert released["item"] == str(item.public_id)
    assert not await database_sync_to_async(ItemClaim.objects.filter(item=item).exists)()

    # A page that closes after its own reload claimed the item again leaves that new claim alone.
    stale, _ = await opened(item_path(item), alice_client)
    await database_sync_to_async(claim_take)(item=item, user=alice)
    await next_of(queue, "item.claimed")
    await stale.disconnect()
    await silent(queue)
    assert await database_sync_to_async(ItemClaim.objects.filter(item=item, user=alice).exists)()
    await queue.disconnect()


async def test_a_team_members_queue_hears_its_teams_items_and_those_of_no_team_never_another_teams(payments, alice, login):
    """A member's socket joined the supervisors' group too (every team's items went to it): a shop item's
    title reached every payments member."""
    from moderation.policies.models import Team
    from moderation.review.items import item_create

    tab, _ = await opened("/ws/queue/", await database_sync_to_async(login)(alice))

    def create():
        Team.objects.create(slug="shop", name="Shop")
        for title, team in (("Shop secret", "shop"), ("Payments refund", "payments"), ("No team post", None)):
            item_create(title=title, body="Text.", source="src", team=team)

    await database_sync_to_async(create)()
    heard = [(await next_of(tab, "item.created"))["title"] for _ in range(2)]
    assert heard == ["Payments refund", "No team post"]
    assert await tab.receive_nothing(timeout=0.5)
    await tab.disconnect()
