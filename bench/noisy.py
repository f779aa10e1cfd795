"""26. Noisy neighbours (issue 39): the moderators' pages while outside traffic bursts.

Four moderators (one client each, spread over the servers) load their queue page and decide
an item, over and over with a short pause, for a window; the same window is timed quiet
just before each burst and again under it. Each burst, on the same servers, with the task
worker running:

- webhooks: waves of 60 concurrent LangGraph deployment webhooks (valid token, a new thread
  each) for a deployment whose URL is a socket that accepts and answers 503 only after 10 s
  (the worker's discovery waits on it; the webhook only queues the thread);
- long-polls: 200 ``GET /api/v1/items/<id>/decision?wait=30`` held open (10 API clients × 20,
  the per-client cap), answered once the window ends;
- batches: 4 API clients posting ``POST /api/v1/items:batch`` (100 items, the default
  ``"start": "now"``) back to back;
- hung receiver: an operator's webhook endpoint that accepts and never answers, so every
  decision the moderators make is a delivery the worker waits ``WEBHOOK_TIMEOUT`` on.

Per burst: the moderators' queue page p99 and decision p99 as a ratio to the quiet window
before it (target ≤ 1.5), and their answers that were a 5xx or none at all (target 0).
Everything is on loopback, bounded in requests (``MAX_*``) and in time (the window).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.common import Login, Metric, Servers, log, median, percentile

MODERATORS = 4
THINK = 0.2  # seconds a moderator pauses between a page and a decision
SLOW_DEPLOYMENT = 10.0  # seconds the deployment's socket takes to answer
WEBHOOK_WAVE = 60
LONG_POLLS, WAITS_PER_CLIENT = 200, 20
BATCH, BATCH_CLIENTS = 100, 4
MAX_WAVES, MAX_BATCHES = 20, 200  # bounds on the bursts' requests, whatever the window
BODY = "A post to review: buy now at http://example.test, or write to someone@example.test."
_keys = itertools.count()


def decisions_needed(*, seconds: float) -> int:
    """Pending items the measure's eight windows may decide (the pool is made before it runs)."""
    return int(8 * MODERATORS * seconds / (2 * THINK)) + 50  # a page and a decision take about a pause more


class _Socket:
    """A loopback port that accepts every connection and answers 503 after ``delay`` s, or never (``delay=None``)."""

    def __init__(self, *, delay: float | None) -> None:
        self.delay = delay
        self.accepted = 0
        self._held: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=512)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            self._held.append(conn)
            if self.delay is not None:
                threading.Thread(target=self._answer_late, args=(conn,), daemon=True).start()

    def _answer_late(self, conn: socket.socket) -> None:
        if self._closed.wait(self.delay):
            return
        try:
            conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            conn.close()
        except OSError:
            pass

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        for conn in self._held:
            with contextlib.suppress(OSError):
                conn.close()


@dataclass
class _Window:
    pages: list[float] = field(default_factory=list)
    decisions: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)  # every moderator answer; 0: none (error or timeout)
    load: float = 0.0  # the machine's 1-minute load average at the window's end (shared machines drift)

    @property
    def failed(self) -> int:
        return sum(n for status, n in self.statuses.items() if status == 0 or status >= 500)

    def summary(self) -> dict[str, Any]:
        return {"page_p50_ms": median(self.pages), "page_p99_ms": percentile(self.pages, 99), "pages": len(self.pages),
                "decision_p50_ms": median(self.decisions), "decision_p99_ms": percentile(self.decisions, 99),
                "decisions": len(self.decisions), "statuses": dict(self.statuses), "load": self.load}


async def _moderate(client: httpx.AsyncClient, items: list[str], window: _Window, stop: asyncio.Event) -> None:
    async def timed(call: Callable[[], Awaitable[httpx.Response]], into: list[float]) -> None:
        start = time.perf_counter()
        try:
            status = (await call()).status_code
        except httpx.HTTPError:
            status = 0
        into.append((time.perf_counter() - start) * 1000)
        window.statuses[status] += 1

    while not stop.is_set():
        await timed(lambda: client.get("/"), window.pages)
        await asyncio.sleep(THINK / 2)
        if items:
            item = items.pop()
            await timed(lambda item=item: client.post(f"/api/items/{item}/decision", json={"decision": "approve"}),
                        window.decisions)
        await asyncio.sleep(THINK / 2)


async def _window(servers: Servers, logins: list[Login], items: list[str], seconds: float) -> _Window:
    window, stop = _Window(), asyncio.Event()
    clients = [httpx.AsyncClient(base_url=f"http://{servers.host(n)}", cookies=logins[n].cookies(), timeout=30,
                                 headers={"X-CSRFToken": logins[n].csrftoken, "Accept": "application/json"})
               for n in range(MODERATORS)]
    try:
        tasks = [asyncio.create_task(_moderate(c, items, window, stop)) for c in clients]
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.gather(*tasks)
        window.load = os.getloadavg()[0]
    finally:
        for c in clients:
            await c.aclose()
    return window


# --- the bursts: each starts, runs beside the moderators' window, and stops with what it saw ------------


class _Burst:
    key = ""
    label = ""

    def __init__(self, servers: Servers) -> None:
        self.servers = servers
        self.statuses: Counter = Counter()
        self._task: asyncio.Task | None = None
        self._stop = asyncio.Event()

    def prepare(self) -> None:
        """Its rows and sockets, outside the event loop (the ORM is synchronous)."""

    def finish(self) -> dict[str, Any]:
        """Undo what ``prepare`` made live; what it saw."""
        return {}

    async def start(self) -> None:
        self._task = asyncio.create_task(self.run())

    async def run(self) -> None:
        """The burst's own traffic, until ``stop`` (none: a burst that is only a state, as a hung receiver)."""

    async def stop(self) -> dict[str, Any]:
        self._stop.set()
        if self._task is not None:
            await self._task
        return {"burst_statuses": dict(self.statuses)}

    async def _send(self, call: Awaitable[httpx.Response]) -> None:
        try:
            self.statuses[(await call).status_code] += 1
        except httpx.HTTPError as exc:
            self.statuses[type(exc).__name__] += 1


class _Webhooks(_Burst):
    key, label = "webhooks", f"{WEBHOOK_WAVE} concurrent deployment webhooks, deployment answering in {SLOW_DEPLOYMENT:g} s"

    def prepare(self) -> None:
        from django.contrib.auth import get_user_model

        from moderation.delivery.models import ApiClient
        from moderation.review.deployments import _digest, deployment_webhook_path
        from moderation.review.models import Deployment

        self.deployment_socket = _Socket(delay=SLOW_DEPLOYMENT)
        name = f"noisy-{uuid.uuid4().hex[:8]}"
        secret = secrets.token_urlsafe(32)
        # As deployment_register writes it, minus its proof against a live LangGraph Server (a bare socket here).
        user = get_user_model().objects.create(username=f"langgraph.{name}")
        client = ApiClient.objects.create(name=f"langgraph.{name}", user=user, scopes=[])
        self.deployment = Deployment.objects.create(
            name=name, url=self.deployment_socket.url, graphs={"agent": {"match": "graph_id", "team": None, "policy": {}}},
            client=client, webhook_digest=_digest(secret))
        self.path = deployment_webhook_path(deployment=self.deployment, secret=secret)
        self.waves = 0

    async def run(self) -> None:
        clients = [httpx.AsyncClient(base_url=f"http://{host}", timeout=60, limits=httpx.Limits(max_connections=WEBHOOK_WAVE))
                   for host in self.servers.hosts]
        try:
            while not self._stop.is_set() and self.waves < MAX_WAVES:
                await asyncio.gather(*(self._send(clients[n % len(clients)].post(self.path, json={"thread_id": str(uuid.uuid4())}))
                                       for n in range(WEBHOOK_WAVE)))
                self.waves += 1
        finally:
            for c in clients:
                await c.aclose()

    def finish(self) -> dict[str, Any]:
        # Its queued discoveries end at once from here on (an inactive deployment is not read).
        self.deployment.is_active = False
        self.deployment.save(update_fields=["is_active"])
        self.deployment_socket.close()
        return {"waves": self.waves, "deployment_connections": self.deployment_socket.accepted}


class _LongPolls(_Burst):
    key, label = "long_polls", f"{LONG_POLLS} long-polls (wait=30)"

    def __init__(self, servers: Servers, moderator: Login, staff: Login) -> None:
        super().__init__(servers)
        self.moderator, self.staff = moderator, staff

    def prepare(self) -> None:
        from moderation.api.clients import apiclient_create

        self.tokens = [apiclient_create(name=f"bench-noisy-{uuid.uuid4().hex[:8]}", scopes=["items:write", "items:read"])[1]
                       for _ in range(LONG_POLLS // WAITS_PER_CLIENT)]

    async def start(self) -> None:
        self.apis = [httpx.AsyncClient(base_url=f"http://{self.servers.host(n)}", timeout=60,
                                       headers={"Authorization": f"Bearer {token}"},
                                       limits=httpx.Limits(max_connections=WAITS_PER_CLIENT))
                     for n, token in enumerate(self.tokens)]
        self.items = []
        for api in self.apis:
            answer = await api.post("/api/v1/items", json={"title": f"Waited on {next(_keys)}", "body": BODY,
                                                          "source": "bench-noisy"})
            assert answer.status_code == 201, answer.text
            self.items.append(answer.json()["id"])
        self.waits = [asyncio.create_task(self.apis[n % len(self.apis)].get(
            f"/api/v1/items/{self.items[n % len(self.apis)]}/decision", params={"wait": 30})) for n in range(LONG_POLLS)]
        await self._open_wait()

    async def _open_wait(self, timeout: float = 60) -> None:
        staff = [httpx.AsyncClient(base_url=f"http://{host}", cookies=self.staff.cookies(), timeout=30)
                 for host in self.servers.hosts]
        deadline = time.perf_counter() + timeout
        try:
            while sum([(await s.get("/healthz")).json()["longpoll"]["waits"] for s in staff]) < LONG_POLLS:
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"fewer than {LONG_POLLS} long-poll waits open after {timeout:.0f} s")
                await asyncio.sleep(0.1)
        finally:
            for s in staff:
                await s.aclose()

    async def stop(self) -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=f"http://{self.servers.host(0)}", cookies=self.moderator.cookies(),
                                     headers={"X-CSRFToken": self.moderator.csrftoken}, timeout=60) as moderator:
            for item in self.items:
                await moderator.post(f"/api/items/{item}/decision", json={"decision": "approve"})
        for wait in asyncio.as_completed(self.waits):
            await self._send(wait)
        for api in self.apis:
            await api.aclose()
        return await super().stop()


class _Batches(_Burst):
    key, label = "batches", f"batch submits at full rate ({BATCH_CLIENTS} clients, {BATCH} items, start now)"

    def prepare(self) -> None:
        from moderation.api.clients import apiclient_create

        self.tokens = [apiclient_create(name=f"bench-noisy-{uuid.uuid4().hex[:8]}", scopes=["items:write"])[1]
                       for _ in range(BATCH_CLIENTS)]
        self.batches = 0

    async def run(self) -> None:
        async def client(n: int, token: str) -> None:
            async with httpx.AsyncClient(base_url=f"http://{self.servers.host(n)}/api/v1", timeout=120,
                                         headers={"Authorization": f"Bearer {token}"}) as api:
                while not self._stop.is_set() and self.batches < MAX_BATCHES:
                    self.batches += 1
                    await self._send(api.post("/items:batch", json={"items": [
                        {"title": f"Noisy batch {next(_keys)}", "body": BODY, "source": "bench-noisy"}
                        for _ in range(BATCH)]}))

        await asyncio.gather(*(client(n, token) for n, token in enumerate(self.tokens)))

    def finish(self) -> dict[str, Any]:
        return {"batches": self.batches, "items_sent": self.batches * BATCH}


class _HungReceiver(_Burst):
    key, label = "hung_receiver", "a webhook receiver that accepts and never answers"

    def prepare(self) -> None:
        from moderation.delivery.models import WebhookEndpoint

        self.receiver = _Socket(delay=None)
        self.endpoint = WebhookEndpoint.objects.create(name=f"bench-hung-{uuid.uuid4().hex[:8]}", url=self.receiver.url,
                                                       events=["item.decided"])

    def finish(self) -> dict[str, Any]:
        from moderation.delivery.models import WebhookDelivery

        deliveries = WebhookDelivery.objects.filter(endpoint=self.endpoint).count()
        self.endpoint.active = False
        self.endpoint.save(update_fields=["active"])
        self.receiver.close()
        return {"deliveries": deliveries, "receiver_connections": self.receiver.accepted}


def _settle(*, timeout: float) -> None:
    """Wait until the worker has nothing due (the burst's queued work done) before the next quiet window."""
    from django.db.models import Q
    from django.utils import timezone
    from django_tasks.base import TaskResultStatus
    from django_tasks_db.models import DBTaskResult, get_date_max

    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline and DBTaskResult.objects.filter(
            Q(run_after=get_date_max()) | Q(run_after__lte=timezone.now()), status=TaskResultStatus.READY).exists():
        time.sleep(0.2)
    time.sleep(1.0)


def bench_noisy_neighbours(servers: Servers, logins: list[Login], staff: Login, items: list[str], *, seconds: float,
                           process_note: str) -> list[Metric]:
    """Measure 26: for each burst, a quiet window then the same window under the burst; three lines each."""
    bursts = [_Webhooks(servers), _LongPolls(servers, logins[-1], staff), _Batches(servers), _HungReceiver(servers)]
    metrics: list[Metric] = []

    async def measured(burst: _Burst) -> tuple[_Window, _Window, dict[str, Any]]:
        quiet = await _window(servers, logins, items, seconds)
        await burst.start()
        try:
            loud = await _window(servers, logins, items, seconds)
        finally:
            seen = await burst.stop()
        return quiet, loud, seen

    asyncio.run(_window(servers, logins, items, 2.0))  # warm-up: first connections, first pages
    for burst in bursts:
        burst.prepare()
        try:
            quiet, loud, seen = asyncio.run(measured(burst))
        finally:
            finished = burst.finish()
        seen.update(finished)
        _settle(timeout=60)
        q, b = quiet.summary(), loud.summary()
        detail = {"quiet": q, "burst": b, **seen, "seconds": seconds, "moderators": MODERATORS}
        log(f"26. {burst.label}: page p99 {q['page_p99_ms']:.0f} → {b['page_p99_ms']:.0f} ms, decision p99 "
            f"{q['decision_p99_ms']:.0f} → {b['decision_p99_ms']:.0f} ms, moderators {dict(loud.statuses)}; {seen}")
        quiet_name = "p99 quiet, same moderators, just before"
        metrics += [
            Metric(f"noisy_{burst.key}_page", f"26. {burst.label} ({process_note}): moderators' queue page p99",
                   b["page_p99_ms"], "ms", q["page_p99_ms"], quiet_name, target=1.5, check="ratio", op="<=", detail=detail),
            Metric(f"noisy_{burst.key}_decision", "26.   ... moderators' decision p99", b["decision_p99_ms"], "ms",
                   q["decision_p99_ms"], quiet_name, target=1.5, check="ratio", op="<="),
            Metric(f"noisy_{burst.key}_5xx", "26.   ... moderators' answers 5xx or none", loud.failed, "answers",
                   quiet.failed, "the same, quiet", target=0, check="value", op="<="),
        ]
    return metrics
