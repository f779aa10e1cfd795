"""The database pool exhausted for real: a server on PostgreSQL with ``DB_POOL_SIZE=2``, both connections
held by two decisions stalled under their row locks (``after_row_lock:sleep``). Meanwhile the service
API, the session decision endpoint and the item page's decision POST answer the documented JSON 503
``database_unavailable`` with ``Retry-After``, a page gets the short 503 page that says to retry, and
none of them records anything. Once the holders finish, the same requests succeed.

The negative control is the same server without ``DatabaseUnavailableMiddleware``: Django's 500.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from e2e.server import LiveServer
from moderation.tests.cluster_support import channel_prefix, cluster_env, database_query, fresh_database, services_require
from moderation.tests.real_server import CSRF, Reviewer, raw_request

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

# The pool waits POOL_WAIT seconds for a connection (DB_POOL_TIMEOUT; 10 by default, which only
# lengthens the test); each holder's decision stalls HOLD seconds with its connection, long enough
# for the five asks to meet the timeout even one after another.
POOL_WAIT = 2
HOLD = 8 * POOL_WAIT
TITLE = "Submitted while the pool was empty"


def _pool_exhausted(tmp_path, *, settings: str) -> dict:
    admin_url, redis_url = services_require()
    env = {
        **cluster_env(redis_url=redis_url, prefix=channel_prefix("overload")),
        "DB_POOL_SIZE": "2",
        "DB_POOL_TIMEOUT": str(POOL_WAIT),
    }
    with fresh_database(admin_url, "overload") as database_url:
        server = LiveServer(tmp_path, database_url=database_url, extra_env=env, settings=settings)
        try:
            seeded = server.seed(users=["alice", "bob", "carol"], items=3)
            token = server.manage("apiclient_create", "overload").strip()
            server.start(faults=f"after_row_lock:sleep={HOLD}")
            holders = [Reviewer(server, name, seeded.sessions[name]) for name in ("alice", "bob")]
            carol = f"sessionid={seeded.sessions['carol']}; csrftoken={CSRF}"
            target = seeded.items[2]
            with ThreadPoolExecutor(2) as pool:
                held = [
                    pool.submit(r.decide, item, "approve", timeout=120) for r, item in zip(holders, seeded.items, strict=False)
                ]
                _both_held(database_url)
                asks = {
                    "api": lambda: raw_request(
                        server,
                        "POST",
                        "/api/v1/items",
                        body=json.dumps({"title": TITLE, "body": "b", "source": "overload"}),
                        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
                    ),
                    "decision_json": lambda: raw_request(
                        server,
                        "POST",
                        f"/api/items/{target}/decision",
                        body=json.dumps({"decision": "approve"}),
                        headers={"Content-Type": "application/json", "X-CSRFToken": CSRF, "Cookie": carol},
                    ),
                    "item_post_json": lambda: raw_request(
                        server,
                        "POST",
                        f"/items/{target}/",
                        body="decision=approve",
                        headers={
                            "Content-Type": "application/x-www-form-urlencoded",
                            "Accept": "application/json",
                            "X-CSRFToken": CSRF,
                            "Cookie": carol,
                        },
                    ),
                    "item_post_page": lambda: raw_request(
                        server,
                        "POST",
                        f"/items/{target}/",
                        body="decision=approve",
                        headers={"Content-Type": "application/x-www-form-urlencoded", "X-CSRFToken": CSRF, "Cookie": carol},
                    ),
                    "page": lambda: raw_request(server, "GET", "/", headers={"Cookie": carol}),
                }
                answers = {}
                threads = [threading.Thread(target=lambda k=k, f=f: answers.__setitem__(k, f())) for k, f in asks.items()]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                held_answers = [h.result()[0] for h in held]
            recorded = database_query(
                database_url,
                "SELECT (SELECT count(*) FROM moderation_queueitem WHERE title = %s),"
                " (SELECT status FROM moderation_queueitem WHERE public_id = %s),"
                " (SELECT count(*) FROM moderation_decisionattempt a JOIN moderation_queueitem q ON q.id = a.item_id"
                "  WHERE q.public_id = %s)",
                [TITLE, target, target],
            )[0]
            after = raw_request(server, "GET", "/", headers={"Cookie": carol})[0]
            return {"answers": answers, "held": held_answers, "recorded": recorded, "after": after}
        finally:
            server.close()


def _both_held(database_url: str) -> None:
    """Progress, not a clock: both holders' transactions are open in the database (their row locks taken)."""
    from moderation.tests.real_server import progress_wait

    def open_transactions() -> int:
        return database_query(
            database_url,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'",
        )[0][0]

    assert progress_wait(open_transactions, done=lambda n: n >= 2, stall=60) >= 2


def test_an_exhausted_pool_answers_503_database_unavailable_and_records_nothing(tmp_path):
    seen = _pool_exhausted(tmp_path, settings="reviewqueue.settings")
    answers = seen["answers"]
    for name in ("api", "decision_json", "item_post_json"):
        status, retry_after, content_type, body = answers[name]
        assert (status, retry_after, content_type) == (503, "5", "application/json"), (name, answers[name])
        assert json.loads(body)["error"] == "database_unavailable", (name, body)
    for name in ("item_post_page", "page"):
        status, retry_after, content_type, body = answers[name]
        assert (status, retry_after) == (503, "5") and content_type.startswith("text/html"), (name, answers[name])
        assert "Try again in 5 seconds" in body, body
    assert seen["held"] == [200, 200]  # the holders, once they went on, decided
    assert seen["recorded"] == (0, "pending", 0)  # no item submitted, the target undecided, no attempt logged
    assert seen["after"] == 200


def test_negative_control_without_the_middleware_the_pages_answer_500(tmp_path):
    seen = _pool_exhausted(tmp_path, settings="moderation.tests.no_overload_settings")
    assert {answers[0] for name, answers in seen["answers"].items() if name != "api"} == {500}, seen["answers"]
    assert seen["recorded"] == (0, "pending", 0)
