"""Per-item in-process locks.

One lock per item key, created on first use and dropped when nobody holds or waits
for it, so the registry stays as small as the number of items being decided right
now. The registry's own lock is held only to look a lock up, never while deciding.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class LockTimeout(Exception):
    pass


class _Entry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


_registry: dict[str, _Entry] = {}
_registry_lock = threading.Lock()


@contextmanager
def item_lock(key: str, *, timeout: float) -> Iterator[None]:
    """Hold the lock for one item key; raise LockTimeout after ``timeout`` seconds."""
    with _registry_lock:
        entry = _registry.get(key)
        if entry is None:
            entry = _registry[key] = _Entry()
        entry.users += 1
    try:
        if not entry.lock.acquire(timeout=timeout):
            raise LockTimeout(key)
        try:
            yield
        finally:
            entry.lock.release()
    finally:
        with _registry_lock:
            entry.users -= 1
            if entry.users == 0:
                del _registry[key]
