"""Oversized request bodies are refused with 413 before anything reads them whole (reviewqueue/bodylimit.py).

Against a real daphne server: the refusal must come while the body is still on its way
(daphne's own request refuses it), not after the server has received it all. In process:
the ASGI middleware, for servers that stream bodies to the application.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterable

import pytest

from e2e.server import LiveServer

LIMIT = 1024 * 1024  # REQUEST_BODY_MAX_BYTES's default
# Only a hung server makes a read wait this long; nothing here is timed.
READ_TIMEOUT = 60

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = LiveServer(tmp_path_factory.mktemp("bodylimit"), db_name="bodylimit")
    server.start()
    try:
        yield server
    finally:
        server.close()


def _post(server: LiveServer, headers: list[str], body_parts: Iterable[bytes]) -> tuple[int, bytes, bool]:
    """Send a raw POST to the API, then read the answer; (status, body, whether every part could be sent)."""
    path = f"/api/items/{uuid.uuid4()}/decision"
    head = "\r\n".join([f"POST {path} HTTP/1.1", f"Host: {server.host}", "Content-Type: application/json", *headers])
    with socket.create_connection((server.host, server.port), timeout=READ_TIMEOUT) as conn:
        conn.sendall(head.encode() + b"\r\n\r\n")
        sent_all = True
        try:
            for part in body_parts:
                conn.sendall(part)
        except (BrokenPipeError, ConnectionResetError):
            sent_all = False  # the server answered and closed before the rest was sent
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _length(answer):
            chunk = conn.recv(65536)
            if not chunk:
                break
            answer += chunk
    status = int(answer.split(b" ", 2)[1])
    return status, answer.partition(b"\r\n\r\n")[2], sent_all


def _length(answer: bytes) -> int:
    for line in answer.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def _chunks(total: int) -> list[bytes]:
    chunk = b"x" * 65536
    return [f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" for _ in range(total // len(chunk))]


def _refused(status: int, body: bytes) -> bool:
    return status == 413 and json.loads(body)["error"] == "request_too_large"


def test_an_announced_oversized_body_is_answered_before_it_is_sent(server):
    """64 KiB of an announced 64 MiB, then the client waits: the 413 comes from the headers alone."""
    status, body, _ = _post(server, [f"Content-Length: {64 * 1024 * 1024}"], [b"x" * 65536])
    assert _refused(status, body), (status, body)


def test_a_chunked_body_is_answered_once_it_passes_the_limit(server):
    """Twice the limit in chunks and no last chunk, then the client waits: the 413 comes anyway."""
    status, body, _ = _post(server, ["Transfer-Encoding: chunked"], _chunks(2 * LIMIT))
    assert _refused(status, body), (status, body)


@pytest.mark.parametrize("announced", [True, False], ids=["content-length", "chunked"])
def test_the_server_stops_reading_a_refused_body(server, announced):
    """An anonymous client sending 64 MiB is cut off: it cannot send it all, and it is told 413."""
    size = 64 * 1024 * 1024
    if announced:
        headers, parts = [f"Content-Length: {size}"], (b"x" * (1024 * 1024) for _ in range(64))
    else:
        headers, parts = ["Transfer-Encoding: chunked"], iter([*_chunks(size), b"0\r\n\r\n"])
    status, body, sent_all = _post(server, headers, parts)
    assert _refused(status, body), (status, body)
    assert not sent_all, "the server read the whole refused body"


def test_a_body_within_the_limit_reaches_django(server):
    payload = json.dumps({"decision": "approve", "note": "x" * 1000}).encode()
    status, body, _ = _post(server, [f"Content-Length: {len(payload)}"], [payload])
    assert status == 403, (status, body)  # Django's CSRF check answered: the body went through


def _scope(headers: list[tuple[bytes, bytes]]) -> dict:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": f"/api/items/{uuid.uuid4()}/decision",
        "raw_path": b"",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


@pytest.mark.asyncio
@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
async def test_the_application_stops_reading_at_the_limit(declared):
    """In process, counting what the ASGI application takes from the server: never the whole body."""
    from reviewqueue.asgi import application

    chunks = 64
    taken = 0

    async def receive() -> dict:
        nonlocal taken
        taken += 1
        return {"type": "http.request", "body": b"x" * (1024 * 1024), "more_body": taken < chunks}

    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    headers = [(b"content-length", str(chunks * 1024 * 1024).encode())] if declared else []
    await application(_scope(headers), receive, send)
    assert sent[0]["status"] == 413
    assert taken == (0 if declared else 2), taken  # 2 MiB read of 64: the first chunk past 1 MiB stops it
