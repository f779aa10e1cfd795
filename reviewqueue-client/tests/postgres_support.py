"""A fresh PostgreSQL database per test, for the glue's tests on LangGraph's PostgresSaver.

The server is the suite's (a postgres:// ``DATABASE_URL``), else ``CLIENT_POSTGRES_URL``,
else the local default. Unreachable: with ``CI=true`` the test fails, elsewhere it skips
and says why. The database is dropped after the test, its leftover sessions ended first.
"""

from __future__ import annotations

import os
import secrets
import urllib.parse
from collections.abc import Iterator

import pytest

DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/postgres"


def _admin_url() -> str:
    suite = os.environ.get("DATABASE_URL", "")
    if suite.startswith(("postgres://", "postgresql://")):
        return suite
    return os.environ.get("CLIENT_POSTGRES_URL") or DEFAULT_POSTGRES_URL


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """The URL of a database of this test's own."""
    import psycopg
    from psycopg import sql

    admin = _admin_url()
    try:
        psycopg.connect(admin, connect_timeout=3).close()
    except psycopg.Error as exc:
        reason = f"PostgreSQL not reachable at {urllib.parse.urlsplit(admin).hostname}: {str(exc).strip()}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"required in CI: {reason}", pytrace=False)
        pytest.skip(f"{reason} (set CLIENT_POSTGRES_URL)")
    name = f"rq_client_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urllib.parse.urlunsplit(urllib.parse.urlsplit(admin)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
