"""A pool whose idle connections the database all ended at once still lends a live one (PostgreSQL).

Each test fills this process's Django pool with idle connections, terminates their backends
(``pg_terminate_backend``, as a failover or an operator does), and asks for a connection
from a thread of its own, as a request would. The negative control puts back psycopg_pool's
plain check: it backs off after each dead connection (about 1 s, 2, 4, 8), so a pool of
six dead ones outlasts its 10 s timeout.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.db.utils import OperationalError
from psycopg_pool import ConnectionPool

pytestmark = [
    pytest.mark.postgres_variant,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's connection pool"),
    pytest.mark.django_db(transaction=True),
]

IDLE = 6


def _idle_connections_terminated() -> ConnectionPool:
    connection.ensure_connection()  # the pool's check is installed as its connections are made
    pool = connection.pool
    lent = [pool.getconn() for _ in range(IDLE)]
    for conn in lent:
        pool.putconn(conn)
    with connection.cursor() as cursor:  # this thread's own connection is spared
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        assert cursor.fetchone()[0] >= IDLE
    return pool


def _query_from_a_request_thread() -> object:
    """What a request's first query meets: its answer, or the error it raised."""
    from django.db import connection as its_connection

    outcome: list[object] = []

    def request() -> None:
        try:
            with its_connection.cursor() as cursor:
                cursor.execute("SELECT 1")
                outcome.append(cursor.fetchone()[0])
        except OperationalError as exc:
            outcome.append(exc)
        finally:
            its_connection.close()

    thread = threading.Thread(target=request)
    thread.start()
    thread.join()
    return outcome[0]


def test_a_pool_whose_idle_connections_all_died_lends_a_live_one():
    pool = _idle_connections_terminated()
    assert _query_from_a_request_thread() == 1
    assert pool.get_stats()["connections_lost"] >= IDLE - 1  # the rest found dead by the one check of all


def test_negative_control_with_the_plain_check_the_request_times_out(monkeypatch):
    pool = _idle_connections_terminated()
    monkeypatch.setattr(pool, "_check", ConnectionPool.check_connection)
    outcome = _query_from_a_request_thread()
    assert isinstance(outcome, OperationalError) and "couldn't get a connection" in str(outcome), outcome
