"""Live events: sent only after commit, to the right groups, and never at a decision's expense."""

import asyncio
import logging
import socket
import threading

import pytest
from channels.layers import InMemoryChannelLayer
from django.db import connection, transaction
from django.urls import reverse

from moderation.core.faults import fault_inject
from moderation.items.models import ItemStatus
from moderation.lab.waits import progress_wait
from moderation.records import events
from moderation.review.decisions import item_decide
from moderation.review.items import item_create
from moderation.tests.graphs_support import ORDER_ARGS, REFUND_GRAPH


def pushes_in_flight() -> int:
    """Pushes handed to the server loop and not finished yet."""
    with events._in_flight_lock:
        return len(events._in_flight)


class RecordingLayer(InMemoryChannelLayer):
    """Keeps every group_send, so a test can see what went out and when."""

    sent: list[tuple[str, dict]] = []

    async def group_send(self, group, message):
        RecordingLayer.sent.append((group, message))
        await super().group_send(group, message)


class HangingLayer(InMemoryChannelLayer):
    """A layer that never answers, like a Redis behind a black hole; counts the sends given up on it."""

    given_up = 0

    async def group_send(self, group, message):
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            HangingLayer.given_up += 1
            raise


class HeldLayer(InMemoryChannelLayer):
    """A layer whose sends hang until the test releases them; counts the sends that ended."""

    release = threading.Event()
    ended = 0

    async def group_send(self, group, message):
        try:
            while not HeldLayer.release.is_set():
                await asyncio.sleep(0.01)
        finally:
            HeldLayer.ended += 1


@pytest.fixture
def hold_pushes(settings, monkeypatch):
    """Call it to make every later push hang until ``HeldLayer.release`` is set (at the latest when the test ends)."""

    def hold() -> type[HeldLayer]:
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"{__name__}.HeldLayer"}}
        # Far longer than any test here runs: only the test ends these sends.
        monkeypatch.setattr(events, "SEND_TIMEOUT_SECONDS", 300)
        return HeldLayer

    monkeypatch.setattr(HeldLayer, "release", threading.Event())
    monkeypatch.setattr(HeldLayer, "ended", 0)
    try:
        yield hold
    finally:
        HeldLayer.release.set()


@pytest.fixture
def recorded(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"{__name__}.RecordingLayer"}}
    RecordingLayer.sent = []
    return RecordingLayer.sent


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.django_db(transaction=True)
def test_decision_events_wait_for_the_commit(recorded, alice, make_item):
    item = make_item(title="Later")
    recorded.clear()
    with transaction.atomic():
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
        assert recorded == []
    groups = [group for group, _ in recorded]
    # The decision, then what its graph did (applied in this process, after the guard's locks).
    assert groups == [events.QUEUE_GROUP, events.item_group(str(item.public_id))] * 2
    assert [message["type"] for _, message in recorded] == ["item.decided"] * 2 + ["item.applied"] * 2
    assert recorded[2][1]["applied"]["state"] == "finished"
    message = recorded[0][1]
    assert message["type"] == "item.decided"
    assert (message["winner"], message["status"], message["title"]) == ("alice", "approved", "Later")
    assert message["counts"] == {"pending": 0, "decided_today": 1}


@pytest.mark.django_db(transaction=True)
def test_rolled_back_decision_sends_nothing(recorded, alice, make_item):
    item = make_item()
    recorded.clear()
    with pytest.raises(RuntimeError), transaction.atomic():
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
        raise RuntimeError("the surrounding work failed")
    assert recorded == []


@pytest.mark.django_db(transaction=True)
def test_loser_notice_goes_to_the_losers_user_group_only(recorded, alice, bob, make_item):
    item = make_item(title="Cat video")
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    recorded.clear()
    item_decide(item_public_id=item.public_id, reviewer=bob, decision="reject")
    assert [group for group, _ in recorded] == [events.user_group(bob.pk)]
    notice = recorded[0][1]
    assert notice["type"] == "decision.lost" and notice["requested"] == "reject"
    assert notice["message"] == "your rejection of item Cat video was not applied: alice approved it first"


@pytest.mark.django_db(transaction=True)
def test_new_item_is_announced_to_the_queue_after_commit(recorded):
    with transaction.atomic():
        item = item_create(title="New", body="Hello there.", source="test")
        assert recorded == []
    assert recorded == [
        (
            events.QUEUE_GROUP,
            {"type": "item.created", "item": str(item.public_id), "title": "New", "counts": {"pending": 1, "decided_today": 0}},
        )
    ]


def test_session_groups_do_not_reveal_the_session_key():
    group = events.session_group("abcdefghijklmnopqrstuvwxyz012345")
    assert group.startswith("session.") and "abcdefgh" not in group and len(group) < 100


@pytest.mark.django_db(transaction=True)
def test_unreachable_redis_layer_is_logged_and_decisions_still_win_or_lose(settings, client, alice, bob, make_item, caplog):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [{"address": f"redis://127.0.0.1:{_closed_port()}/0", "socket_timeout": 1}]},
        }
    }
    caplog.set_level(logging.ERROR, logger="moderation.records.events")
    item = make_item(title="Offline")  # item.created cannot be pushed either; the item exists anyway
    url = reverse("moderation:item", args=[item.public_id])

    client.force_login(alice)
    won = client.post(url, {"decision": "approve"})
    assert won.status_code in (302, 303)
    client.force_login(bob)
    lost = client.post(url, {"decision": "reject"})
    assert lost.status_code == 409
    html = lost.content.decode()
    assert 'id="lost-notice"' in html and "Already reviewed by alice" in html

    item.refresh_from_db()
    assert item.status == ItemStatus.APPROVED and item.decided_by == alice
    failed = {record.getMessage() for record in caplog.records if record.name == "moderation.records.events"}
    assert "could not push item.created to queue" in failed
    assert "could not push item.decided to queue" in failed
    assert f"could not push decision.lost to user.{bob.pk}" in failed


@pytest.mark.timeout(60)  # the layer hangs for an hour: a send not given up fails here
@pytest.mark.django_db(transaction=True)
def test_hanging_layer_delays_a_decision_by_at_most_the_send_timeout(settings, monkeypatch, alice, make_item, caplog):
    item = make_item()
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"{__name__}.HangingLayer"}}
    monkeypatch.setattr(events, "SEND_TIMEOUT_SECONDS", 0.2)
    monkeypatch.setattr(HangingLayer, "given_up", 0)
    outcome = item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject")
    assert outcome.won
    # Every send (the queue's and the item's group, for the decision and its apply) was given up, not waited out.
    failed = [record for record in caplog.records if record.getMessage().startswith("could not push")]
    assert HangingLayer.given_up == len(failed) >= 2, (HangingLayer.given_up, [r.getMessage() for r in failed])
    assert any("could not push item.decided" in record.getMessage() for record in caplog.records)
    assert any("could not push item.applied" in record.getMessage() for record in caplog.records)


@pytest.fixture
def server_loop():
    """A running event loop registered as the server's, as the ASGI application does in daphne."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    events.server_loop_register(loop)
    try:
        yield loop
    finally:
        events.server_loop_register(None)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)


@pytest.mark.django_db(transaction=True)
def test_the_next_reviewer_never_waits_for_a_hanging_push(hold_pushes, alice, bob, make_item):
    """Pushes run after the item lock is released: the second reviewer takes the lock while
    the first one's push still hangs."""
    item = make_item()
    held_layer = hold_pushes()
    ended_at_lock: list[int] = []  # sends ended when each reviewer took the item lock
    outcomes = []
    barrier = threading.Barrier(2)

    def decide(reviewer, decision):
        barrier.wait(timeout=30)
        outcomes.append(item_decide(item_public_id=item.public_id, reviewer=reviewer, decision=decision))

    with fault_inject("after_item_lock", lambda key: ended_at_lock.append(held_layer.ended)):
        racers = [threading.Thread(target=decide, args=args) for args in ((alice, "approve"), (bob, "reject"))]
        for racer in racers:
            racer.start()
        try:
            # Until both took the lock, or one gave up waiting for it ("busy", while the other's push hung).
            progress_wait(
                lambda: (len(ended_at_lock), sum(not racer.is_alive() for racer in racers)),
                done=lambda seen: seen[0] == 2 or seen[1] > 0,
                stall=60,
            )
        finally:
            held_layer.release.set()
            for racer in racers:
                racer.join()
    assert sorted(outcome.won for outcome in outcomes) == [False, True]
    # Old code: the first holder's push ran under the lock, and the second waited it out.
    assert ended_at_lock == [0, 0], ended_at_lock


@pytest.mark.django_db(transaction=True)
def test_in_a_server_process_a_decision_does_not_wait_for_the_push(hold_pushes, server_loop, alice, make_item):
    item = make_item()
    held_layer = hold_pushes()
    outcomes = []
    decision = threading.Thread(
        target=lambda: (
            outcomes.append(item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")),
            connection.close(),
        )
    )
    decision.start()
    # A decision that waited for its pushes would wait until they are released: nothing would move.
    progress_wait(decision.is_alive, done=lambda alive: not alive, stall=30)
    assert outcomes and outcomes[0].won, "the decision waited for its pushes"
    # Answered while both its pushes (the decision's and its apply's) still hang: it waited for neither.
    assert (pushes_in_flight(), held_layer.ended) == (2, 0)
    held_layer.release.set()
    decision.join()
    assert progress_wait(pushes_in_flight, done=lambda left: left == 0, stall=30) == 0


@pytest.mark.django_db(transaction=True)
def test_in_a_server_process_a_hanging_push_is_given_up_and_logged(settings, server_loop, monkeypatch, alice, make_item, caplog):
    item = make_item()
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"{__name__}.HangingLayer"}}
    monkeypatch.setattr(events, "SEND_TIMEOUT_SECONDS", 0.2)
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve").won
    assert progress_wait(pushes_in_flight, done=lambda left: left == 0, stall=30) == 0
    assert any("could not push item.decided" in record.getMessage() for record in caplog.records)
    assert any("could not push item.applied" in record.getMessage() for record in caplog.records)


def test_pushes_waiting_on_a_hanging_layer_are_bounded(settings, server_loop, monkeypatch, caplog):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"{__name__}.HangingLayer"}}
    monkeypatch.setattr(events, "MAX_PUSHES_IN_FLIGHT", 5)
    for n in range(8):
        events.rights_changed_broadcast(session_key=f"session-{n}")
    assert pushes_in_flight() == 5
    assert sum("dropped rights.changed" in record.getMessage() for record in caplog.records) == 3


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("test_graphs")
def test_an_edits_decision_event_says_what_it_changed(recorded, alice):
    item = item_create(title="Refund", body="b", source="agent", graph=REFUND_GRAPH, graph_input={})
    recorded.clear()
    edit = {"type": "edit", "edited_action": {"name": "refund", "args": {**ORDER_ARGS, "amount": 80}}}
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decisions=[edit]).won
    decided = next(message for _, message in recorded if message["type"] == "item.decided")
    assert decided["edits"] == [
        {"index": 0, "action": "refund", "changes": [{"arg": "amount", "change": "changed", "before": 120, "after": 80}]}
    ]
    assert decided["what"] == "edited refund (amount 120 → 80)"
