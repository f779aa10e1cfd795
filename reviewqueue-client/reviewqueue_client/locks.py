"""Per-thread locks for resuming an agent exactly once: in one process, on one host, across hosts.

A ``ThreadLock`` is any ``thread_id -> context manager``. The glue's check-then-resume
(``reviewqueue_client.langgraph.decision_resume``) holds it while it re-reads the thread's
pending interrupts and resumes; it must exclude every process that resumes from the same
checkpointer, so ``checkpointer_thread_lock`` picks the lock the checkpointer can share:

- ``SqliteSaver`` on a file: ``flock`` on a lock file per thread beside the database (every
  process that opens that database is on this host, so they all see the same lock files);
- ``PostgresSaver``: a PostgreSQL session advisory lock keyed by the thread id, taken with
  ``pg_try_advisory_lock`` on the checkpointer's own connection (a pooled one held for the
  resume: give the pool room for one more connection per concurrent resume), whatever its
  row factory (``from_conn_string``, a connection or a ``ConnectionPool`` with ``dict_row``);
- anything else (``InMemorySaver``): a lock in this process, all such a checkpointer is shared by.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

ThreadLock = Callable[[str], AbstractContextManager[Any]]

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()
_ADVISORY_POLL = 0.02  # seconds between tries of a held advisory lock (a resume holds it for a graph step)


@contextmanager
def local_thread_lock(thread_id: str) -> Iterator[None]:
    """One lock per thread id in this process: enough for a single agent process."""
    with _locks_guard:
        lock = _locks.setdefault(thread_id, threading.Lock())
    with lock:
        yield


def file_thread_lock(directory: str) -> ThreadLock:
    """A per-thread lock shared by the processes (and threads: each acquisition opens its own file) of one host."""
    os.makedirs(directory, exist_ok=True)

    @contextmanager
    def lock(thread_id: str) -> Iterator[None]:
        name = hashlib.sha256(thread_id.encode()).hexdigest()[:32]  # any thread id, a safe file name
        with open(os.path.join(directory, f"{name}.lock"), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    return lock


def postgres_thread_lock(saver: Any) -> ThreadLock:
    """A per-thread lock across every process on ``saver``'s PostgreSQL database (a session advisory lock)."""

    @contextmanager
    def lock(thread_id: str) -> Iterator[None]:
        key = int.from_bytes(
            hashlib.blake2b(f"reviewqueue_client:{thread_id}".encode(), digest_size=8).digest(), "big", signed=True
        )
        # Threads of this process share a session (the same session may take an advisory lock
        # twice), so they queue on the local lock first.
        with local_thread_lock(thread_id), _session(saver) as run:
            while not run("SELECT pg_try_advisory_lock(%s)", key):
                time.sleep(_ADVISORY_POLL)
            try:
                yield
            finally:
                run("SELECT pg_advisory_unlock(%s)", key)

    return lock


@contextmanager
def _session(saver: Any) -> Iterator[Callable[..., Any]]:
    """One PostgreSQL session for the whole lock: a pooled connection held, or the saver's own connection.

    Its queries read their one value from a cursor of tuples: LangGraph's documented savers
    make their connections return dicts (``row_factory=dict_row``), a caller's may return anything.
    """
    from psycopg.rows import tuple_row

    def value(conn: Any, sql: str, args: tuple[Any, ...]) -> Any:
        with conn.cursor(row_factory=tuple_row) as cursor:
            return cursor.execute(sql, args).fetchone()[0]

    conn = saver.conn
    if hasattr(conn, "getconn"):  # a psycopg_pool pool
        with conn.connection() as pinned:
            yield lambda sql, *args: value(pinned, sql, args)
        return

    def run(sql: str, *args: Any) -> Any:
        with saver.lock:  # the saver's own guard of its connection
            return value(conn, sql, args)

    yield run


def checkpointer_thread_lock(checkpointer: Any) -> ThreadLock:
    """The lock every process sharing ``checkpointer`` sees (the module docstring)."""
    conn = getattr(checkpointer, "conn", None)
    if isinstance(conn, sqlite3.Connection):
        with getattr(checkpointer, "lock", None) or threading.Lock():
            rows = conn.execute("PRAGMA database_list").fetchall()
        path = next((row[2] for row in rows if row[1] == "main"), "")
        if path:  # a file, not ":memory:"
            return file_thread_lock(f"{path}.thread-locks")
    if type(checkpointer).__module__.startswith("langgraph.checkpoint.postgres"):
        return postgres_thread_lock(checkpointer)
    return local_thread_lock
