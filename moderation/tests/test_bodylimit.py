"""Oversized request bodies are refused with 413 before Django reads them (reviewqueue/bodylimit.py).

Against a real daphne server: the limit is in the ASGI stack, in front of Django's handler.
"""

from __future__ import annotations

import json
import socket
import time
import uuid

import pytest

from e2e.server import LiveServer

LIMIT = 1024 * 1024  # REQUEST_BODY_MAX_BYTES's default
ANSWER_WITHIN = 5.0

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = LiveServer(tmp_path_factory.mktemp("bodylimit"), db_name="bodylimit")
    server.start()
    try:
        yield server
    finally:
        server.close()


def _post(server: LiveServer, headers: list[str], body_parts) -> tuple[int, bytes, float]:
    """Send a raw POST to the API; return (status, body, seconds until the answer)."""
    path = f"/api/items/{uuid.uuid4()}/decision"
    head = "\r\n".join([f"POST {path} HTTP/1.1", f"Host: {server.host}", "Content-Type: application/json", *headers])
    start = time.monotonic()
    with socket.create_connection((server.host, server.port), timeout=ANSWER_WITHIN * 4) as conn:
        conn.sendall(head.encode() + b"\r\n\r\n")
        try:
            for part in body_parts:
                conn.sendall(part)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before the rest is sent
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _length(answer):
            chunk = conn.recv(65536)
            if not chunk:
                break
            answer += chunk
    took = time.monotonic() - start
    status = int(answer.split(b" ", 2)[1])
    return status, answer.partition(b"\r\n\r\n")[2], took


def _length(answer: bytes) -> int:
    for line in answer.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def test_an_anonymous_64_mib_post_is_refused_with_413(server):
    size = 64 * 1024 * 1024
    block = b"x" * (1024 * 1024)
    status, body, took = _post(server, [f"Content-Length: {size}"], (block for _ in range(size // len(block))))
    assert status == 413, (status, body)
    assert json.loads(body)["error"] == "request_too_large"
    assert took < ANSWER_WITHIN, took


def test_a_chunked_body_past_the_limit_is_refused_with_413(server):
    chunk = b"x" * 65536
    parts = [f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" for _ in range(4 * LIMIT // len(chunk))] + [b"0\r\n\r\n"]
    status, body, took = _post(server, ["Transfer-Encoding: chunked"], parts)
    assert status == 413, (status, body)
    assert json.loads(body)["error"] == "request_too_large"


def test_a_body_within_the_limit_reaches_django(server):
    payload = json.dumps({"decision": "approve", "note": "x" * 1000}).encode()
    status, body, _ = _post(server, [f"Content-Length: {len(payload)}"], [payload])
    assert status == 403, (status, body)  # Django's CSRF check answered: the body went through


def _scope(headers: list[tuple[bytes, bytes]]) -> dict:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": f"/api/items/{uuid.uuid4()}/decision", "raw_path": b"", "root_path": "", "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), *headers],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000),
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
