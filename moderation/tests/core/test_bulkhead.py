"""The outside's bulkhead filled for real: a server on PostgreSQL with ``DB_POOL_SIZE=4`` and ``BULKHEAD_API=2``
(``BULKHEAD_WAIT=0``: refuse at once). Six API clients' outcome reports arrive together, each stalled under its
item's lock with its connection (``outcome_checked:sleep``): two run, the other four are answered the documented
JSON 503 ``busy`` with ``Retry-After`` and record nothing. Meanwhile a moderator's queue page and decision succeed
on the connections the outside cannot take.

The negative control is the same server with the cap off (``BULKHEAD_API=0``): the six reports take the whole
pool, and the moderator's page and decision wait out the pool's timeout and answer 503 ``database_unavailable``.

The bulkhead between processes (``SERVE_ROUTES``): one real server serving only the outside's routes, then only the
moderators', each asked for both classes: the other class is answered 421 ``misdirected`` (a websocket refused at
its handshake), records nothing and is logged without its query string; health is served by both.
"""

from __future__ import annotations

import json
import threading

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from e2e.server import LiveServer
from moderation.core.bulkhead import API, INSIDE, LONG_POLL, WEBHOOKS, route_class, route_served
from moderation.lab.waits import progress_wait
from moderation.tests.cluster_support import channel_prefix, cluster_env, database_query, fresh_database, services_require
from moderation.tests.real_server import CSRF, Reviewer, raw_request

POOL, CAP, OUTSIDE = 4, 2, 6
HOLD = 25  # seconds each admitted report stalls under its lock (the pool waits 10 s for a connection)


def _filled(tmp_path, *, cap: int) -> dict:
    admin_url, redis_url = services_require()
    env = {
        **cluster_env(redis_url=redis_url, prefix=channel_prefix("bulkhead")),
        "DB_POOL_SIZE": str(POOL),
        "BULKHEAD_API": str(cap),
        "BULKHEAD_WEBHOOKS": "1",
        "BULKHEAD_WAIT": "0",
    }
    with fresh_database(admin_url, "bulkhead") as database_url:
        server = LiveServer(tmp_path, database_url=database_url, extra_env=env)
        try:
            seeded = server.seed(users=["alice", "bob"], items=1)
            token = server.manage("apiclient_create", "bulkhead").strip()
            server.start(faults=f"outcome_checked:sleep={HOLD}")
            api = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            alice = Reviewer(server, "alice", seeded.sessions["alice"])
            reported = []
            for n in range(OUTSIDE):
                status, _, _, body = raw_request(
                    server,
                    "POST",
                    "/api/v1/items",
                    headers=api,
                    body=json.dumps({"title": f"Reported {n}", "body": "b", "source": "bulkhead"}),
                )
                assert status == 201, body
                reported.append(json.loads(body)["id"])
                assert alice.decide(reported[-1], "approve")[0] == 200
            outside: dict[int, tuple] = {}
            reports = [
                threading.Thread(
                    target=lambda n=n, item=item: outside.__setitem__(
                        n,
                        raw_request(
                            server,
                            "POST",
                            f"/api/v1/items/{item}/outcome",
                            headers=api,
                            body=json.dumps({"status": "done", "message": "refunded"}),
                        ),
                    )
                )
                for n, item in enumerate(reported)
            ]
            for t in reports:
                t.start()
            held = _held(database_url, at_least=min(cap or POOL, POOL))
            bob = f"sessionid={seeded.sessions['bob']}; csrftoken={CSRF}"
            moderator = {
                "page": lambda: raw_request(server, "GET", "/", headers={"Cookie": bob}),
                "decision": lambda: raw_request(
                    server,
                    "POST",
                    f"/api/items/{seeded.items[0]}/decision",
                    body=json.dumps({"decision": "approve"}),
                    headers={"Content-Type": "application/json", "X-CSRFToken": CSRF, "Cookie": bob},
                ),
            }
            answers: dict[str, tuple] = {}
            asks = [threading.Thread(target=lambda k=k, f=f: answers.__setitem__(k, f())) for k, f in moderator.items()]
            for t in asks:
                t.start()
            for t in asks + reports:
                t.join()
            outcomes = database_query(database_url, "SELECT count(*) FROM moderation_outcomereport")[0][0]
            return {"held": held, "moderator": answers, "outside": [outside[n] for n in range(OUTSIDE)], "outcomes": outcomes}
        finally:
            server.close()


def _held(database_url: str, *, at_least: int) -> int:
    """Progress, not a clock: the admitted reports' transactions are open in the database (their locks taken)."""

    def open_transactions() -> int:
        return database_query(
            database_url,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'",
        )[0][0]

    held = progress_wait(open_transactions, done=lambda n: n >= at_least, stall=60)
    assert held >= at_least, held
    return held


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_a_full_bulkhead_refuses_the_outside_with_busy_and_the_moderators_go_on(tmp_path):
    seen = _filled(tmp_path, cap=CAP)
    assert seen["held"] == CAP  # the cap, not the pool, bounded what the outside holds
    assert {k: v[0] for k, v in seen["moderator"].items()} == {"page": 200, "decision": 200}, seen["moderator"]
    busy = [answer for answer in seen["outside"] if answer[0] == 503]
    assert len(busy) == OUTSIDE - CAP, seen["outside"]
    for status, retry_after, content_type, body in busy:
        assert (retry_after, content_type) == ("1", "application/json"), (status, retry_after, content_type)
        assert json.loads(body)["error"] == "busy", body
    assert sorted(answer[0] for answer in seen["outside"] if answer[0] != 503) == [201] * CAP
    assert seen["outcomes"] == CAP  # the refused reports recorded nothing


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_negative_control_without_the_cap_the_outside_starves_the_moderators(tmp_path):
    seen = _filled(tmp_path, cap=0)
    assert seen["held"] == POOL  # the outside took every connection
    for name, (status, retry_after, _, body) in seen["moderator"].items():
        assert (status, retry_after) == (503, "5"), (name, status, body[:200])
    assert all(answer[0] in (201, 503) for answer in seen["outside"]), seen["outside"]


def test_each_request_draws_on_its_class():
    item = "4f0b7f2e-0000-4000-8000-000000000000"
    assert [
        route_class(method=m, path=p)
        for m, p in (
            ("POST", "/api/v1/deployments/my-agents/webhook"),
            ("POST", "/api/v1/items:batch"),
            ("POST", "/api/v1/items"),
            ("POST", f"/api/v1/items/{item}/outcome"),
            ("GET", f"/api/v1/items/{item}/decision"),
            ("GET", "/"),
            ("POST", f"/api/items/{item}/decision"),
            ("GET", "/healthz"),
        )
    ] == [WEBHOOKS, API, API, API, LONG_POLL, INSIDE, INSIDE, INSIDE]


def test_each_process_serves_its_routes_and_health_everywhere():
    item = "4f0b7f2e-0000-4000-8000-000000000000"
    asks = (
        ("POST", "/api/v1/items"),
        ("POST", "/api/v1/deployments/my-agents/webhook"),
        ("GET", f"/api/v1/items/{item}/decision"),
        ("GET", "/"),
        ("POST", f"/api/items/{item}/decision"),
        ("GET", "/ws/queue/"),
        ("GET", "/static/app.js"),
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/metrics"),
    )
    served = {
        serves: [route_served(serves=serves, method=m, path=p) for m, p in asks] for serves in ("all", "outside", "moderators")
    }
    assert served == {
        "all": [True] * 10,
        "outside": [True, True, True, False, False, False, False, True, True, True],
        "moderators": [False, False, False, True, True, True, True, True, True, True],
    }


def _websocket_status(server: LiveServer, cookie: str) -> int:
    """101 if the queue page's socket opens, else the handshake's status."""
    try:
        with connect(
            f"ws://{server.netloc}/ws/queue/", origin=server.url, additional_headers={"Cookie": cookie}, open_timeout=30
        ):
            return 101
    except InvalidStatus as refused:
        return refused.response.status_code


@pytest.mark.timeout(300)
def test_a_process_refuses_the_other_class_as_misdirected_and_records_nothing(tmp_path):
    server = LiveServer(tmp_path, extra_env={"SERVE_ROUTES": "outside"}, health_path="/healthz")
    try:
        seeded = server.seed(users=["alice"], items=1)
        item = seeded.items[0]
        token = server.manage("apiclient_create", "split").strip()
        api = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        alice = f"sessionid={seeded.sessions['alice']}; csrftoken={CSRF}"
        moderator = {"Cookie": alice, "Content-Type": "application/json", "X-CSRFToken": CSRF}
        submit = json.dumps({"title": "From outside", "body": "b", "source": "split"})
        decide = json.dumps({"decision": "approve"})
        webhook = "/api/v1/deployments/nowhere/webhook?token=do-not-log-me"

        server.start()
        assert raw_request(server, "POST", "/api/v1/items", headers=api, body=submit)[0] == 201
        assert raw_request(server, "POST", webhook, headers=api, body="{}")[0] == 404  # served: no such deployment
        for method, path, body in (("GET", "/", None), ("POST", f"/api/items/{item}/decision", decide)):
            status, retry_after, content_type, answer = raw_request(server, method, path, headers=moderator, body=body)
            assert (status, retry_after, content_type) == (421, None, "application/json"), (path, status, answer)
            assert json.loads(answer)["error"] == "misdirected"
            assert "SERVE_ROUTES=outside" in json.loads(answer)["message"]
        assert _websocket_status(server, alice) == 403
        assert raw_request(server, "GET", "/healthz", headers={})[0] == 200
        assert server.rows([item])[item].status == "pending"  # the misdirected decision recorded nothing

        server.stop()
        server.extra_env["SERVE_ROUTES"] = "moderators"
        server.start()
        for method, path, body in (("POST", "/api/v1/items", submit), ("POST", webhook, "{}")):
            status, _, content_type, answer = raw_request(server, method, path, headers=api, body=body)
            assert (status, content_type) == (421, "application/json"), (path, status, answer)
            assert "SERVE_ROUTES=moderators" in json.loads(answer)["message"]
        assert raw_request(server, "GET", "/", headers=moderator)[0] == 200
        assert _websocket_status(server, alice) == 101
        assert raw_request(server, "GET", "/healthz", headers={})[0] == 200
        assert raw_request(server, "POST", f"/api/items/{item}/decision", headers=moderator, body=decide)[0] == 200
        assert server.rows([item])[item].status == "approved"
        log = server.log_path.read_text()
        assert "misdirected http /api/v1/deployments/nowhere/webhook: this process serves only moderators" in log, log
        assert "misdirected websocket /ws/queue/: this process serves only outside" in log, log
        assert "do-not-log-me" not in log
    finally:
        server.close()
