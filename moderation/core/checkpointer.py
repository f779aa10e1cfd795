"""The LangGraph checkpointer, chosen to follow Django's own database.

SQLite: a SqliteSaver in its own file next to Django's (separate file, so the graph's
writes never contend with Django's write lock inside the same database).
PostgreSQL: a PostgresSaver on a psycopg connection pool to the same database.

One saver per process and target: savers hold connections, which must never cross a
fork, and the target changes when the test runner swaps in its test database.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connections
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.postgres import PostgresSaver as LangGraphPostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver as LangGraphSqliteSaver

from moderation.core.faults import fault_point

_savers: dict[tuple[int, str], BaseCheckpointSaver[Any]] = {}
_savers_lock = threading.Lock()
# A saver on one connection, for what this thread runs while it holds a PostgreSQL resume lock.
_pinned: ContextVar[BaseCheckpointSaver[Any] | None] = ContextVar("checkpointer_pinned", default=None)


def checkpointer_target() -> str:
    """Where the current database's checkpoints live: a file path or a conninfo."""
    db = connections["default"].settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        name = Path(str(db["NAME"]))
        return str(name.with_name(f"{name.stem}-checkpoints.sqlite3"))
    from psycopg.conninfo import make_conninfo

    if settings.SESSION_DATABASE_URL:  # a session-mode pooler (or PostgreSQL itself) beside a transaction-mode one
        import dj_database_url

        db = dict(dj_database_url.parse(settings.SESSION_DATABASE_URL))
    return make_conninfo(
        host=db.get("HOST") or "",
        port=str(db.get("PORT") or ""),
        dbname=db["NAME"],
        user=db.get("USER") or "",
        password=db.get("PASSWORD") or "",
    )


class _BeforeCheckpointFault(BaseCheckpointSaver[Any]):
    """The fault point ``before_checkpoint``: a graph's step with its nodes' writes saved and its checkpoint
    not yet, the last window of a run a crash test kills (``moderation.graphs.runtime``)."""

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        fault_point("before_checkpoint", item_key=config["configurable"]["thread_id"])
        return super().put(config, checkpoint, metadata, new_versions)


# Named as LangGraph's: the health check and the race lab report the saver by its class's name.
class SqliteSaver(_BeforeCheckpointFault, LangGraphSqliteSaver):
    pass


class PostgresSaver(_BeforeCheckpointFault, LangGraphPostgresSaver):
    pass


def checkpointer_get() -> BaseCheckpointSaver[Any]:
    """The saver this thread's graph runs use: the one ``checkpointer_pinned`` set, else the process's."""
    return checkpointer_pinned_current() or checkpointer_shared()


def checkpointer_pinned_current() -> BaseCheckpointSaver[Any] | None:
    """The saver ``checkpointer_pinned`` set for this thread, if it is inside such a block."""
    return _pinned.get()


def checkpointer_shared() -> BaseCheckpointSaver[Any]:
    """The process's saver for the current database (on PostgreSQL, over a connection pool)."""
    key = (os.getpid(), checkpointer_target())
    saver = _savers.get(key)
    if saver is None:
        with _savers_lock:
            saver = _savers.get(key)
            if saver is None:
                saver = _saver_build(key[1])
                _savers[key] = saver
    return saver


@contextmanager
def checkpointer_pinned(conn: Any) -> Iterator[None]:
    """Every checkpointer read and write of this thread goes over ``conn`` (a connection of the shared
    saver's pool) until the block ends.

    The fence of the PostgreSQL resume lock (``moderation.core.resumelock``): the lock is a session
    lock held on ``conn``, so a holder whose backend is terminated (which frees the lock for the next
    worker) can write no checkpoint after it; its run fails at its next write instead of forking the
    thread beside the next holder's run.
    """
    token = _pinned.set(PostgresSaver(conn))
    try:
        yield
    finally:
        _pinned.reset(token)


def checkpointer_pool() -> Any:
    """The shared PostgreSQL saver's connection pool (``psycopg_pool.ConnectionPool``)."""
    saver = checkpointer_shared()
    assert isinstance(saver, PostgresSaver), "only PostgreSQL's saver has a pool"
    return saver.conn


def _is_sqlite(target: str) -> bool:
    return "=" not in target


def _saver_build(target: str) -> BaseCheckpointSaver[Any]:
    if _is_sqlite(target):
        conn = sqlite3.connect(target, check_same_thread=False, timeout=30)
        # WAL with SQLite's default synchronous=FULL, while Django's file runs at NORMAL:
        # after a power loss the graph may be ahead of the row (recover adopts it), never
        # behind it. That fsync per checkpoint is what bounds ingest speed.
        conn.execute("PRAGMA journal_mode=WAL")
        saver = SqliteSaver(conn)
        saver.setup()
        return saver
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    from moderation.core.dbpool import pooled_connection_check

    pool = ConnectionPool(
        target,
        min_size=1,
        max_size=settings.CHECKPOINT_POOL_SIZE,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        # As Django's pool: a connection the database ended while it was idle (a terminated backend, a
        # failover) is replaced when taken, instead of failing the next graph run, and the pool's other
        # idle ones are checked with it (moderation.core.dbpool). One empty query per checkpointer operation.
        check=pooled_connection_check,
        open=True,
    )
    return PostgresSaver(pool)


def checkpointer_close_all() -> None:
    """Close this process's savers' connections (before a test database is dropped)."""
    with _savers_lock:
        for (pid, _target), saver in list(_savers.items()):
            if pid != os.getpid():
                continue
            conn = getattr(saver, "conn", None)
            if conn is not None:
                conn.close()
            del _savers[(pid, _target)]
