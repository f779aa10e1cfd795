"""Waiting for work to settle on a machine that may be busy: on progress, not on a clock.

A loaded machine makes work slow, not stuck. A wait with a fixed deadline fails a run
whose work was still moving; this one gives up only when nothing it reads has changed
for a while. The lab waits this way for applies before judging a race, and so do the
tests that wait for real servers and workers (``moderation.tests.real_server``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def progress_wait(read: Callable[[], T], *, done: Callable[[T], bool], stall: float, poll: float = 0.1) -> T:
    """Read until ``done`` holds or nothing moved for ``stall`` seconds; the last value read.

    Any change in the value read restarts the ``stall`` clock. The caller judges the
    value returned (``done`` or not), which then says where the work stopped.
    """
    value = read()
    moved = time.monotonic()
    while not done(value) and time.monotonic() - moved < stall:
        time.sleep(poll)
        last, value = value, read()
        if value != last:
            moved = time.monotonic()
    return value
