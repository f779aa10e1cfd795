"""The live rules that need no socket: the frame budget, the per-session socket cap, the state snapshot."""

import pytest
from django.core.cache import cache
from django.test import override_settings

from moderation.live.sockets import (
    FRAME_DROPS_TO_CLOSE,
    live_frame_admit,
    live_frame_budget_new,
    live_socket_hold,
    live_socket_release,
    live_state_read,
)
from moderation.review.apply import item_apply
from moderation.review.decisions import item_decide


@pytest.fixture(autouse=True)
def clean_cache():
    cache.clear()
    yield
    cache.clear()


def test_budget_admits_the_burst_then_the_rate_and_closes_a_flood_once(settings):
    settings.LIVE_FRAME_RATE, settings.LIVE_FRAME_BURST = 2, 3
    budget = live_frame_budget_new(now=0.0)
    assert [live_frame_admit(budget=budget, now=0.0) for _ in range(4)] == ["admit"] * 3 + ["drop"]
    assert live_frame_admit(budget=budget, now=0.5) == "admit"  # refilled at 2 per second
    verdicts = [live_frame_admit(budget=budget, now=0.5) for _ in range(FRAME_DROPS_TO_CLOSE + 5)]
    assert verdicts.count("close") == 1 and verdicts[FRAME_DROPS_TO_CLOSE - 1] == "close"
    assert live_frame_admit(budget=budget, now=10.0) == "admit"  # a page that calms down is served again


def test_budget_off(settings):
    settings.LIVE_FRAME_RATE = 0
    budget = live_frame_budget_new(now=0.0)
    assert {live_frame_admit(budget=budget, now=0.0) for _ in range(1000)} == {"admit"}


def test_socket_cap_counts_per_session_and_forgets_sockets_that_stop_heartbeating(settings):
    settings.LIVE_SOCKETS_PER_SESSION = 2
    # An entry outlives its socket's close for missed heartbeats by a heartbeat interval.
    ttl = settings.LIVE_SILENT_SECONDS + settings.LIVE_HEARTBEAT_SECONDS
    assert live_socket_hold(session_key="s1", channel_name="a", now=0)
    assert live_socket_hold(session_key="s1", channel_name="b", now=0)
    assert not live_socket_hold(session_key="s1", channel_name="c", now=1)
    assert live_socket_hold(session_key="s2", channel_name="c", now=1)  # another login
    assert live_socket_hold(session_key="s1", channel_name="a", now=1)  # a heartbeat of a counted socket
    live_socket_release(session_key="s1", channel_name="b")
    assert live_socket_hold(session_key="s1", channel_name="c", now=2)
    # "a" and "c" died with their process, no release and no close: after their entries' lifetime they stop counting.
    assert not live_socket_hold(session_key="s1", channel_name="d", now=ttl + 0.5)
    assert live_socket_hold(session_key="s1", channel_name="d", now=2 + ttl + 1)


def test_socket_cap_off(settings):
    settings.LIVE_SOCKETS_PER_SESSION = 0
    assert all(live_socket_hold(session_key="s", channel_name=str(n)) for n in range(100))


@pytest.mark.django_db
def test_an_item_state_says_while_its_decision_is_being_applied(alice, make_item):
    """A page rendered "applying…" whose socket came after the worker's item.applied learns from this it is over."""
    item = make_item()

    def state() -> dict:
        return live_state_read(username="alice", item_public_id=str(item.public_id), can_decide=True)["item"]

    assert "apply_state" not in state()
    with override_settings(REVIEWQUEUE_APPLY_INLINE=False):
        assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve").won
    assert state()["apply_state"] == "applying"
    item_apply(item_id=item.pk)
    assert "apply_state" not in state()
