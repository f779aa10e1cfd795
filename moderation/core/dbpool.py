"""How both PostgreSQL pools (Django's and the checkpointer's) check a connection they lend.

psycopg_pool checks each connection as it lends it (an empty query) and, after one that
fails, waits before it tries the next: about 1 s, then 2, 4, 8. When the database ends every
idle connection at once (a failover, ``pg_terminate_backend``), a pool holding four or more
of them spends longer than its timeout reaching a live one, and the request fails with
"couldn't get a connection" while the database is up. So a failed check has the pool check
all its idle connections at once (``ConnectionPool.check``: the dead ones are replaced),
and the next try, after one wait, finds a live one.

A thread about to wait on the outside (a LangGraph deployment, a webhook receiver) gives its
pooled connection back first (``connection_release``): held across that wait, a burst of such
waits empties the pool the moderators' requests draw on.
"""

from __future__ import annotations

from typing import Any

from django.db import connection
from psycopg_pool import ConnectionPool


def pooled_connection_check(conn: Any) -> None:
    """``ConnectionPool.check_connection``; on a dead connection, the lending pool's other idle ones checked too."""
    try:
        ConnectionPool.check_connection(conn)
    except Exception:
        pool = getattr(conn, "_pool", None)  # the pool sets it as it lends the connection
        if isinstance(pool, ConnectionPool):
            pool.check()
        raise


def pool_check_install(*, pool: ConnectionPool) -> None:
    """Have Django's ``pool`` check with ``pooled_connection_check`` (idempotent).

    Django builds its pool with psycopg_pool's plain check (``CONN_HEALTH_CHECKS``) and refuses
    a "check" among the settings' pool options beside it; so the pool's own attribute is set.
    ``moderation.tests.core.test_dbpool`` fails if psycopg_pool stops reading it.
    """
    if pool._check is ConnectionPool.check_connection:
        pool._check = pooled_connection_check


def connection_release() -> None:
    """Give this thread's pooled PostgreSQL connection back to the pool; its next query borrows one again.

    Not inside a transaction (its work would be lost), and not without a pool: SQLite's file
    connection costs the database nothing while it waits.
    """
    if connection.in_atomic_block or connection.connection is None:
        return
    if connection.vendor == "postgresql" and connection.settings_dict.get("OPTIONS", {}).get("pool"):
        connection.close()
