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
from pathlib import Path

from django.db import connections
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver

from moderation.core.faults import fault_point

_savers: dict[tuple[int, str], BaseCheckpointSaver] = {}
_savers_lock = threading.Lock()


def checkpointer_target() -> str:
    """Where the current database's checkpoints live: a file path or a conninfo."""
    db = connections["default"].settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        name = Path(str(db["NAME"]))
        return str(name.with_name(f"{name.stem}-checkpoints.sqlite3"))
    from psycopg.conninfo import make_conninfo

    return make_conninfo(
        host=db.get("HOST") or "", port=str(db.get("PORT") or ""), dbname=db["NAME"],
        user=db.get("USER") or "", password=db.get("PASSWORD") or "",
    )


class _BeforeCheckpointFault:
    """The fault point ``before_checkpoint``: a graph's step with its nodes' writes saved and its checkpoint
    not yet, the last window of a run a crash test kills (``moderation.graphs.runtime``)."""

    def put(self, config, checkpoint, metadata, new_versions):
        fault_point("before_checkpoint", item_key=config["configurable"]["thread_id"])
        return super().put(config, checkpoint, metadata, new_versions)


class _SqliteSaver(_BeforeCheckpointFault, SqliteSaver):
    pass


class _PostgresSaver(_BeforeCheckpointFault, PostgresSaver):
    pass


def checkpointer_get() -> BaseCheckpointSaver:
    key = (os.getpid(), checkpointer_target())
    saver = _savers.get(key)
    if saver is None:
        with _savers_lock:
            saver = _savers.get(key)
            if saver is None:
                saver = _saver_build(key[1])
                _savers[key] = saver
    return saver


def checkpointer_setup() -> None:
    """Create the checkpointer's tables (idempotent). Run by a migration, not per request."""
    target = checkpointer_target()
    if _is_sqlite(target):
        checkpointer_get()  # SqliteSaver sets itself up on creation
        return
    import psycopg

    # setup() runs CREATE INDEX CONCURRENTLY, which refuses to run in a transaction.
    with psycopg.connect(target, autocommit=True) as conn:
        PostgresSaver(conn).setup()


def _is_sqlite(target: str) -> bool:
    return "=" not in target


def _saver_build(target: str) -> BaseCheckpointSaver:
    if _is_sqlite(target):
        conn = sqlite3.connect(target, check_same_thread=False, timeout=30)
        # WAL with SQLite's default synchronous=FULL, while Django's file runs at NORMAL:
        # after a power loss the graph may be ahead of the row (recover adopts it), never
        # behind it. That fsync per checkpoint is what bounds ingest speed.
        conn.execute("PRAGMA journal_mode=WAL")
        saver = _SqliteSaver(conn)
        saver.setup()
        return saver
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    from moderation.core.dbpool import pooled_connection_check

    pool = ConnectionPool(
        target,
        min_size=1,
        max_size=int(os.environ.get("CHECKPOINT_POOL_SIZE", "10")),
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        # As Django's pool: a connection the database ended while it was idle (a terminated backend, a
        # failover) is replaced when taken, instead of failing the next graph run, and the pool's other
        # idle ones are checked with it (moderation.core.dbpool). One empty query per checkpointer operation.
        check=pooled_connection_check,
        open=True,
    )
    return _PostgresSaver(pool)


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
