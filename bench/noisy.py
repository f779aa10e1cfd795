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

The process split (the bulkhead between processes, ``SERVE_ROUTES``): after each burst that is
traffic (webhooks, long-polls, batches), the same burst again, sent this time to a daphne process
of its own (``SERVE_ROUTES=outside``, on the same database, layer and worker, at the lower CPU
priority the deployment docs' unit gives it: ``BENCH_OUTSIDE_NICE``, 19) while the moderators stay
on theirs, judged against the same quiet window (measured before the same-process burst: the
split's window comes later, which a machine whose load rises counts against it). A hung receiver is
no traffic to route, so it has no split line.
Everything is on loopback, bounded in requests (``MAX_*``) and in time (the window); a burst's
requests are sent from a process of its own (``_Traffic``), so the bench's own work does not delay
the moderators' answers it times (how late its loop woke is recorded beside them).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing
import os
import secrets
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
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
# The burst senders' niceness (BENCH_SENDER_NICE=0: they compete with the servers for the cores as equals).
SENDER_NICE = int(os.environ.get("BENCH_SENDER_NICE", "19"))


WINDOWS = 11  # a quiet one and one under each of four bursts, and three more under the split bursts


def decisions_needed(*, seconds: float) -> int:
    """Pending items the measure's windows may decide (the pool is made before it runs)."""
    # A moderator decides at most once a pause (THINK), however fast the answers: a run at load 7 ran out
    # at "a page and a decision take about a pause more", and the last window timed no decision.
    return int((WINDOWS * seconds + 2) * MODERATORS / THINK) + 50  # the windows and the 2 s warm-up


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
    lags: list[float] = field(default_factory=list)  # the bench's own event loop late, ms
    cpu: dict[str, int] = field(default_factory=dict)  # % of one core per part over the window (``_cpu_read``)

    @property
    def failed(self) -> int:
        return sum(n for status, n in self.statuses.items() if status == 0 or status >= 500)

    def summary(self) -> dict[str, Any]:
        return {
            "page_p50_ms": median(self.pages),
            "page_p99_ms": percentile(self.pages, 99),
            "pages": len(self.pages),
            "decision_p50_ms": median(self.decisions),
            "decision_p99_ms": percentile(self.decisions, 99),
            "decisions": len(self.decisions),
            "statuses": dict(self.statuses),
            "load": self.load,
            "client_loop_lag_p50_ms": median(self.lags),
            "client_loop_lag_p99_ms": percentile(self.lags, 99),
            "cpu_percent": self.cpu,
        }


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
            await timed(
                lambda item=item: client.post(f"/api/items/{item}/decision", json={"decision": "approve"}), window.decisions
            )
        await asyncio.sleep(THINK / 2)


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far, every thread's (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def servers_renice(servers: Servers, nice: int) -> None:
    """The servers' processes at CPU priority ``nice`` against the host's other processes (as ``CPUWeight=`` puts a
    systemd service): every thread (threads they start later inherit it), and, as each leads a session of its own
    (``e2e.forked``), its session's autogroup (``_lowest_share``)."""
    for server in servers.live:
        assert server.process is not None
        for task in Path(f"/proc/{server.process.pid}/task").iterdir():
            with contextlib.suppress(ProcessLookupError):
                os.setpriority(os.PRIO_PROCESS, int(task.name), nice)
        with contextlib.suppress(OSError):
            Path(f"/proc/{server.process.pid}/autogroup").write_text(str(nice))


def _postgres_pids() -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            if stat.read_text().startswith(f"{stat.parent.name} (postgres)"):
                pids.append(int(stat.parent.name))
    return pids


def _cpu_read(servers: Servers, outside: Servers | None) -> dict[str, float]:
    """Where the machine's CPU goes, by part: the moderators' daphne processes, the outside's (the split's), the task
    workers, every PostgreSQL process (the server is shared: others' work counts too), and this bench process."""
    return {
        "servers": sum(_cpu_seconds(s.process.pid) for s in servers.live if s.process is not None),
        "outside": sum(_cpu_seconds(s.process.pid) for s in (outside.live if outside else []) if s.process is not None),
        "worker": sum(_cpu_seconds(w.pid) for s in servers.live for w in s.workers),
        "postgres": sum(_cpu_seconds(pid) for pid in _postgres_pids()),
        "bench": _cpu_seconds(os.getpid()),
    }


async def _window(
    servers: Servers, logins: list[Login], items: list[str], seconds: float, outside: Servers | None = None
) -> _Window:
    window, stop = _Window(), asyncio.Event()
    cpu_before, started = _cpu_read(servers, outside), time.perf_counter()
    clients = [
        httpx.AsyncClient(
            base_url=f"http://{servers.host(n)}",
            cookies=logins[n].cookies(),
            timeout=30,
            headers={"X-CSRFToken": logins[n].csrftoken, "Accept": "application/json"},
        )
        for n in range(MODERATORS)
    ]

    async def lag_probe() -> None:
        # How late this loop wakes: time a moderator's answer waited in the bench itself, not in a server.
        while not stop.is_set():
            start = time.perf_counter()
            await asyncio.sleep(0.01)
            window.lags.append((time.perf_counter() - start - 0.01) * 1000)

    try:
        tasks = [asyncio.create_task(_moderate(c, items, window, stop)) for c in clients]
        tasks.append(asyncio.create_task(lag_probe()))
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.gather(*tasks)
        window.load = os.getloadavg()[0]
        elapsed = time.perf_counter() - started
        window.cpu = {
            part: round(100 * (used - cpu_before[part]) / elapsed) for part, used in _cpu_read(servers, outside).items()
        }
    finally:
        for c in clients:
            await c.aclose()
    return window


# --- the bursts: each starts, runs beside the moderators' window, and stops with what it saw ------------


@dataclass
class _Traffic:
    """What a burst sends, sent from a process of its own: on the moderators' event loop a wave of 60 requests
    made it wake up to 180 ms late, and on a thread beside it 80 ms (one interpreter lock), time their answers
    spent in the bench, not in a server."""

    kind: str  # "webhooks" or "batches"
    hosts: list[str]
    path: str = ""  # the webhook's
    tokens: list[str] = field(default_factory=list)  # the batch clients'


async def _sent(statuses: Counter, call: Awaitable[httpx.Response]) -> None:
    try:
        statuses[(await call).status_code] += 1
    except httpx.HTTPError as exc:
        statuses[type(exc).__name__] += 1


async def _webhooks_send(traffic: _Traffic, stop: Any, statuses: Counter) -> int:
    clients = [
        httpx.AsyncClient(base_url=f"http://{host}", timeout=60, limits=httpx.Limits(max_connections=WEBHOOK_WAVE))
        for host in traffic.hosts
    ]
    waves = 0
    try:
        while not stop.is_set() and waves < MAX_WAVES:
            await asyncio.gather(
                *(
                    _sent(statuses, clients[n % len(clients)].post(traffic.path, json={"thread_id": str(uuid.uuid4())}))
                    for n in range(WEBHOOK_WAVE)
                )
            )
            waves += 1
    finally:
        for c in clients:
            await c.aclose()
    return waves


async def _batches_send(traffic: _Traffic, stop: Any, statuses: Counter) -> int:
    batches = 0

    async def client(n: int, token: str) -> None:
        nonlocal batches
        host = traffic.hosts[n % len(traffic.hosts)]
        async with httpx.AsyncClient(
            base_url=f"http://{host}/api/v1", timeout=120, headers={"Authorization": f"Bearer {token}"}
        ) as api:
            while not stop.is_set() and batches < MAX_BATCHES:
                batches += 1
                await _sent(
                    statuses,
                    api.post(
                        "/items:batch",
                        json={
                            "items": [
                                {"title": f"Noisy batch {uuid.uuid4().hex[:12]}", "body": BODY, "source": "bench-noisy"}
                                for _ in range(BATCH)
                            ]
                        },
                    ),
                )

    await asyncio.gather(*(client(n, token) for n, token in enumerate(traffic.tokens)))
    return batches


def _lowest_share(nice: int) -> None:
    """This process at CPU priority ``nice`` against every other process on the host, not only its own session's.

    With the kernel's autogroups (``/proc/sys/kernel/sched_autogroup_enabled``, on by default) a nice
    value ranks a process only within its session: each session shares the cores as an equal. A
    sender at nice 19 in the bench's session spent 2.6-5.1 CPU-seconds on a 10 s burst beside servers at
    nice 0 in theirs. So it leads a session of its own and sets that session's nice.
    """
    os.nice(nice)
    autogroup = Path("/proc/self/autogroup")
    if autogroup.exists():
        os.setsid()
        with contextlib.suppress(OSError):  # a kernel without autogroups' nice: the process's own nice stands
            autogroup.write_text(str(nice))


def _traffic_main(traffic: _Traffic, stop: Any, out: Any) -> None:
    """The burst's process: says it is ready, sends until ``stop``, then puts (statuses, how many sent).

    It stands for other hosts (an agent fleet, other services), so it runs at ``SENDER_NICE``: on
    this one host it takes the CPU the servers leave, not a share of theirs.
    """
    _lowest_share(SENDER_NICE)
    statuses: Counter = Counter()
    out.put("ready")
    sent = asyncio.run({"webhooks": _webhooks_send, "batches": _batches_send}[traffic.kind](traffic, stop, statuses))
    out.put((dict(statuses), sent))


class _Burst:
    key = ""
    label = ""

    def __init__(self, servers: Servers, hosts: list[str] | None = None) -> None:
        self.servers = servers
        self.hosts = hosts or servers.hosts  # where its traffic goes: the moderators' servers, or the outside's
        self.statuses: Counter = Counter()
        self.sent = 0  # waves or batches its process sent
        self._process: Any = None

    def prepare(self) -> None:
        """Its rows and sockets, outside the event loop (the ORM is synchronous)."""

    def finish(self) -> dict[str, Any]:
        """Undo what ``prepare`` made live; what it saw."""
        return {}

    def traffic(self) -> _Traffic | None:
        """What it sends for the window (none: a burst that is only a state, as a hung receiver)."""
        return None

    async def start(self) -> None:
        traffic = self.traffic()
        if traffic is None:
            return
        context = multiprocessing.get_context("spawn")
        self._stop, self._out = context.Event(), context.Queue()
        self._process = context.Process(target=_traffic_main, args=(traffic, self._stop, self._out), daemon=True)
        self._process.start()
        assert await asyncio.to_thread(self._out.get, timeout=120) == "ready"

    async def stop(self) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        if self._process is not None:
            seen["sender_cpu_seconds"] = round(_cpu_seconds(self._process.pid), 1)
            self._stop.set()
            statuses, self.sent = await asyncio.to_thread(self._out.get, timeout=300)
            self.statuses.update(statuses)
            await asyncio.to_thread(self._process.join)
        return {"burst_statuses": dict(self.statuses), **seen}

    async def _send(self, call: Awaitable[httpx.Response]) -> None:
        await _sent(self.statuses, call)


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
            name=name,
            url=self.deployment_socket.url,
            graphs={"agent": {"match": "graph_id", "team": None, "policy": {}}},
            client=client,
            webhook_digest=_digest(secret),
        )
        self.path = deployment_webhook_path(deployment=self.deployment, secret=secret)

    def traffic(self) -> _Traffic:
        return _Traffic(kind="webhooks", hosts=self.hosts, path=self.path)

    def finish(self) -> dict[str, Any]:
        # Its queued discoveries end at once from here on (an inactive deployment is not read).
        self.deployment.is_active = False
        self.deployment.save(update_fields=["is_active"])
        self.deployment_socket.close()
        return {"waves": self.sent, "deployment_connections": self.deployment_socket.accepted}


class _LongPolls(_Burst):
    key, label = "long_polls", f"{LONG_POLLS} long-polls (wait=30)"

    def __init__(self, servers: Servers, moderator: Login, staff: Login, hosts: list[str] | None = None) -> None:
        super().__init__(servers, hosts)
        self.moderator, self.staff = moderator, staff

    def prepare(self) -> None:
        from moderation.api.clients import apiclient_create

        self.tokens = [
            apiclient_create(name=f"bench-noisy-{uuid.uuid4().hex[:8]}", scopes=["items:write", "items:read"])[1]
            for _ in range(LONG_POLLS // WAITS_PER_CLIENT)
        ]

    async def start(self) -> None:
        self.apis = [
            httpx.AsyncClient(
                base_url=f"http://{self.hosts[n % len(self.hosts)]}",
                timeout=60,
                headers={"Authorization": f"Bearer {token}"},
                limits=httpx.Limits(max_connections=WAITS_PER_CLIENT),
            )
            for n, token in enumerate(self.tokens)
        ]
        self.items = []
        for api in self.apis:
            answer = await api.post(
                "/api/v1/items", json={"title": f"Waited on {next(_keys)}", "body": BODY, "source": "bench-noisy"}
            )
            assert answer.status_code == 201, answer.text
            self.items.append(answer.json()["id"])
        self.waits = [
            asyncio.create_task(
                self.apis[n % len(self.apis)].get(f"/api/v1/items/{self.items[n % len(self.apis)]}/decision", params={"wait": 30})
            )
            for n in range(LONG_POLLS)
        ]
        await self._open_wait()

    async def _open_wait(self, timeout: float = 60) -> None:
        staff = [httpx.AsyncClient(base_url=f"http://{host}", cookies=self.staff.cookies(), timeout=30) for host in self.hosts]
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
        async with httpx.AsyncClient(
            base_url=f"http://{self.servers.host(0)}",
            cookies=self.moderator.cookies(),
            headers={"X-CSRFToken": self.moderator.csrftoken},
            timeout=60,
        ) as moderator:
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

        self.tokens = [
            apiclient_create(name=f"bench-noisy-{uuid.uuid4().hex[:8]}", scopes=["items:write"])[1] for _ in range(BATCH_CLIENTS)
        ]

    def traffic(self) -> _Traffic:
        return _Traffic(kind="batches", hosts=self.hosts, tokens=self.tokens)

    def finish(self) -> dict[str, Any]:
        return {"batches": self.sent, "items_sent": self.sent * BATCH}


class _HungReceiver(_Burst):
    key, label = "hung_receiver", "a webhook receiver that accepts and never answers"

    def prepare(self) -> None:
        from moderation.delivery.models import WebhookEndpoint

        self.receiver = _Socket(delay=None)
        self.endpoint = WebhookEndpoint.objects.create(
            name=f"bench-hung-{uuid.uuid4().hex[:8]}", url=self.receiver.url, events=["item.decided"]
        )

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
    while (
        time.perf_counter() < deadline
        and DBTaskResult.objects.filter(
            Q(run_after=get_date_max()) | Q(run_after__lte=timezone.now()), status=TaskResultStatus.READY
        ).exists()
    ):
        time.sleep(0.2)
    time.sleep(1.0)


def bench_noisy_neighbours(
    servers: Servers,
    outside: Servers,
    logins: list[Login],
    staff: Login,
    items: list[str],
    *,
    seconds: float,
    process_note: str,
    outside_nice: int,
) -> list[Metric]:
    """Measure 26: for each burst, a quiet window then the same window under the burst, and for a burst of traffic
    the same again with the burst sent to ``outside`` (``SERVE_ROUTES=outside``); three lines each."""
    kinds: list[tuple[Callable[[list[str] | None], _Burst], bool]] = [
        (lambda hosts: _Webhooks(servers, hosts), True),
        (lambda hosts: _LongPolls(servers, logins[-1], staff, hosts), True),
        (lambda hosts: _Batches(servers, hosts), True),
        (lambda hosts: _HungReceiver(servers, hosts), False),
    ]
    if only := os.environ.get("BENCH_NOISY_BURSTS"):  # e.g. "webhooks": the bursts named, each with its own quiet window
        kinds = [(make, routed) for make, routed in kinds if make(None).key in only.split(",")]
    split_note = (
        f"sent to {len(outside.live)} daphne process{'es' if len(outside.live) > 1 else ''} of their own at nice {outside_nice}"
    )
    metrics: list[Metric] = []

    async def under(burst: _Burst) -> tuple[_Window, dict[str, Any]]:
        await burst.start()
        try:
            loud = await _window(servers, logins, items, seconds, outside)
        finally:
            seen = await burst.stop()
        return loud, seen

    async def measured(burst: _Burst) -> tuple[_Window, _Window, dict[str, Any]]:
        quiet = await _window(servers, logins, items, seconds, outside)
        return (quiet, *await under(burst))

    def lines(burst: _Burst, quiet: _Window, loud: _Window, seen: dict[str, Any], *, split: bool) -> list[Metric]:
        q, b = quiet.summary(), loud.summary()
        detail = {
            "quiet": q,
            "burst": b,
            **seen,
            "sender_nice": SENDER_NICE,
            "seconds": seconds,
            "moderators": MODERATORS,
            "burst_hosts": burst.hosts,
        }
        where = split_note if split else f"same {process_note}"
        log(
            f"26. {burst.label}, {where}: page p99 {q['page_p99_ms']:.0f} → {b['page_p99_ms']:.0f} ms (p50 "
            f"{q['page_p50_ms']:.0f} → {b['page_p50_ms']:.0f}), decision p99 {q['decision_p99_ms']:.0f} → "
            f"{b['decision_p99_ms']:.0f} ms, the bench's loop late p99 {q['client_loop_lag_p99_ms']:.0f} → "
            f"{b['client_loop_lag_p99_ms']:.0f} ms, senders at nice {SENDER_NICE}, load {q['load']:.1f} → {b['load']:.1f}, CPU % of a core "
            f"{q['cpu_percent']} → {b['cpu_percent']}, moderators {dict(loud.statuses)}; {seen}"
        )
        key = f"noisy_{burst.key}{'_split' if split else ''}"
        if split:
            name, quiet_name = (
                f"26. {burst.label}, {where}: moderators' queue page p99",
                "p99 quiet, before the same-process burst",
            )
        else:
            name, quiet_name = (
                f"26. {burst.label} ({process_note}): moderators' queue page p99",
                "p99 quiet, same moderators, just before",
            )
        return [
            Metric(
                f"{key}_page",
                name,
                b["page_p99_ms"],
                "ms",
                q["page_p99_ms"],
                quiet_name,
                target=1.5,
                check="ratio",
                op="<=",
                detail=detail,
            ),
            Metric(
                f"{key}_decision",
                "26.   ... moderators' decision p99",
                b["decision_p99_ms"],
                "ms",
                q["decision_p99_ms"],
                quiet_name,
                target=1.5,
                check="ratio",
                op="<=",
            ),
            Metric(
                f"{key}_5xx",
                "26.   ... moderators' answers 5xx or none",
                loud.failed,
                "answers",
                quiet.failed,
                "the same, quiet",
                target=0,
                check="value",
                op="<=",
            ),
        ]

    def finished(burst: _Burst, seen: dict[str, Any]) -> dict[str, Any]:
        seen.update(burst.finish())
        _settle(timeout=60)
        return seen

    asyncio.run(_window(servers, logins, items, 2.0, outside))  # warm-up: first connections, first pages
    for make, routed in kinds:
        burst = make(None)
        burst.prepare()
        seen: dict[str, Any] = {}
        try:
            quiet, loud, seen = asyncio.run(measured(burst))
        finally:
            finished(burst, seen)
        metrics += lines(burst, quiet, loud, seen, split=False)
        if not routed:
            continue
        split = make(outside.hosts)
        split.prepare()
        seen = {}
        try:
            loud, seen = asyncio.run(under(split))
        finally:
            finished(split, seen)
        metrics += lines(split, quiet, loud, seen, split=True)
    return metrics
