"""A burst of deployment webhooks against a real server on a small database pool (PostgreSQL), a real
``langgraph dev`` behind a gate that answers slowly, and a real worker.

Each webhook only queues its thread and answers 202, so while 60 of them arrive at once the
moderators' queue and item pages answer 200, a wrong token is still a 404, and the worker
discovers every thread afterwards. The negative control serves the old webhook (the thread
read from the deployment in the request, ``moderation.tests.naive_webhook_settings``): the
requests hold the pool while the deployment answers, and requests fail.
"""

from __future__ import annotations

import http.client
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pytest

from e2e.server import LiveServer
from moderation.tests.cluster_support import channel_prefix, cluster_env, database_query, fresh_database, services_require
from moderation.tests.deployments_support import agent_run, sdk
from moderation.tests.langgraph_server import PortGate
from moderation.tests.real_server import progress_wait

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

POOL = 4  # DB_POOL_SIZE of the server and of the worker
THREADS = 60  # webhooks in the burst, each naming a thread of its own
FORGED = 10  # wrong-token webhooks sent during the burst
SLOW = 2.0  # seconds the deployment takes to accept each connection during the burst


@dataclass
class Burst:
    webhooks: list[int] = field(default_factory=list)
    forged: list[int] = field(default_factory=list)
    pages: list[int] = field(default_factory=list)
    discovered: int = 0


def _post(server: LiveServer, path: str, body: dict) -> int:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=120)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def _get(server: LiveServer, path: str, session: str) -> int:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=120)
    try:
        conn.request("GET", path, headers={"Cookie": f"sessionid={session}"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def _burst(tmp_path, langgraph_server, *, settings: str, discovery: bool = True) -> Burst:
    admin_url, redis_url = services_require()
    env = {
        **cluster_env(redis_url=redis_url, prefix=channel_prefix("hooks")),
        "DB_POOL_SIZE": str(POOL),
        "REVIEWQUEUE_APPLY_INLINE": "0",
        "APPLY_LANES": "0",
        "LANGGRAPH_SWEEP_INTERVAL": "3600",
    }
    gate = PortGate(langgraph_server.url)
    burst = Burst()
    with fresh_database(admin_url, "hooks") as database_url:
        server = LiveServer(tmp_path, database_url=database_url, extra_env=env, settings=settings)
        try:
            seeded = server.seed(users=["alice"], items=2)
            assistant = sdk(langgraph_server.url).assistants.create(graph_id="hitl")["assistant_id"]
            hook = urlsplit(
                server.manage(
                    "deployment_add", "agents", "--url", gate.url, "--graph", assistant, "--base-url", server.url
                ).strip()
            )
            path = f"{hook.path}?{hook.query}"
            with ThreadPoolExecutor(8) as agents:
                threads = list(agents.map(lambda _: agent_run(langgraph_server.url, assistant), range(THREADS)))
            server.start()
            server.worker_start(interval=0.2, delivery_lane=False)
            session = seeded.sessions["alice"]
            pages = [f"/items/{seeded.items[0]}/", "/"]
            gate.delay = SLOW
            done = threading.Event()

            def moderator() -> None:
                n = 0
                while not done.is_set():
                    burst.pages.append(_get(server, pages[n % 2], session))
                    n += 1

            moderators = [threading.Thread(target=moderator) for _ in range(2)]
            for m in moderators:
                m.start()
            with ThreadPoolExecutor(THREADS + FORGED) as senders:
                hooks = [senders.submit(_post, server, path, {"thread_id": t}) for t in threads]
                forged = [
                    senders.submit(_post, server, path.replace("token=", "token=x"), {"thread_id": t}) for t in threads[:FORGED]
                ]
                burst.webhooks = [h.result() for h in hooks]
                burst.forged = [f.result() for f in forged]
            done.set()
            for m in moderators:
                m.join()
            gate.delay = 0.0
            if not discovery:
                return burst

            def discovered() -> int:
                return database_query(
                    database_url, "SELECT count(*) FROM moderation_queueitem WHERE source = %s", ["langgraph:agents"]
                )[0][0]

            burst.discovered = progress_wait(discovered, done=lambda n: n == THREADS, stall=60)
        finally:
            server.close()
            gate.close()
    return burst


def test_a_burst_of_webhooks_against_a_slow_deployment_leaves_moderators_pages_answering(tmp_path, langgraph_server):
    burst = _burst(tmp_path, langgraph_server, settings="reviewqueue.settings")
    assert burst.webhooks == [202] * THREADS
    assert burst.forged == [404] * FORGED
    assert burst.pages and set(burst.pages) == {200}, sorted(set(burst.pages))
    assert burst.discovered == THREADS  # every thread found by the worker once the deployment answered


@pytest.mark.io_guard_expected  # and the guard reports the request's connection held across the read
def test_negative_control_the_webhook_that_reads_the_deployment_in_the_request_fails_requests(
    tmp_path,
    langgraph_server,
):
    burst = _burst(tmp_path, langgraph_server, settings="moderation.tests.naive_webhook_settings", discovery=False)
    failed = [s for s in burst.webhooks + burst.forged + burst.pages if s >= 500]
    assert failed, (burst.webhooks, burst.forged, burst.pages)
