"""The guard against outbound calls made while holding the database (``moderation.core.ioguard``).

A real HTTP call (httpx, to a server of the test's own) and a real name lookup, inside
``atomic``, are reported with where they came from (the negative control: the guard fails
such a test); outside, nothing is. A lookup ``moderation.core.addresses`` runs on its resolver's
threads is reported in the thread that asked for it. On PostgreSQL's pool, a thread that holds a checked-out
connection is reported too, and one that gave it back (``connection_release``) is not.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from django.db import connection, transaction

from moderation.core import ioguard
from moderation.core.addresses import host_addresses
from moderation.core.dbpool import connection_release


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def receiver():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture
def report(tmp_path, monkeypatch):
    """The guard's report in a file of this test's own, with the pool checked as in a server."""
    path = tmp_path / "ioguard.log"
    monkeypatch.setitem(ioguard._state, "report", str(path))
    monkeypatch.setitem(ioguard._state, "pool_check", True)
    return path


def _calls_out(url: str) -> None:
    assert httpx.get(url, timeout=10).status_code == 200
    with contextlib.suppress(socket.gaierror):
        socket.getaddrinfo("reviewqueue-ioguard.invalid", 80)


@pytest.mark.django_db(transaction=True)
def test_a_call_inside_atomic_is_reported_with_where_it_came_from(receiver, report):
    with transaction.atomic():
        _calls_out(receiver)
    found = report.read_text()
    assert "HTTP GET 127.0.0.1 inside atomic on 'default'" in found, found
    assert "DNS 'reviewqueue-ioguard.invalid' inside atomic on 'default'" in found, found
    assert "moderation/tests/core/test_ioguard.py" in found and "_calls_out" in found


@pytest.mark.django_db(transaction=True)
def test_the_same_calls_outside_any_transaction_are_not(receiver, report):
    _calls_out(receiver)
    assert not report.exists() or report.read_text() == ""


def _looks_up() -> None:
    with contextlib.suppress(OSError):
        host_addresses(host="reviewqueue-ioguard.invalid", timeout=10)


@pytest.mark.django_db(transaction=True)
def test_a_lookup_run_on_the_resolvers_thread_is_reported_in_the_thread_that_asked(report):
    # The resolver's thread holds nothing: checked there alone, this went unseen.
    with transaction.atomic():
        _looks_up()
    found = report.read_text()
    assert "DNS 'reviewqueue-ioguard.invalid' inside atomic on 'default'" in found, found
    assert "_looks_up" in found
    report.write_text("")
    connection_release()  # on PostgreSQL, the block's connection is still checked out of the pool
    _looks_up()
    assert report.read_text() == ""


@pytest.mark.postgres_variant
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's connection pool")
@pytest.mark.django_db(transaction=True)
def test_a_pooled_connection_held_across_a_call_is_reported_and_one_given_back_is_not(receiver, report):
    def worker(release: bool) -> None:
        from django.db import connection as its_connection

        try:
            with its_connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            if release:
                connection_release()
            _calls_out(receiver)
        finally:
            its_connection.close()

    for release in (False, True):
        thread = threading.Thread(target=worker, args=(release,))
        thread.start()
        thread.join()
    found = report.read_text().splitlines()
    assert len([line for line in found if "HTTP GET" in line]) == 1, found
    assert "holding a pooled connection of 'default'" in found[0]
