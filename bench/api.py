"""Benches of the service API against real daphne servers and a real webhook worker (issue 13).

- 8. API submit items/s, one per request and in batches of 100, vs the bare graph start
  in-process (the floor every submit that starts its graph pays). A batch with
  ``start: "queued"`` is accepted without starting graphs (``moderation.review.starts``);
  target: ≥ 500 items/s accepted. Beside it, how fast the one task worker then put those
  items in the queue (started their graphs), against the same floor.
- 9. Webhook latency: decision answered → signed webhook received, at 10 decisions/s,
  with one `manage.py db_worker` (started by the suite; it applies the decisions too);
  target p99 ≤ 250 ms.
- 10. Long-poll wake-up: decision answered → the waiting GET answered; target p99 ≤ 100 ms.
- 18. A moderator's queue page p50 before, during and after 200 long-poll waits on its
  server (a sleeping wait holds no database connection); target ≤ 1.5× of before, during
  and after, and every wait answered 200 once its item is decided.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from bench.common import Login, Metric, Servers, log, percentile

BATCH = 100
BODY = "A post to review: buy now at http://example.test, or write to someone@example.test."
_keys = itertools.count()


class _Receiver:
    """Records when each webhook arrives, by the item it names (first arrival only)."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        bench = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                import json

                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                if body.get("type") == "item.decided":
                    bench.arrived.setdefault(body["data"]["id"], time.perf_counter())
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def stop(self) -> None:
        self.server.shutdown()


def _submit_rate(
    host: str,
    token: str,
    *,
    batch: int,
    seconds: float,
    concurrency: int,
    start_mode: str = "now",
) -> tuple[float, list[str]]:
    created: list[str] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def item() -> dict:
        return {"title": f"API bench {next(_keys)}", "body": BODY, "source": "bench-api"}

    def work() -> int:
        n = 0
        with httpx.Client(base_url=f"http://{host}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=120) as c:
            while time.perf_counter() < stop_at:
                if batch == 1:
                    answer = c.post("/items", json=item(), headers={"Idempotency-Key": uuid.uuid4().hex})
                    ids = [answer.json()["id"]] if answer.status_code == 201 else []
                else:
                    answer = c.post("/items:batch", json={"items": [item() for _ in range(batch)], "start": start_mode})
                    if answer.status_code != 200:
                        raise RuntimeError(f"batch submit answered {answer.status_code}: {answer.text[:300]}")
                    ids = [r["item"]["id"] for r in answer.json()["results"] if r["outcome"] in ("created", "accepted")]
                with lock:
                    created.extend(ids)
                n += len(ids)
        return n

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        total = sum(pool.map(lambda _: work(), range(concurrency)))
    return total / (time.perf_counter() - start), created


def _started_wait(items: list[str], *, timeout: float = 300) -> float:
    """When no item of ``items`` was STARTING any more (the worker had started them all)."""
    from moderation.items.models import ItemStatus, QueueItem

    deadline = time.perf_counter() + timeout
    while QueueItem.objects.filter(public_id__in=items, status=ItemStatus.STARTING).exists():
        if time.perf_counter() > deadline:
            raise RuntimeError(f"the worker had not started {len(items)} queued items after {timeout:.0f} s")
        time.sleep(0.05)
    return time.perf_counter()


def _decide(host: str, login: Login, item: str) -> float:
    """Decide ``item`` as ``login``; the moment the answer arrived."""
    answer = httpx.post(
        f"http://{host}/api/items/{item}/decision",
        json={"decision": "approve"},
        cookies=login.cookies(),
        headers={"X-CSRFToken": login.csrftoken},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return time.perf_counter()


def _longpoll_latency(host: str, token: str, login: Login, items: list[str]) -> list[float]:
    latencies = []
    for item in items:
        woke: dict[str, float] = {}

        def wait(item=item, woke=woke):
            answer = httpx.get(
                f"http://{host}/api/v1/items/{item}/decision",
                params={"wait": 30},
                headers={"Authorization": f"Bearer {token}"},
                timeout=60,
            )
            woke["at"] = time.perf_counter()
            woke["status"] = answer.status_code

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.15)  # the wait is open before the decision
        decided_at = _decide(host, login, item)
        waiter.join(timeout=40)
        if woke.get("status") == 200:
            latencies.append((woke["at"] - decided_at) * 1000)
    return latencies


def _webhook_latency(host: str, login: Login, items: list[str], receiver: _Receiver, *, rate: float) -> list[float]:
    answered: dict[str, float] = {}
    for item in items:
        due = time.perf_counter() + 1 / rate
        answered[item] = _decide(host, login, item)
        time.sleep(max(0.0, due - time.perf_counter()))
    deadline = time.perf_counter() + 30
    while time.perf_counter() < deadline and not all(i in receiver.arrived for i in items):
        time.sleep(0.05)
    return [(receiver.arrived[i] - answered[i]) * 1000 for i in items if i in receiver.arrived]


def bench_api(servers: Servers, logins: list[Login], *, seconds: float, bare_rate: float) -> list[Metric]:
    """The API benches against the servers; a task worker is running beside the first."""
    from moderation.api.clients import apiclient_create
    from moderation.delivery.models import WebhookEndpoint

    _, token = apiclient_create(name=f"bench-{uuid.uuid4().hex[:8]}", scopes=["items:write", "items:read"])
    receiver = _Receiver()
    WebhookEndpoint.objects.create(name="bench", url=receiver.url, events=["item.decided"])
    host = servers.host(0)
    metrics: list[Metric] = []
    try:
        _submit_rate(host, token, batch=1, seconds=0.5, concurrency=2)  # warm-up
        one, _ = _submit_rate(host, token, batch=1, seconds=seconds, concurrency=4)
        log(f"api: submit one per request {one:.0f} items/s")
        batched, pool = _submit_rate(host, token, batch=BATCH, seconds=seconds, concurrency=2)
        log(f"api: submit in batches of {BATCH}, graphs started in the request, {batched:.0f} items/s")
        began = time.perf_counter()
        queued, accepted = _submit_rate(host, token, batch=BATCH, seconds=seconds, concurrency=2, start_mode="queued")
        log(f"api: submit in batches of {BATCH}, start queued, {queued:.0f} items/s accepted; waiting for the worker")
        started = len(accepted) / (_started_wait(accepted) - began)
        log(f"api: the worker put them in the queue at {started:.0f} items/s")
        floor = "bare graph start to interrupt, in-process"
        metrics += [
            Metric("api_submit_one", "8. API submit, one item per request (4 clients)", one, "items/s", bare_rate, floor),
            Metric(
                "api_submit_batch",
                f"8. API submit, batches of {BATCH}, start now (2 clients)",
                batched,
                "items/s",
                bare_rate,
                floor,
            ),
            Metric(
                "api_submit_queued",
                f"8. API submit, batches of {BATCH}, start queued: accepted (2 clients)",
                queued,
                "items/s",
                bare_rate,
                floor,
                target=500,
                check="value",
                op=">=",
                detail={"items": len(accepted)},
            ),
            Metric(
                "api_queued_started",
                "8. ... those items in the queue, started by one task worker",
                started,
                "items/s",
                bare_rate,
                floor,
                detail={"items": len(accepted)},
            ),
        ]
        polls = _longpoll_latency(host, token, logins[0], pool[:20])
        log(f"api: long-poll wake-up p50 {percentile(polls, 50):.1f} ms, p99 {percentile(polls, 99):.1f} ms ({len(polls)})")
        metrics.append(
            Metric(
                "longpoll_p99",
                "10. long-poll wake-up after the decision's answer, p99",
                percentile(polls, 99),
                "ms",
                percentile(polls, 50),
                "p50 of the same run",
                target=100,
                check="value",
                op="<=",
                detail={"waits": len(polls), "expected": 20},
            )
        )
        hooks = _webhook_latency(host, logins[1], pool[20 : 20 + int(max(20, 10 * seconds))], receiver, rate=10)
        log(f"api: webhook p50 {percentile(hooks, 50):.1f} ms, p99 {percentile(hooks, 99):.1f} ms ({len(hooks)})")
        metrics.append(
            Metric(
                "webhook_p99",
                "9. decision answered → webhook received, 10 dec/s, one worker, p99",
                percentile(hooks, 99),
                "ms",
                percentile(hooks, 50),
                "p50 of the same run",
                target=250,
                check="value",
                op="<=",
                detail={"webhooks": len(hooks)},
            )
        )
    finally:
        receiver.stop()
    return metrics


# --- 18. a moderator's page while 200 long-poll waits are open ----------------------------------------

WAITS_PER_CLIENT = 20  # LONGPOLL_WAITS_PER_CLIENT's default: 200 waits take 10 clients


async def _page_p50(client: httpx.AsyncClient, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        response = await client.get("/")
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, f"the queue page answered {response.status_code}"
    return percentile(times, 50)


async def _waits_open(staff: httpx.AsyncClient, count: int, *, timeout: float = 120) -> None:
    deadline = time.perf_counter() + timeout
    while (await staff.get("/healthz")).json()["longpoll"]["waits"] < count:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"fewer than {count} long-poll waits open after {timeout:.0f} s")
        await asyncio.sleep(0.1)


async def _page_under_waits(
    host: str,
    login: Login,
    staff: Login,
    tokens: list[str],
    *,
    waits: int,
    reps: int,
    rss_kib,
) -> dict:
    def client(who: Login | None = None, token: str | None = None) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=f"http://{host}",
            cookies=who.cookies() if who else None,
            timeout=120,
            headers={"X-CSRFToken": who.csrftoken} if who else {"Authorization": f"Bearer {token}"},
            limits=httpx.Limits(max_connections=WAITS_PER_CLIENT, max_keepalive_connections=WAITS_PER_CLIENT),
        )

    moderator, ops = client(login), client(staff)
    apis = [client(token=token) for token in tokens]
    try:
        items = []
        for api in apis:
            answer = await api.post(
                "/api/v1/items", json={"title": f"Waited on {next(_keys)}", "body": BODY, "source": "bench-waits"}
            )
            assert answer.status_code == 201, answer.text
            items.append(answer.json()["id"])
        await _page_p50(moderator, 5)  # warm-up
        before = await _page_p50(moderator, reps)

        async def wait(api: httpx.AsyncClient, item: str) -> int:
            answer = await api.get(f"/api/v1/items/{item}/decision", params={"wait": 60})
            return answer.status_code

        waiting = [asyncio.create_task(wait(apis[n % len(apis)], items[n % len(apis)])) for n in range(waits)]
        await _waits_open(ops, waits)
        rss_during = rss_kib()
        during = await _page_p50(moderator, reps)
        for item in items:
            answer = await moderator.post(f"/api/items/{item}/decision", json={"decision": "approve"})
            assert answer.status_code == 200, answer.text
        statuses = Counter(await asyncio.gather(*waiting))
        after = await _page_p50(moderator, reps)
        return {
            "before_ms": before,
            "during_ms": during,
            "after_ms": after,
            "waits": waits,
            "wait_statuses": dict(statuses),
            "reps": reps,
            "rss_during_kib": rss_during,
        }
    finally:
        for c in (moderator, ops, *apis):
            await c.aclose()


def bench_page_under_waits(servers: Servers, login: Login, staff: Login, *, waits: int, reps: int) -> list[Metric]:
    """A moderator's queue page, p50 over ``reps`` loads, before, during and after ``waits`` long-poll
    waits on the same server (10 API clients, 20 waits each); then their items are decided."""
    from moderation.api.clients import apiclient_create

    tokens = [
        apiclient_create(name=f"bench-waits-{uuid.uuid4().hex[:8]}", scopes=["items:write", "items:read"])[1]
        for _ in range(max(1, waits // WAITS_PER_CLIENT))
    ]
    idle_rss = servers.rss_kib()[0]
    result = asyncio.run(
        _page_under_waits(servers.host(0), login, staff, tokens, waits=waits, reps=reps, rss_kib=lambda: servers.rss_kib()[0])
    )
    result["rss_idle_kib"], result["rss_after_kib"] = idle_rss, servers.rss_kib()[0]
    log(
        f"page under waits: p50 {result['before_ms']:.1f} ms before, {result['during_ms']:.1f} ms during {waits} waits, "
        f"{result['after_ms']:.1f} ms after; waits answered {result['wait_statuses']}; server RSS "
        f"{idle_rss / 1024:.0f} MiB idle, {result['rss_during_kib'] / 1024:.0f} MiB during"
    )
    if result["wait_statuses"] != {200: waits}:
        log(f"WARNING: not every wait answered 200: {result['wait_statuses']}")
    baseline = "p50 before the waits, same page, same server"
    return [
        Metric(
            "page_during_waits",
            f"18. moderator's queue page p50 during {waits} long-poll waits (one server)",
            result["during_ms"],
            "ms",
            result["before_ms"],
            baseline,
            target=1.5,
            check="ratio",
            op="<=",
            detail=result,
        ),
        Metric(
            "page_after_waits",
            f"18. moderator's queue page p50 after the {waits} waits were answered",
            result["after_ms"],
            "ms",
            result["before_ms"],
            baseline,
            target=1.5,
            check="ratio",
            op="<=",
            detail=result,
        ),
    ]
