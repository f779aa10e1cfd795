"""What a real server and worker write (reviewqueue/serverlog.py): with LOG_FORMAT=json every line
is one JSON object, and no line keeps a secret a URL's query string carried."""

from __future__ import annotations

import base64
import json
import os
import socket
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from e2e.server import ROOT, LiveServer
from reviewqueue.serverlog import url_scrubbed

pytestmark = pytest.mark.timeout(240)

SECRET = "s3cr3t-deploy-token-value"


def test_url_scrubbed_replaces_only_the_values_of_secret_looking_parameters():
    assert url_scrubbed("/api/v1/deployments/a/webhook?token=abc&x=1") == "/api/v1/deployments/a/webhook?token=[scrubbed]&x=1"
    scrubbed = url_scrubbed("/p?api_key=k&X-Amz-Signature=s&client_secret=c&password=p&sig=1&page=2&q=a+b")
    assert scrubbed == (
        "/p?api_key=[scrubbed]&X-Amz-Signature=[scrubbed]&client_secret=[scrubbed]&password=[scrubbed]&sig=[scrubbed]&page=2&q=a+b"
    )
    assert url_scrubbed("/items/?status=pending") == "/items/?status=pending"
    assert url_scrubbed("/healthz") == "/healthz"


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def _post(url: str) -> int:
    request = urllib.request.Request(url, data=b"{}", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def _websocket_unrouted(server: LiveServer) -> None:
    """A same-origin websocket to a path no route takes (daphne logs its handshake and rejection)."""
    key = base64.b64encode(os.urandom(16)).decode()
    head = (
        f"GET /ws/no-such-route/ HTTP/1.1\r\nHost: {server.netloc}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        f"Origin: {server.url}\r\n\r\n"
    )
    with socket.create_connection((server.host, server.port), timeout=30) as conn:
        conn.sendall(head.encode())
        try:
            while conn.recv(4096):
                pass
        except (ConnectionResetError, TimeoutError):
            pass


def _requests(server: LiveServer, *, webhook_status: int = 404) -> None:
    assert _get(f"{server.url}/accounts/login/?next=/") == 200
    assert _get(f"{server.url}/no-such-page/") == 404  # Django logs "Not Found" on django.request
    # A deployment webhook's URL carries its token (docs/integrators/langgraph-deployments.md).
    assert _post(f"{server.url}/api/v1/deployments/no-such/webhook?token={SECRET}") == webhook_status
    assert _get(f"{server.url}/healthz?api_key={SECRET}&verbose=1") == 200
    _websocket_unrouted(server)


def _lines(server: LiveServer, *, worker: bool = False) -> list[str]:
    text = (server.worker_log_path if worker else server.log_path).read_text()
    # LiveServer's own marker between starts is not the process's.
    return [line for line in text.splitlines() if line.strip() and not line.startswith("--- start #")]


def test_with_log_format_json_every_line_a_server_and_its_worker_write_is_one_json_object(tmp_path):
    server = LiveServer(tmp_path, extra_env={"LOG_FORMAT": "json", "REVIEWQUEUE_APPLY_INLINE": ""})
    server.seed()
    server.start()
    try:
        server.worker_start(worker_id="jsonlog")
        server.worker_wait_ready("jsonlog")
        # Without its table the webhook fails inside the view: a 500, and Django logs the traceback.
        with sqlite3.connect(server.db_path) as db:
            db.execute("DROP TABLE moderation_deployment")
        _requests(server, webhook_status=500)
    finally:
        server.close()
    for lines in (_lines(server), _lines(server, worker=True)):
        records = []
        for line in lines:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                pytest.fail(f"not a JSON line: {line!r}\n" + "\n".join(lines[-40:]))
        assert all({"time", "level", "logger", "message"} <= record.keys() for record in records)
    server_records = [json.loads(line) for line in _lines(server)]
    loggers = {record["logger"] for record in server_records}
    # daphne's own lines, Django's, the access log, and a traceback, each one line.
    assert {"daphne.server", "django.request", "reviewqueue.access"} <= loggers, loggers
    assert any("no such table: moderation_deployment" in r.get("exc", "") for r in server_records), server_records
    assert any(r["message"].startswith("Not Found: /no-such-page/") for r in server_records), server_records
    access = [r["message"] for r in server_records if r["logger"] == "reviewqueue.access"]
    assert any("/api/v1/deployments/no-such/webhook?token=[scrubbed]" in line and " 500 " in line for line in access), access
    assert any("WSREJECT /ws/no-such-route/" in line for line in access), access
    assert SECRET not in server.log_path.read_text()


def test_the_access_log_keeps_no_query_string_secret_in_plain_format_either(tmp_path):
    server = LiveServer(tmp_path)
    server.seed()
    server.start()
    try:
        _requests(server)
    finally:
        server.close()
    log = server.log_path.read_text()
    assert "reviewqueue.access: " in log and "webhook?token=[scrubbed]" in log, log
    assert "/healthz?api_key=[scrubbed]&verbose=1" in log, log
    assert SECRET not in log, log


def test_a_command_logs_an_uncaught_exception_and_a_warning_as_one_json_line_each(tmp_path):
    code = (
        "import threading, warnings; t = threading.Thread(target=lambda: 1 / 0, name='boom'); t.start(); t.join(); "
        "warnings.warn('careful'); raise RuntimeError('the end')"
    )
    env = {**os.environ, "LOG_FORMAT": "json", "REVIEWQUEUE_VAR_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-v", "0", "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    records = [json.loads(line) for line in result.stderr.splitlines()]  # each line one object
    assert [(r["logger"], r["level"]) for r in records] == [
        ("reviewqueue.uncaught", "ERROR"),
        ("py.warnings", "WARNING"),
        ("reviewqueue.uncaught", "CRITICAL"),
    ], records
    assert "ZeroDivisionError" in records[0]["exc"] and records[0]["thread"] == "boom"
    assert "RuntimeError: the end" in records[2]["exc"]
