"""Clients of real servers (``e2e.server.LiveServer``) for the server tests, without the ORM in the test process.

A reviewer that POSTs decisions with a session ``LiveServer.seed`` handed out (no
login form, so no password hashing), the Redis environment of a test's own, the odd
socket a failure test needs (a port that never answers), and ``progress_wait`` (from
``moderation.lab.waits``), the wait on progress every wait for a real server to settle uses.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from e2e.server import LiveServer
from moderation.lab.history import HistoryRecorder
from moderation.lab.waits import progress_wait  # noqa: F401 - the server tests' wait, imported from here
from moderation.tests.cluster_support import DEFAULT_REDIS_URL, channel_prefix

# Any 32 alphanumerics form a valid CSRF secret: the header only has to match the cookie.
CSRF = "crashtestcrashtestcrashtestcrash"


def service_missing(message: str) -> None:
    """A missing service fails the run in CI and skips elsewhere."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message} (required in CI)")
    pytest.skip(message)


def redis_env(label: str) -> dict[str, str]:
    """REDIS_URL (the suite's, or the machine's) and a channel prefix of this test's own, for a server."""
    import redis

    url = os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
    try:
        redis.Redis.from_url(url, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        service_missing(f"Redis not reachable at {url}: {exc}")
    return {"REDIS_URL": url, "CHANNEL_LAYER_PREFIX": channel_prefix(label)}


class Dropped(Exception):
    """The server closed or reset the connection without an HTTP response."""


class Reviewer:
    """One moderator's session against one server (cookie-authenticated JSON API)."""

    def __init__(self, server: LiveServer, username: str, session_key: str) -> None:
        self.server = server
        self.username = username
        self.cookie = f"sessionid={session_key}; csrftoken={CSRF}"

    def decide(self, item: str, decision: str, *, timeout: float = 15.0) -> tuple[int, dict]:
        """(status, JSON body); raises Dropped if the connection ends without a response."""
        conn = http.client.HTTPConnection(self.server.host, self.server.port, timeout=timeout)
        try:
            conn.request(
                "POST",
                f"/api/items/{item}/decision",
                body=json.dumps({"decision": decision}),
                headers={"Content-Type": "application/json", "X-CSRFToken": CSRF, "Cookie": self.cookie},
            )
            response = conn.getresponse()
            return response.status, json.loads(response.read() or b"{}")
        except (ConnectionError, http.client.HTTPException) as exc:
            raise Dropped(f"{type(exc).__name__}: {exc}") from exc
        finally:
            conn.close()

    def decide_recorded(self, history: HistoryRecorder, item: str, decision: str, *, timeout: float = 60) -> None:
        """``decide``, logged in ``history`` as this reviewer learns it: a timeout or a dropped
        connection leaves them not knowing (``unknown``), never a win or a loss."""
        op = history.invoke(reviewer=self.username, item=item, decision=decision)
        try:
            status, body = self.decide(item, decision, timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - whatever it was, the reviewer got no answer
            history.complete(op, completion="unknown", error=f"{type(exc).__name__}: {exc}")
            return
        history.complete_from_http(op, status=status, body=body)

    def ws_headers(self) -> dict[str, str]:
        return {"Cookie": self.cookie}


def raw_request(
    server: LiveServer, method: str, path: str, *, headers: dict, body: str | None = None
) -> tuple[int, str | None, str, str]:
    """One request on a connection of its own: (status, Retry-After, Content-Type, body)."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=120)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return (
            response.status,
            response.getheader("Retry-After"),
            response.getheader("Content-Type", ""),
            response.read().decode(errors="replace"),
        )
    finally:
        conn.close()


def port_wait(port: int, *, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port} after {timeout} s")


@contextmanager
def black_hole() -> Iterator[int]:
    """A port that accepts connections (the kernel completes the handshake) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield sock.getsockname()[1]
