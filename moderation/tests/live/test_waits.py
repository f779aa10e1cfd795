"""The caps on long-poll waits (moderation.live.waits): per API client and per process, counted while held."""

import pytest
from prometheus_client import REGISTRY

from moderation.live.waits import WAIT_RETRY_AFTER_SECONDS, WaitRefused, wait_slot_hold, waits_stats


def test_a_client_past_its_cap_is_429_and_the_process_past_its_cap_is_503(settings):
    settings.LONGPOLL_WAITS_PER_CLIENT, settings.LONGPOLL_WAITS_PER_PROCESS = 2, 3
    with wait_slot_hold(client_id=1), wait_slot_hold(client_id=1):
        with pytest.raises(WaitRefused) as own, wait_slot_hold(client_id=1):
            pass
        assert (own.value.status, own.value.code, own.value.retry_after) == (429, "too_many_waits", WAIT_RETRY_AFTER_SECONDS)
        assert "LONGPOLL_WAITS_PER_CLIENT" in str(own.value)
        with wait_slot_hold(client_id=2):
            assert waits_stats() == {"waits": 3, "clients": 2}
            with pytest.raises(WaitRefused) as full, wait_slot_hold(client_id=3):
                pass
            assert (full.value.status, full.value.code) == (503, "busy")
            assert "LONGPOLL_WAITS_PER_PROCESS" in str(full.value)
    assert waits_stats() == {"waits": 0, "clients": 0}


def test_a_wait_that_raises_gives_its_place_back(settings):
    settings.LONGPOLL_WAITS_PER_CLIENT = 1
    with pytest.raises(RuntimeError), wait_slot_hold(client_id=1):
        raise RuntimeError("the channel layer went away")
    with wait_slot_hold(client_id=1):
        assert waits_stats() == {"waits": 1, "clients": 1}


def test_no_caps(settings):
    settings.LONGPOLL_WAITS_PER_CLIENT = settings.LONGPOLL_WAITS_PER_PROCESS = 0
    holds = [wait_slot_hold(client_id=1) for _ in range(500)]
    for hold in holds:
        hold.__enter__()
    assert waits_stats() == {"waits": 500, "clients": 1}
    for hold in holds:
        hold.__exit__(None, None, None)


def test_a_held_wait_is_an_open_long_poll_in_the_metrics_and_a_refused_one_is_not(settings):
    settings.LONGPOLL_WAITS_PER_CLIENT, settings.LONGPOLL_WAITS_PER_PROCESS = 1, 0

    def open_long_polls() -> float:
        return REGISTRY.get_sample_value("reviewqueue_open_connections", {"kind": "long_poll"}) or 0.0

    before = open_long_polls()
    with wait_slot_hold(client_id=1):
        assert open_long_polls() == before + 1
        with pytest.raises(WaitRefused), wait_slot_hold(client_id=1):
            pass
        assert open_long_polls() == before + 1
    assert open_long_polls() == before
