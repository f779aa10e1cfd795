"""The resume lock: at most one resume of a graph thread in flight, across threads and processes.

LangGraph lets two concurrent resumes of one thread both run (its checkpoints fork), and a
resume may take seconds, so this is not a row lock: nothing a reviewer needs waits behind it.
``thread_resume_lock`` holds, in order, this process's per-key lock
(``moderation.core.locks``), then a cross-process one: a PostgreSQL session advisory lock on
the thread's name, or on SQLite an exclusive ``flock`` on a file under ``VAR_DIR/locks``. Both
die with a killed holder.

A PostgreSQL session lock is also lost when its backend is terminated while the holder lives
on, so the holder's graph reads and writes its checkpoints over that same connection only: a
holder that lost the lock fails at its next checkpoint (retried by
``moderation.review.apply``) instead of writing beside the next holder.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection

from moderation.core.checkpointer import checkpointer_pinned, checkpointer_pool
from moderation.core.locks import LockTimeout, item_lock

_POLL_SECONDS = 0.02


@contextmanager
def thread_resume_lock(thread_id: str, *, timeout: float) -> Iterator[None]:
    """Hold ``thread_id``'s resume lock; ``LockTimeout`` after ``timeout`` seconds of waiting."""
    deadline = time.monotonic() + timeout
    with item_lock(f"resume:{thread_id}", timeout=timeout):
        if connection.vendor == "postgresql":
            with _advisory(thread_id, deadline):
                yield
        else:
            with _flock(thread_id, deadline):
                yield


def _key(thread_id: str) -> int:
    return int.from_bytes(hashlib.sha256(thread_id.encode()).digest()[:8], "big", signed=True)


@contextmanager
def _advisory(thread_id: str, deadline: float) -> Iterator[None]:
    """Held on a connection of the checkpointer's pool, which the holder's graph runs then use alone
    (``checkpointer_pinned``): losing the lock (its backend terminated) loses them their writes too."""
    key = _key(thread_id)
    pool = checkpointer_pool()
    conn = _advisory_take(pool, key, thread_id, deadline)
    try:
        with checkpointer_pinned(conn):
            yield
    finally:
        with contextlib.suppress(psycopg.OperationalError):  # its session is gone, and the lock with it
            conn.execute("SELECT pg_advisory_unlock(%s)", [key])
        pool.putconn(conn)  # a broken one is discarded


def _advisory_take(pool: Any, key: int, thread_id: str, deadline: float) -> Any:
    """A pooled connection holding the lock ``key``; one that turns out dead is given back and another tried."""
    while True:
        conn = pool.getconn()
        try:
            while not conn.execute("SELECT pg_try_advisory_lock(%s) AS held", [key]).fetchone()["held"]:
                if time.monotonic() >= deadline:
                    raise LockTimeout(f"resume lock of {thread_id} still held")
                time.sleep(_POLL_SECONDS)
            return conn
        except psycopg.OperationalError:
            pool.putconn(conn)
            if time.monotonic() >= deadline:
                raise
        except BaseException:
            pool.putconn(conn)
            raise


@contextmanager
def _flock(thread_id: str, deadline: float) -> Iterator[None]:
    directory = settings.VAR_DIR / "locks"
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / hashlib.sha256(thread_id.encode()).hexdigest()[:32], os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(f"resume lock of {thread_id} still held") from None
                time.sleep(_POLL_SECONDS)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock
