"""``manage.py db_worker``: several workers on one host, with one environment (issue 39).

Two real workers given the same ``METRICS_WORKER_PORT`` (what one env file for a systemd
template unit gives) both run, each serving its series on its own port of the range; a
third, with the range full, stops with one clear line, not a traceback. (The template unit the
deployment docs ship for them: ``test_units``.)
"""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request

import pytest

from e2e.server import ROOT, LiveServer, free_port
from moderation.lab.waits import progress_wait

pytestmark = pytest.mark.timeout(600)


def _free_range(count: int) -> int:
    """A port with the ``count - 1`` after it free too (bound and released, as free_port does)."""
    while True:
        base = free_port()
        try:
            socks = [socket.create_server(("127.0.0.1", port)) for port in range(base, base + count)]
        except OSError:
            continue
        for sock in socks:
            sock.close()
        return base


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        return response.read().decode()


def test_two_workers_with_one_port_base_both_serve_and_a_third_past_the_range_says_why(tmp_path):
    base = _free_range(3)
    server = LiveServer(tmp_path / "s", extra_env={"METRICS_WORKER_PORT": str(base), "METRICS_WORKER_PORTS": "2"})
    server.seed()
    try:
        for name in ("one", "two"):
            server.worker_start(worker_id=name)
        for name in ("one", "two"):
            server.worker_wait_ready(name)
        log = progress_wait(
            lambda: server.log_tail(400, worker=True), done=lambda text: text.count("metrics served on") == 2, stall=60
        )
        assert f"metrics served on 127.0.0.1:{base}\n" in log + "\n" and f"metrics served on 127.0.0.1:{base + 1}" in log
        assert "Traceback" not in log and all(worker.poll() is None for worker in server.workers)
        for port in (base, base + 1):
            assert "reviewqueue_apply_lag_seconds_count" in _scrape(port)

        third = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "db_worker", "--no-reload", "--worker-id", "three"],
            cwd=ROOT,
            env=server.env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert third.returncode == 1
        assert third.stderr.strip().splitlines()[-1] == (
            f"CommandError: METRICS_WORKER_PORT: ports {base}-{base + 1} on 127.0.0.1 are all in use (by other "
            f"workers?): raise METRICS_WORKER_PORTS (2) or give this worker --metrics-port"
        )
        assert "Traceback" not in third.stderr
    finally:
        server.close()
