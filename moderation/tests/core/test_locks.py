import threading
import time
from contextlib import contextmanager

import pytest

from moderation.core import locks
from moderation.core.locks import LockTimeout, item_lock


def item_lock_count() -> int:
    """How many item locks the process's registry holds (each lock is dropped with its last user)."""
    with locks._registry_lock:
        return len(locks._registry)


# How long another thread holds a key at most; every wait in these tests is judged against it.
HOLD = 5.0


@contextmanager
def _held_elsewhere(key: str):
    """Hold ``key`` in another thread for the duration of the block (at most HOLD seconds)."""
    held, release = threading.Event(), threading.Event()

    def holder():
        with item_lock(key, timeout=1):
            held.set()
            release.wait(HOLD)

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(5)
    try:
        yield
    finally:
        release.set()
        thread.join()


def test_same_key_is_exclusive_and_times_out():
    with _held_elsewhere("x"):
        start = time.monotonic()
        with pytest.raises(LockTimeout), item_lock("x", timeout=0.2):
            pass
        # It waited its timeout, and gave up long before the holder let go.
        assert 0.15 < time.monotonic() - start < HOLD / 2


def test_other_keys_do_not_wait_for_a_held_key():
    # Its timeout runs out before the hold does: taking the lock at all shows it did not wait for "slow".
    with _held_elsewhere("slow"), item_lock("fast", timeout=HOLD / 2):
        pass


def test_registry_forgets_locks_nobody_uses():
    before = item_lock_count()
    with item_lock("ephemeral", timeout=1):
        assert item_lock_count() == before + 1
    assert item_lock_count() == before


def test_registry_is_cleaned_after_a_timeout_too():
    before = item_lock_count()
    with item_lock("k", timeout=1), pytest.raises(LockTimeout), item_lock("k", timeout=0.01):
        pass
    assert item_lock_count() == before
