"""Several servers on one PostgreSQL and one Redis, for the cluster tests (API and browser).

Each test run gets its own fresh PostgreSQL database (copied here from a migrated template,
dropped after, its leftover connections terminated first) and its own channel-layer prefix, so runs that
share one PostgreSQL server and one Redis never see each other's rows or events.

PostgreSQL and Redis come from the environment (``CLUSTER_POSTGRES_URL``, else a
postgres:// ``DATABASE_URL``, else the local default; ``REDIS_URL``, else the local
default). Unreachable: with ``CI=true`` the test fails, elsewhere it skips and says why.

Used from the pytest process only; it never touches the ORM (the servers and the
set-up processes do, each with the cluster's own ``DATABASE_URL``).
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import socket
import tempfile
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def services_urls() -> tuple[str, str]:
    """(PostgreSQL URL of a database to run CREATE DATABASE from, Redis URL)."""
    database_url = os.environ.get("DATABASE_URL", "")
    admin = os.environ.get("CLUSTER_POSTGRES_URL") or (
        database_url if database_url.startswith(("postgres://", "postgresql://")) else DEFAULT_POSTGRES_URL
    )
    return admin, os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL


def _postgres_problem(url: str) -> str | None:
    import psycopg

    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"PostgreSQL not reachable at {_redact(url)}: {str(exc).strip()}"
    return None


def _redis_problem(url: str) -> str | None:
    parsed = urllib.parse.urlsplit(url)
    try:
        socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 6379), timeout=3).close()
    except OSError as exc:
        return f"Redis not reachable at {_redact(url)}: {exc}"
    return None


def services_require() -> tuple[str, str]:
    """The services' URLs; fails in CI (``CI=true``) and skips elsewhere when one is missing."""
    admin, redis_url = services_urls()
    problems = [p for p in (_postgres_problem(admin), _redis_problem(redis_url)) if p]
    if problems:
        reason = "; ".join(problems) + " (the cluster tests need both; set CLUSTER_POSTGRES_URL / REDIS_URL)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"required in CI: {reason}", pytrace=False)
        pytest.skip(reason)
    return admin, redis_url


def _redact(url: str) -> str:
    parsed = urllib.parse.urlsplit(url)
    if parsed.password:
        netloc = parsed.netloc.replace(f":{parsed.password}@", ":***@")
        return urllib.parse.urlunsplit(parsed._replace(netloc=netloc))
    return url


def _with_database(url: str, name: str) -> str:
    return urllib.parse.urlunsplit(urllib.parse.urlsplit(url)._replace(path=f"/{name}"))


# One migrated, empty database per PostgreSQL server, made once per test process: CREATE
# DATABASE ... TEMPLATE copies it in well under a second, where migrating each fresh database
# costs several seconds of CPU (the PostgreSQL analogue of LiveServer's migrated SQLite copy).
_MIGRATED: dict[str, str] = {}


def _migrated_template(admin_url: str) -> str:
    """The name of a migrated database to copy (made on first use, dropped at exit)."""
    import psycopg
    from psycopg import sql

    from e2e.server import LiveServer

    name = _MIGRATED.get(admin_url)
    if name is not None:
        return name
    name = f"rq_cluster_migrated_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    atexit.register(database_drop, admin_url, name)
    workdir = Path(tempfile.mkdtemp(prefix="cluster-migrated-"))
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    # Its process has exited when seed returns: a template must have no open connection.
    LiveServer(workdir, database_url=_with_database(admin_url, name)).seed(sessions=False)
    _MIGRATED[admin_url] = name
    return name


@contextmanager
def fresh_database(admin_url: str, label: str) -> Iterator[str]:
    """A new PostgreSQL database for this run, migrated and otherwise empty; yields its URL; dropped afterwards."""
    import psycopg
    from psycopg import sql

    template = _migrated_template(admin_url)
    name = f"rq_cluster_{label}_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template)))
    try:
        yield _with_database(admin_url, name)
    finally:
        database_drop(admin_url, name)


def database_drop(admin_url: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as conn:
        # Servers that were killed may leave backends behind for a moment; they would block DROP.
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [name],
        )
        force = sql.SQL(" WITH (FORCE)") if conn.info.server_version >= 130000 else sql.SQL("")
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)) + force)


def channel_prefix(label: str) -> str:
    """A channel-layer prefix no other run shares (Redis pub/sub ignores the database number)."""
    return f"rqc-{label}-{os.getpid()}-{secrets.token_hex(3)}"


def cluster_env(*, redis_url: str, prefix: str) -> dict[str, str]:
    """What every server (and set-up process) of one cluster adds to ``LiveServer``'s environment."""
    return {
        "REDIS_URL": redis_url,
        "CHANNEL_LAYER_PREFIX": prefix,
        # Two reviewers on one item must end as a winner and a loser, never "busy, try again",
        # even on a loaded machine; and the per-reviewer rate limit would throttle the race.
        "DECISION_LOCK_TIMEOUT": "30",
        "DECISION_RATE_LIMIT": "0",
        # The PostgreSQL server's max_connections (100 by default) is shared by the pass's other
        # tests, a soak's cluster among them: each server and worker of a cluster takes at most 10.
        "CHECKPOINT_POOL_SIZE": "4",
        "DB_POOL_SIZE": "10",
    }


def database_query(database_url: str, query: str, params: list | tuple = ()) -> list[tuple]:
    """Rows of one read (or write) on the cluster's database, on a connection of its own (autocommit)."""
    import psycopg

    with psycopg.connect(database_url, connect_timeout=10, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def work_unsettled(database_url: str, *, failed_settles: bool = False) -> dict[str, int]:
    """What still waits for a worker: items starting or applying, decided asks unapplied, deliveries not delivered
    (``failed_settles``: or failed, past their retry window)."""
    unsent = "status = 'pending'" if failed_settles else "status <> 'delivered'"
    ((starting, applying, unapplied, undelivered),) = database_query(
        database_url,
        f"""
        SELECT (SELECT count(*) FROM moderation_queueitem WHERE status = 'starting'),
               (SELECT count(*) FROM moderation_queueitem WHERE apply_state <> ''),
               (SELECT count(*) FROM moderation_reviewask WHERE status <> 'pending' AND applied_at IS NULL),
               (SELECT count(*) FROM moderation_webhookdelivery WHERE {unsent})""",
    )
    return {"starting": starting, "applying": applying, "unapplied": unapplied, "undelivered": undelivered}


def work_settled_wait(database_url: str, *, stall: float, failed_settles: bool = False, extra=None) -> dict[str, int]:
    """``work_unsettled`` (plus ``extra(database_url)``'s counts) once all are zero, or once nothing moved for ``stall`` seconds."""
    from moderation.lab.waits import progress_wait

    def read() -> dict[str, int]:
        return {**work_unsettled(database_url, failed_settles=failed_settles), **(extra(database_url) if extra else {})}

    return progress_wait(read, done=lambda left: not any(left.values()), stall=stall, poll=0.2)
