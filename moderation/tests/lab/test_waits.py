"""progress_wait (moderation.lab.waits), on a clock of the test's own (no sleeping)."""

from __future__ import annotations

import pytest

from moderation.lab import waits
from moderation.lab.waits import progress_wait


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(waits, "time", fake)
    return fake


def test_work_that_keeps_moving_is_waited_for_well_past_the_stall(clock):
    # One step every 4 s against a 5 s stall: 100 steps take 400 s, and every one is waited for.
    def read() -> int:
        return int(clock.now // 4)

    assert progress_wait(read, done=lambda step: step >= 100, stall=5) == 100
    assert clock.now >= 400


def test_work_that_stops_moving_ends_the_wait_one_stall_later_with_where_it_stopped(clock):
    def read() -> int:
        return min(int(clock.now), 3)

    assert progress_wait(read, done=lambda step: step >= 10, stall=5) == 3
    assert 8 <= clock.now < 8.5


def test_work_already_done_is_not_waited_for(clock):
    assert progress_wait(lambda: "settled", done=lambda value: value == "settled", stall=5) == "settled"
    assert clock.now == 0
