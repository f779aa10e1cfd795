"""A stopped worker is visible (issue 39): /readyz, the item page, the staff banner and /metrics of a real
server with no task worker, then with one, then with it stopped again. /healthz (liveness) stays 200 throughout.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest

from e2e.server import LiveServer
from moderation.lab.waits import progress_wait
from moderation.tests.form_session import FormSession

pytestmark = pytest.mark.timeout(600)

PASSWORD = "readyz-test-pw-1"
ENV = {
    "REVIEWQUEUE_APPLY_INLINE": "",  # the worker applies, as in production
    "WORKER_HEARTBEAT_INTERVAL": "0.5",
    "WORKER_HEARTBEAT_GRACE": "10",
    "READY_UNAPPLIED_MAX": "1",
    "APPLY_WAIT_NOTICE": "0",
}


def _get(url: str, opener=None) -> tuple[int, str]:
    try:
        with (opener or urllib.request.build_opener()).open(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _metric(body: str, name: str) -> float:
    return float(re.search(rf"^{name} (\S+)$", body, re.M).group(1))


@pytest.fixture
def site(tmp_path):
    server = LiveServer(tmp_path / "s", health_path="/healthz", extra_env=ENV)
    seeded = server.seed(users=["alice", "root"], staff=["root"], password=PASSWORD, sessions=False, items=2, prefix="Ready")
    try:
        server.start(timeout=120)
        yield server, seeded.items
    finally:
        server.close()


def test_no_worker_is_not_ready_and_says_so_until_a_worker_runs(site):
    server, items = site
    base = f"http://{server.netloc}"
    alice, root = FormSession(server.netloc, "alice", PASSWORD), FormSession(server.netloc, "root", PASSWORD)

    def ready() -> tuple[int, dict]:
        status, body = _get(f"{base}/readyz")
        return status, json.loads(body)

    status, body = ready()
    assert status == 503 and body["ok"] is False
    assert body["checks"]["workers"] == {"ok": False, "alive": 0, "last_beat_seconds": None, "grace_seconds": 10.0}
    assert body["checks"]["database"] == {"ok": True} and "workers" not in body  # anonymous: no hosts, no pids
    assert _get(f"{base}/healthz")[0] == 200  # liveness unchanged: the server itself is fine

    assert alice.decide(server.netloc, items[0], "approve")[0] == 200
    status, body = progress_wait(ready, done=lambda r: (r[1]["checks"]["unapplied"]["oldest_seconds"] or 0) > 1, stall=60)
    assert status == 503 and body["checks"]["unapplied"]["ok"] is False
    page = _get(f"{base}/items/{items[0]}/", alice.opener)[1]
    assert 'id="apply-wait"' in page and "Waiting for a worker for 1 min: no task worker is running" in page
    assert 'id="apply-wait"' not in _get(f"{base}/items/{items[1]}/", alice.opener)[1]  # pending: nothing waits
    assert "No task worker is running" in _get(f"{base}/", root.opener)[1]  # staff's banner
    assert 'id="worker-banner"' not in _get(f"{base}/", alice.opener)[1]  # not a moderator's
    metrics = _get(f"{base}/metrics")[1]
    assert _metric(metrics, "reviewqueue_workers_alive") == 0 and _metric(metrics, "reviewqueue_unapplied_oldest_seconds") > 1

    server.worker_start(worker_id="ready-worker")
    status, body = progress_wait(ready, done=lambda r: r[0] == 200, stall=60)
    assert status == 200 and body["checks"]["workers"]["alive"] == 1 and body["checks"]["unapplied"]["oldest_seconds"] is None
    staff = json.loads(_get(f"{base}/readyz", root.opener)[1])
    assert [(w["worker_id"], w["alive"]) for w in staff["workers"]] == [("ready-worker", True)]
    assert staff["workers"][0]["pid"] == server.workers[0].pid
    page = _get(f"{base}/items/{items[0]}/", alice.opener)[1]
    assert 'id="apply-wait"' not in page and 'id="applying"' not in page  # applied
    assert 'id="worker-banner"' not in _get(f"{base}/", root.opener)[1]
    metrics = _get(f"{base}/metrics")[1]
    assert _metric(metrics, "reviewqueue_workers_alive") == 1 and _metric(metrics, "reviewqueue_unapplied_oldest_seconds") == 0

    server.workers_stop(timeout=30)  # a clean stop: gone at once, not after the grace
    status, body = ready()
    assert status == 503 and body["checks"]["workers"]["alive"] == 0 and body["checks"]["workers"]["last_beat_seconds"] is None
    assert "No task worker is running" in _get(f"{base}/", root.opener)[1]
