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

The async glue (``reviewqueue_client.aio_langgraph``) holds an ``AsyncThreadLock``
(``thread_id -> async context manager``), which ``async_checkpointer_thread_lock`` picks the
same way: the same lock files beside an ``AsyncSqliteSaver``'s database (taken in a worker
thread, so the event loop runs on while it waits), the same advisory lock beside an
``AsyncPostgresSaver`` (so sync and async replicas exclude each other too), else an
``asyncio.Lock`` per thread id in this event loop.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager, contextmanager
from typing import Any

ThreadLock = Callable[[str], AbstractContextManager[Any]]
AsyncThreadLock = Callable[[str], AbstractAsyncContextManager[Any]]

_async_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = weakref.WeakKeyDictionary()
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
        with open(_lock_file(directory, thread_id), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    return lock


def _lock_file(directory: str, thread_id: str) -> str:
    name = hashlib.sha256(thread_id.encode()).hexdigest()[:32]  # any thread id, a safe file name
    return os.path.join(directory, f"{name}.lock")


def _advisory_key(thread_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"reviewqueue_client:{thread_id}".encode(), digest_size=8).digest(), "big", signed=True)


def postgres_thread_lock(saver: Any) -> ThreadLock:
    """A per-thread lock across every process on ``saver``'s PostgreSQL database (a session advisory lock)."""

    @contextmanager
    def lock(thread_id: str) -> Iterator[None]:
        key = _advisory_key(thread_id)
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


@asynccontextmanager
async def async_local_thread_lock(thread_id: str) -> AsyncIterator[None]:
    """One ``asyncio.Lock`` per thread id in the running event loop: enough for a single async agent process."""
    locks = _async_locks.setdefault(asyncio.get_running_loop(), {})
    async with locks.setdefault(thread_id, asyncio.Lock()):
        yield


def async_file_thread_lock(directory: str) -> AsyncThreadLock:
    """``file_thread_lock``'s lock files (sync and async processes exclude each other), waited on in a worker thread."""
    os.makedirs(directory, exist_ok=True)

    @asynccontextmanager
    async def lock(thread_id: str) -> AsyncIterator[None]:
        path = _lock_file(directory, thread_id)
        # This process's coroutines queue in the loop, so one worker thread at most waits on each file.
        async with async_local_thread_lock(f"file:{path}"):
            with open(path, "a") as handle:
                # Cancelled while the thread waits: the file is closed here, and the lock the thread
                # then gets is released with the file's last reference, when its flock returns.
                await asyncio.to_thread(fcntl.flock, handle, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(handle, fcntl.LOCK_UN)

    return lock


def async_postgres_thread_lock(saver: Any) -> AsyncThreadLock:
    """``postgres_thread_lock`` for an ``AsyncPostgresSaver``: the same session advisory lock, the loop free while it waits."""

    @asynccontextmanager
    async def lock(thread_id: str) -> AsyncIterator[None]:
        key = _advisory_key(thread_id)
        # This process's coroutines may share the session (which may take the lock twice): they queue in the loop first.
        async with async_local_thread_lock(thread_id), _async_session(saver) as run:
            while not await run("SELECT pg_try_advisory_lock(%s)", key):
                await asyncio.sleep(_ADVISORY_POLL)
            try:
                yield
            finally:
                await run("SELECT pg_advisory_unlock(%s)", key)

    return lock


@asynccontextmanager
async def _async_session(saver: Any) -> AsyncIterator[Callable[..., Awaitable[Any]]]:
    """``_session`` for an async saver: a pooled connection held, or the saver's own one under its lock; tuple rows."""
    from psycopg.rows import tuple_row

    async def value(conn: Any, sql: str, args: tuple[Any, ...]) -> Any:
        async with conn.cursor(row_factory=tuple_row) as cursor:
            await cursor.execute(sql, args)
            return (await cursor.fetchone())[0]

    conn = saver.conn
    if hasattr(conn, "getconn"):  # a psycopg_pool AsyncConnectionPool
        async with conn.connection() as pinned:
            yield lambda sql, *args: value(pinned, sql, args)
        return

    async def run(sql: str, *args: Any) -> Any:
        async with saver.lock:
            return await value(conn, sql, args)

    yield run


def async_checkpointer_thread_lock(checkpointer: Any) -> AsyncThreadLock:
    """The async lock every process sharing ``checkpointer`` sees (the module docstring)."""
    conn = getattr(checkpointer, "conn", None)
    if type(conn).__module__.startswith("aiosqlite"):
        return _async_sqlite_thread_lock(checkpointer)
    if type(checkpointer).__module__.startswith("langgraph.checkpoint.postgres"):
        return async_postgres_thread_lock(checkpointer)
    return async_local_thread_lock


def _async_sqlite_thread_lock(checkpointer: Any) -> AsyncThreadLock:
    """The lock files beside an ``AsyncSqliteSaver``'s database (its name read on first use: an await), or a local lock for ``:memory:``."""
    chosen: list[AsyncThreadLock] = []

    @asynccontextmanager
    async def lock(thread_id: str) -> AsyncIterator[None]:
        if not chosen:
            async with checkpointer.lock:
                rows = await checkpointer.conn.execute_fetchall("PRAGMA database_list")
            path = next((row[2] for row in rows if row[1] == "main"), "")
            chosen[:] = [async_file_thread_lock(f"{path}.thread-locks") if path else async_local_thread_lock]
        async with chosen[0](thread_id):
            yield

    return lock
