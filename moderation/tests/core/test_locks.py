import threading
import time
from contextlib import contextmanager

import pytest

from moderation.core.locks import LockTimeout, item_lock, item_lock_count


@contextmanager
def _held_elsewhere(key: str):
    """Hold ``key`` in another thread for the duration of the block."""
    held, release = threading.Event(), threading.Event()

    def holder():
        with item_lock(key, timeout=1):
            held.set()
            release.wait(5)

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
        with pytest.raises(LockTimeout):
            with item_lock("x", timeout=0.2):
                pass
        assert 0.15 < time.monotonic() - start < 2


def test_other_keys_do_not_wait_for_a_held_key():
    with _held_elsewhere("slow"):
        start = time.monotonic()
        with item_lock("fast", timeout=0.5):
            pass
        assert time.monotonic() - start < 0.1


def test_registry_forgets_locks_nobody_uses():
    before = item_lock_count()
    with item_lock("ephemeral", timeout=1):
        assert item_lock_count() == before + 1
    assert item_lock_count() == before


def test_registry_is_cleaned_after_a_timeout_too():
    before = item_lock_count()
    with item_lock("k", timeout=1):
        with pytest.raises(LockTimeout):
            with item_lock("k", timeout=0.01):
                pass
    assert item_lock_count() == before
