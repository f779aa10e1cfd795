"""The soak: two servers and two task workers under a steady mixed load while a nemesis injects faults.

``make soak`` runs it (``python -m moderation.tests.soak_run``); a short version runs in the
cluster pass (``moderation/tests/test_soak.py``). The cluster is ``scripts/run_cluster.sh``'s
(two daphne servers, two ``db_worker`` processes, PostgreSQL, and a Redis of its own behind a
TCP proxy), started with ``e2e.server`` and ``moderation.tests.cluster_support``.

The load, seeded: submits (plain, quorum, deadline; some repeated under one
``Idempotency-Key``), moderators racing to decide over HTTP with the queue's websocket open,
cancels, long-polls, and three webhook receivers (steady, flaky, never answering). The
nemesis, one fault at a time: ``kill -9`` of a server or worker, Redis paused or black-holed,
database backends terminated, the steady receiver down. Then everything is healed and
settled, and the facts are judged by ``moderation.lab.soak`` and reported per phase. It lives
with the tests because it drives real processes through the tests' helpers.
See contributors/soak.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
from websockets.asyncio.client import connect

from e2e.children import children_adopt
from e2e.server import ROOT, LiveServer, ServerError, free_port
from moderation.lab.history import FinalItem, HistoryRecorder
from moderation.lab.soak import (
    Delivery,
    Fault,
    Memory,
    Request,
    SoakFacts,
    soak_judge,
    soak_report,
    soak_save,
    soak_table,
)
from moderation.tests.cluster_support import (
    channel_prefix,
    cluster_env,
    database_query,
    fresh_database,
    services_urls,
    work_settled_wait,
)
from moderation.tests.real_server import CSRF
from moderation.tests.webhook_receiver import Receiver

MODERATORS = [f"mod{n}" for n in range(6)]
CLIENT = "soak"
FAULTS = ("kill_server", "kill_worker", "redis_pause", "redis_blackhole", "pg_terminate", "webhook_down")
DEADLINE_SECONDS = 8
RETRY_FOR = 20  # a webhook's retry window in the soak (seconds)
HEARTBEAT = 3.0  # seconds between a page's heartbeats (LIVE_HEARTBEAT_SECONDS)
PRESENCE_TTL = 8  # LIVE_SILENT_SECONDS in the soak: how long a dead page's presence row still counts
HTTP_TIMEOUT = 30.0  # a request not answered within this is a timeout (a wait adds its own wait)
SETTLE_STALL = 90  # the end waits give up once nothing moved for this long
SERVER_ENV = {
    # The suite's conftest sets "1" (apply in the deciding process); in a cluster the workers apply.
    "REVIEWQUEUE_APPLY_INLINE": "",
    "APPLY_SWEEP_GRACE": "5",
    "WEBHOOK_SWEEP_INTERVAL": "1",
    "WEBHOOK_LEASE_GRACE": "5",
    "WEBHOOK_TIMEOUT": "2",
    "WEBHOOK_RETRY_BASE": "0.5",
    "WEBHOOK_RETRY_MAX": "4",
    "WEBHOOK_RETRY_FOR": str(RETRY_FOR),
    "LIVE_SILENT_SECONDS": str(PRESENCE_TTL),
    "LIVE_HEARTBEAT_SECONDS": str(HEARTBEAT),
    # Small pools: the PostgreSQL server (max_connections 100 by default) is shared with whatever else runs.
    # A worker's start or resume holds a checkpointer connection for its run: 4 lets its 4 apply lanes run at once.
    "DB_POOL_SIZE": "10",
    "CHECKPOINT_POOL_SIZE": "4",
    "WEBHOOK_LANES": "2",
}
# One Django start-up for the rest of the set-up: the quorum team, the API client, the webhook endpoints.
_SETUP = """
import io
from django.core.management import call_command
from moderation.delivery.models import WebhookEndpoint
call_command("team", "quorum", "--approvals", "2", *[arg for m in {moderators!r} for arg in ("--add", m)], stdout=io.StringIO())
token = io.StringIO()
call_command("apiclient_create", {client!r}, stdout=token)
print("TOKEN", token.getvalue().strip())
for name, url, events in {endpoints!r}:
    print("SECRET", name, WebhookEndpoint.objects.create(name=name, url=url, events=events).secret)
"""
DECISION_EVENTS = ["item.decided", "item.cancelled"]


def log(message: str) -> None:
    print(f"soak {time.strftime('%H:%M:%S')} {message}", flush=True)


@dataclass
class SoakConfig:
    minutes: float = 30.0
    seed: int = 0
    rate: float = 2.0  # items submitted per second
    quiet: tuple[float, float] = (30.0, 90.0)  # seconds between faults
    lasting: tuple[float, float] = (5.0, 20.0)  # seconds a fault lasts
    out: Path = ROOT / "var" / "soak"
    every_kind: bool = False  # go on past ``minutes`` until each kind of fault has struck once

    @classmethod
    def short(cls, *, minutes: float, seed: int, out: Path) -> SoakConfig:
        """The cluster pass's version: faults close together, so each kind comes at least once in minutes."""
        return cls(minutes=minutes, seed=seed, rate=1.5, quiet=(6.0, 10.0), lasting=(4.0, 8.0), out=out, every_kind=True)


# --- Redis the soak may pause, behind a proxy it may black-hole --------------------------


class RedisUnderTest:
    """A ``redis-server`` of the soak's own on a free port (no persistence): SIGSTOP pauses it."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(workdir),
            ],
            stdout=open(workdir / "redis.log", "w"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        children_adopt(self.process)
        import redis

        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        deadline = time.monotonic() + 30
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise ServerError(f"redis-server on {self.port} did not start") from None
                time.sleep(0.1)

    def signal(self, sig: int) -> None:
        self.process.send_signal(sig)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGCONT)
        self.process.terminate()
        self.process.wait(timeout=10)


class Proxy:
    """A TCP proxy (its own thread and event loop) that forwards to ``upstream`` until told to black-hole:
    then it stops passing bytes either way and new connections hang, as a partitioned network would."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._open: asyncio.Event | None = None
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), name="soak-proxy", daemon=True).start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        async def serve() -> None:
            self._open = asyncio.Event()
            self._open.set()
            server = await asyncio.start_server(self._client, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            await server.serve_forever()

        self._loop.run_until_complete(serve())

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._open.wait()
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self._open.wait()
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    def black_hole(self, on: bool) -> None:
        self._loop.call_soon_threadsafe(self._open.clear if on else self._open.set)


# --- the cluster --------------------------------------------------------------------------


@dataclass
class Cluster:
    servers: list[LiveServer]
    database_url: str
    redis: RedisUnderTest
    proxy: Proxy
    prefix: str
    token: str
    sessions: dict[str, str]
    steady: Receiver
    flaky: Receiver
    worker_ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    # Per server: (process start time, RSS samples (at, kB)) of its current process.
    rss: dict[int, list[tuple[float, int]]] = field(default_factory=dict)

    def worker_start(self, server: LiveServer) -> None:
        server.worker_start(interval=0.1, worker_id=f"soak-w{next(self.worker_ids)}")

    def workers_alive(self) -> list[tuple[LiveServer, subprocess.Popen]]:
        return [(s, w) for s in self.servers for w in s.workers if w.poll() is None]


def cluster_start(*, workdir: Path, database_url: str) -> Cluster:
    """Once the database is seeded, everything else starts side by side (each a Django start-up of its own):
    the rest of the set-up, the two servers and the two workers, which need nothing from each other."""
    redis_server = RedisUnderTest(workdir)
    proxy = Proxy(redis_server.port)
    prefix = channel_prefix("soak")
    env = {**cluster_env(redis_url=f"redis://127.0.0.1:{proxy.port}/0", prefix=prefix), **SERVER_ENV}
    servers = [LiveServer(workdir / f"server{n}", database_url=database_url, extra_env=env) for n in (1, 2)]
    seeded = servers[0].seed(users=MODERATORS)
    log("database seeded; starting the servers and workers")
    steady, flaky = Receiver().start(), Receiver().start()
    dead = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens: every attempt is refused
    endpoints = [
        ("steady", steady.url, DECISION_EVENTS),
        ("flaky", flaky.url, DECISION_EVENTS),
        ("dead", dead, ["item.cancelled"]),
    ]
    cluster = Cluster(
        servers=servers,
        database_url=database_url,
        redis=redis_server,
        proxy=proxy,
        prefix=prefix,
        token="",
        sessions=seeded.sessions,
        steady=steady,
        flaky=flaky,
    )
    for server in servers:
        cluster.worker_start(server)
    with ThreadPoolExecutor(3) as pool:
        setup = pool.submit(
            servers[0].manage, "shell", "-c", _SETUP.format(moderators=MODERATORS, client=CLIENT, endpoints=endpoints)
        )
        list(pool.map(lambda s: s.start(timeout=180), servers))
        out = setup.result()
    cluster.token = next(line.split()[1] for line in out.splitlines() if line.startswith("TOKEN "))
    secrets_by_name = {line.split()[1]: line.split()[2] for line in out.splitlines() if line.startswith("SECRET ")}
    steady.secret, flaky.secret = secrets_by_name["steady"], secrets_by_name["flaky"]
    for server in servers:
        server.worker_wait_ready(server.workers[-1].args[server.workers[-1].args.index("--worker-id") + 1], timeout=180)
    return cluster


def _logs_keep(cluster: Cluster, directory: Path) -> None:
    """The servers' and workers' logs, kept beside the report (the cluster's own directory is removed)."""
    directory.mkdir(parents=True, exist_ok=True)
    for n, server in enumerate(cluster.servers, 1):
        for path in (server.log_path, server.worker_log_path):
            if path.exists():
                shutil.copy(path, directory / f"server{n}-{path.name}")


def cluster_close(cluster: Cluster) -> None:
    cluster.proxy.black_hole(False)
    cluster.redis.signal(signal.SIGCONT)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(LiveServer.close, cluster.servers))
    cluster.steady.stop()
    cluster.flaky.stop()
    cluster.redis.stop()


def rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except FileNotFoundError:
        pass
    return 0


# --- the load -----------------------------------------------------------------------------


def _error_words(response: httpx.Response) -> str:
    """A 5xx in a few words: the JSON error, or the debug page's title (the servers run with DEBUG on)."""
    text = response.text
    if text.startswith("Traceback"):
        return f"{response.status_code} {text.strip().splitlines()[-1][:160]}"
    if "<title>" in text:
        return f"{response.status_code} {text.split('<title>', 1)[1].split('</title>', 1)[0].strip()[:160]}"
    return f"{response.status_code} {text[:160]}"


def _drop_words(exc: Exception) -> str:
    if type(exc) is ConnectionError:
        return str(exc)
    code = getattr(getattr(exc, "rcvd", None), "code", None)
    return f"{type(exc).__name__}" + (f" {code}" if code else "")


class Load:
    """The clients: their requests (for the report) and their decisions (for the history checker)."""

    def __init__(self, cluster: Cluster, rng: random.Random) -> None:
        self.cluster, self.rng = cluster, rng
        self.requests: list[Request] = []
        self.history = HistoryRecorder()
        self.answered_by_key: dict[str, set[str]] = {}
        self.given_up: dict[str, dict] = {}  # Idempotency-Key -> the body of a submit never accepted during the run
        self.resent: dict[str, int] = {}  # and the status it answered when sent again after the run (0: none)
        self.items: list[str] = []
        self.sockets_open = 0
        self.errors: Counter[str] = Counter()  # what the 5xx answers said
        self.socket_drops: Counter[str] = Counter()  # why the moderators' sockets closed or never opened
        self.stopping = asyncio.Event()
        self.pages_closed_at = 0.0  # time.monotonic() once every moderator's page is closed
        self._clients: list[httpx.AsyncClient] = []

    def _client(self, headers: dict[str, str]) -> httpx.AsyncClient:
        client = httpx.AsyncClient(headers=headers, timeout=HTTP_TIMEOUT, limits=httpx.Limits(max_connections=50))
        self._clients.append(client)
        return client

    async def close(self) -> None:
        for client in self._clients:
            await client.aclose()

    async def send(
        self, client: httpx.AsyncClient, kind: str, method: str, path: str, *, primary: int, wait: float = 0.0, **kwargs
    ) -> httpx.Response | None:
        """One request to server ``primary``, or to the other one when ``primary`` refuses the connection
        (a load balancer's retry: nothing was sent); recorded for the report. None: no answer."""
        began = time.time()
        servers = self.cluster.servers
        response = None
        for n in (primary, 1 - primary):
            try:
                response = await client.request(method, f"{servers[n].url}{path}", timeout=HTTP_TIMEOUT + wait, **kwargs)
                break
            except httpx.ConnectError:
                continue
            except httpx.HTTPError:
                break
        if response is not None and response.status_code >= 500:
            self.errors[_error_words(response)] += 1
        latency = time.time() - began - (wait if response is not None and response.status_code == 204 else 0.0)
        self.requests.append(
            Request(at=began, latency=max(latency, 0.0), kind=kind, status=None if response is None else response.status_code)
        )
        return response

    # --- moderators

    def moderator(self, n: int) -> httpx.AsyncClient:
        name = MODERATORS[n]
        return self._client(
            {
                "Cookie": f"sessionid={self.cluster.sessions[name]}; csrftoken={CSRF}",
                "X-CSRFToken": CSRF,
                "Content-Type": "application/json",
            }
        )

    async def socket_keep(self, n: int) -> None:
        """Moderator ``n``'s queue page: a websocket open all along (heartbeating as the page does),
        opened again, on the other server, when its server drops it."""
        cookie = f"sessionid={self.cluster.sessions[MODERATORS[n]]}"
        server = n % 2
        while not self.stopping.is_set():
            host = self.cluster.servers[server].netloc
            try:
                async with connect(
                    f"ws://{host}/ws/queue/",
                    origin=f"http://{host}",
                    open_timeout=30,
                    additional_headers={"Cookie": cookie},
                    ping_interval=None,
                ) as ws:
                    self.sockets_open += 1
                    reader = asyncio.create_task(self._frames_drain(ws))
                    try:
                        while not self.stopping.is_set() and not reader.done():
                            await ws.send(json.dumps({"type": "heartbeat"}))
                            await asyncio.wait(
                                {reader, asyncio.create_task(asyncio.sleep(HEARTBEAT))}, return_when=asyncio.FIRST_COMPLETED
                            )
                    finally:
                        self.sockets_open -= 1
                        reader.cancel()
                    if not self.stopping.is_set():
                        raise ConnectionError(f"closed by the server ({ws.close_code})")
            except Exception as exc:  # noqa: BLE001 - a dropped or refused socket: open it again, elsewhere
                self.socket_drops[_drop_words(exc)] += 1
                server = 1 - server
                await asyncio.sleep(1.0)

    @staticmethod
    async def _frames_drain(ws) -> None:
        async for _ in ws:
            pass

    async def decide(self, client: httpx.AsyncClient, n: int, item: str, decision: str, *, server: int) -> None:
        op = self.history.invoke(reviewer=MODERATORS[n], item=item, decision=decision)
        response = await self.send(
            client, "decide", "POST", f"/api/items/{item}/decision", primary=server, content=json.dumps({"decision": decision})
        )
        if response is None:
            self.history.complete(op, completion="unknown", error="no answer")
            return
        try:
            body = response.json()
        except ValueError:
            body = {"text": response.text[:200]}
        self.history.complete_from_http(op, status=response.status_code, body=body)

    # --- the API client

    async def submit(self, api: httpx.AsyncClient, n: int, kind: str) -> str | None:
        """Submit item ``n`` until the API answers (the same key each time); its id, None if it never did."""
        key = f"soak-{n}"
        body = {"title": f"Soak {n} ({kind})", "body": f"soak item {n}", "source": "soak"}
        if kind == "quorum":
            body["team"] = "quorum"
        elif kind == "deadline":
            body["policy"] = {"deadline_seconds": DEADLINE_SECONDS, "on_deadline": "reject"}
        for attempt in range(4):
            response = await self.send(
                api,
                "submit" if attempt == 0 else "resubmit",
                "POST",
                "/api/v1/items",
                primary=n % 2,
                json=body,
                headers={"Idempotency-Key": key},
            )
            if response is not None and response.status_code in (200, 201):
                item = response.json()["id"]
                self.answered_by_key.setdefault(key, set()).add(item)
                return item
            await asyncio.sleep(1.0 + attempt)
        if key not in self.answered_by_key:
            self.given_up[key] = body
        return None

    async def given_up_resend(self) -> None:
        """Send each submit the API never accepted once more, the cluster healed and settled: a key that is
        refused even now is stuck (the soak once found one, its thread holding a start that asked nothing)."""
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {self.cluster.token}"}, timeout=HTTP_TIMEOUT) as api:
            for key, body in sorted(self.given_up.items()):
                try:
                    response = await api.post(
                        f"{self.cluster.servers[0].url}/api/v1/items", json=body, headers={"Idempotency-Key": key}
                    )
                except httpx.HTTPError:
                    self.resent[key] = 0
                    continue
                self.resent[key] = response.status_code
                if response.status_code in (200, 201):
                    self.answered_by_key.setdefault(key, set()).add(response.json()["id"])

    async def duplicate(self, api: httpx.AsyncClient, n: int, kind: str) -> None:
        await self.submit(api, n, kind)

    async def cancel(self, api: httpx.AsyncClient, item: str, server: int) -> None:
        op = self.history.invoke(reviewer=f"api.{CLIENT}", item=item, decision="withdraw")
        response = await self.send(api, "cancel", "POST", f"/api/v1/items/{item}/cancel", primary=server, json={})
        body = {}
        if response is not None:
            with contextlib.suppress(ValueError):
                body = response.json()
        if response is not None and response.status_code == 200 and body.get("status") == "withdrawn":
            self.history.complete(op, completion="ok", told_winner=f"api.{CLIENT}")
        elif response is not None and response.status_code == 409 and body.get("winner"):
            self.history.complete(op, completion="fail", told_winner=body["winner"])
        else:
            self.history.complete(op, completion="unknown", error=f"{getattr(response, 'status_code', None)} {body}")

    async def long_poll(self, api: httpx.AsyncClient, item: str, server: int) -> None:
        await self.send(api, "wait", "GET", f"/api/v1/items/{item}/decision?wait=20", primary=server, wait=20)

    async def item_life(self, api: httpx.AsyncClient, moderators: list[httpx.AsyncClient], n: int) -> None:
        rng = self.rng
        kind = rng.choices(["plain", "quorum", "deadline"], weights=[6, 2, 2])[0]
        duplicate, cancel, wait = rng.random() < 0.1, rng.random() < 0.15, rng.random() < 0.3
        deciders = rng.sample(range(len(MODERATORS)), 3)
        racers_at = rng.uniform(0, DEADLINE_SECONDS + 4) if kind == "deadline" else 0.0
        race_deadline = rng.random() < 0.5
        item = await self.submit(api, n, kind)
        if item is None:
            return
        self.items.append(item)
        jobs = []
        if duplicate:
            jobs.append(self.duplicate(api, n, kind))
        if wait:
            jobs.append(self.long_poll(api, item, n % 2))
        if kind == "plain":
            # Two moderators on different servers, opposite decisions; the client's cancel may join them.
            jobs += [
                self.decide(moderators[deciders[0]], deciders[0], item, "approve", server=0),
                self.decide(moderators[deciders[1]], deciders[1], item, "reject", server=1),
            ]
            if cancel:
                jobs.append(self.cancel(api, item, n % 2))
        elif kind == "quorum":
            jobs += [
                self.decide(moderators[d], d, item, rng.choice(["approve", "approve", "reject"]), server=k % 2)
                for k, d in enumerate(deciders)
            ]
        elif race_deadline:

            async def late() -> None:
                await asyncio.sleep(racers_at)
                await self.decide(moderators[deciders[0]], deciders[0], item, "approve", server=n % 2)

            jobs.append(late())
        await asyncio.gather(*jobs)

    async def run(self, *, until: float, rate: float, nemesis_done: asyncio.Event) -> None:
        """Items at ``rate`` per second until ``until`` and the nemesis is done; then every item's life runs out."""
        api = self._client({"Authorization": f"Bearer {self.cluster.token}"})
        moderators = [self.moderator(n) for n in range(len(MODERATORS))]
        sockets = [asyncio.create_task(self.socket_keep(n)) for n in range(len(MODERATORS))]
        lives: set[asyncio.Task] = set()
        in_flight = asyncio.Semaphore(40)  # a stalled cluster must not pile up thousands of clients
        for n in itertools.count(1):
            if time.time() >= until and nemesis_done.is_set():
                break
            await in_flight.acquire()
            task = asyncio.create_task(self.item_life(api, moderators, n))
            lives.add(task)
            task.add_done_callback(lambda t: (lives.discard(t), in_flight.release()))
            await asyncio.sleep(self.rng.expovariate(rate))
        log(f"load stopped after {len(self.items)} items; waiting for {len(lives)} in flight")
        await asyncio.gather(*lives)
        self.stopping.set()
        await asyncio.gather(*sockets)
        self.pages_closed_at = time.monotonic()

    def flaky_receiver(self) -> None:
        """Now and then the flaky receiver fails a few requests or holds them past the sender's timeout."""
        flaky = self.cluster.flaky
        if self.rng.random() < 0.5:
            flaky.fail_next += self.rng.randint(1, 5)
        else:
            flaky.stall_seconds = 3.0
            flaky.stall_next += self.rng.randint(1, 3)


# --- the nemesis --------------------------------------------------------------------------


class Nemesis:
    def __init__(self, cluster: Cluster, rng: random.Random, config: SoakConfig) -> None:
        self.cluster, self.rng, self.config = cluster, rng, config
        self.faults: list[Fault] = []
        self.crashes: list[dict] = []  # processes that exited without the nemesis killing them
        self.acting = threading.Lock()  # held while a fault is on: what it took down is its to bring back
        self._kinds: list[str] = []

    def _next_kind(self) -> str:
        """Every kind once per round, in a seeded order: a short run still meets them all."""
        if not self._kinds:
            self._kinds = list(FAULTS)
            self.rng.shuffle(self._kinds)
        return self._kinds.pop()

    async def run(self, *, until: float, load: Load) -> None:
        """Faults until ``until``; in a run with ``every_kind``, on until each kind has struck once."""
        while True:
            pause = self.rng.uniform(*self.config.quiet)
            missing = self.config.every_kind and {f.kind for f in self.faults} != set(FAULTS)
            if time.time() + pause >= until and not missing:
                return
            await asyncio.sleep(pause)
            load.flaky_receiver()
            kind, lasting = self._next_kind(), self.rng.uniform(*self.config.lasting)
            start = time.time()
            target = await asyncio.to_thread(self._act, kind, lasting)
            fault = Fault(kind=kind, target=target, start=start, end=time.time())
            self.faults.append(fault)
            log(f"fault {kind} on {target}: {fault.end - fault.start:.1f} s, healed")

    def _act(self, kind: str, lasting: float) -> str:
        with self.acting:
            return getattr(self, kind)(lasting)

    async def supervise(self, stop: asyncio.Event) -> None:
        """What a process supervisor does: a server or worker that exited by itself is started again (and noted)."""
        while not stop.is_set():
            await asyncio.sleep(2)
            if self.acting.acquire(blocking=False):
                try:
                    await asyncio.to_thread(self._revive)
                finally:
                    self.acting.release()

    def everything_up(self) -> None:
        """At the end: whatever is down (a crash the supervisor has not seen yet) comes back."""
        with self.acting:
            self._revive()

    def _revive(self) -> None:
        for n, server in enumerate(self.cluster.servers):
            if server.process is not None and server.process.poll() is not None:
                self._crash(f"server{n + 1}", server.process.returncode, server.log_tail(120))
                server.start(timeout=180)
                self.cluster.rss[n] = []
        for server in self.cluster.servers:
            for worker in [w for w in server.workers if w.poll() is not None and w.returncode != -signal.SIGKILL]:
                server.workers.remove(worker)
                self._crash(
                    worker.args[worker.args.index("--worker-id") + 1], worker.returncode, server.log_tail(120, worker=True)
                )
        while len(self.cluster.workers_alive()) < 2:
            self.cluster.worker_start(self.cluster.servers[len(self.cluster.workers_alive()) % 2])

    def _crash(self, what: str, code: int | None, tail: str) -> None:
        self.crashes.append({"process": what, "at": time.time(), "exit": code, "log": tail})
        last = tail.strip().splitlines()[-1] if tail.strip() else "(no log)"
        log(f"{what} exited by itself (exit {code}); started again. Its log's last line: {last}")

    def kill_server(self, lasting: float) -> str:
        n = self.rng.randrange(2)
        server = self.cluster.servers[n]
        os.killpg(server.process.pid, signal.SIGKILL)
        server.process.wait()
        time.sleep(lasting)
        server.start(timeout=180)
        self.cluster.rss[n] = []
        return f"server{n + 1}"

    def kill_worker(self, lasting: float) -> str:
        server, worker = self.rng.choice(self.cluster.workers_alive())
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
        server.workers.remove(worker)
        time.sleep(lasting)
        self.cluster.worker_start(server)  # what a supervisor does
        return worker.args[worker.args.index("--worker-id") + 1]

    def redis_pause(self, lasting: float) -> str:
        self.cluster.redis.signal(signal.SIGSTOP)
        try:
            time.sleep(lasting)
        finally:
            self.cluster.redis.signal(signal.SIGCONT)
        return "redis"

    def redis_blackhole(self, lasting: float) -> str:
        self.cluster.proxy.black_hole(True)
        try:
            time.sleep(lasting)
        finally:
            self.cluster.proxy.black_hole(False)
        return "redis"

    def pg_terminate(self, lasting: float) -> str:
        name = self.cluster.database_url.rsplit("/", 1)[1]
        admin = self.cluster.database_url.rsplit("/", 1)[0] + "/postgres"
        killed, ends = 0, time.time() + lasting
        while time.time() < ends:
            try:
                killed += len(
                    database_query(
                        admin,
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                        [name],
                    )
                )
            except psycopg.OperationalError as exc:  # the server full of others' connections: try again
                log(f"pg_terminate could not connect: {str(exc).strip()[-80:]}")
            time.sleep(1.5)
        return f"{killed} backends"

    def webhook_down(self, lasting: float) -> str:
        self.cluster.steady.stop()
        time.sleep(lasting)
        self.cluster.steady.start()
        return "steady hook"


async def rss_sample(cluster: Cluster, stop: asyncio.Event) -> None:
    while not stop.is_set():
        for n, server in enumerate(cluster.servers):
            if server.process is not None and server.process.poll() is None:
                cluster.rss.setdefault(n, []).append((time.time(), rss_kb(server.process.pid)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 5)


def memory_read(cluster: Cluster, *, warm_after: float = 20.0) -> list[Memory]:
    """Per server: RSS of its process ``warm_after`` seconds into its life (its first sample, if it is younger), and now."""
    memory = []
    for n, server in enumerate(cluster.servers):
        samples = cluster.rss.get(n) or [(time.time(), rss_kb(server.process.pid))]
        first = samples[0][0]
        warm = next((kb for at, kb in samples if at >= first + warm_after), samples[0][1])
        memory.append(Memory(server=f"server{n + 1}", warm_kb=warm, end_kb=rss_kb(server.process.pid)))
    return memory


# --- the end: settle, gather, judge --------------------------------------------------------


def _open_deadlines(database_url: str) -> dict[str, int]:
    ((left,),) = database_query(
        database_url, "SELECT count(*) FROM moderation_reviewask WHERE status = 'pending' AND deadline_at IS NOT NULL"
    )
    return {"open_deadlines": left}


def facts_gather(cluster: Cluster, load: Load, *, baseline_groups: set[str], memory: list[Memory]) -> SoakFacts:
    url = cluster.database_url
    # Its own Django start-up: run beside the reads below, which need none.
    auditor = ThreadPoolExecutor(1)
    audit = auditor.submit(cluster.servers[0].manage, "verify_audit", timeout=600)
    items = sorted(set(load.items))
    final: dict[str, FinalItem] = {}
    for chunk in range(0, len(items), 200):
        state = cluster.servers[0].tool("state", *items[chunk : chunk + 200])
        final.update({item: FinalItem(**row["final"]) for item, row in state.items()})
    keys = sorted(load.answered_by_key)
    rows_by_key: dict[str, list[str]] = {}
    for key, item in database_query(
        url,
        "SELECT idempotency_key, public_id::text FROM moderation_queueitem WHERE idempotency_key = ANY(%s) ORDER BY id",
        [keys],
    ):
        rows_by_key.setdefault(key, []).append(item)
    received = {"steady": set(cluster.steady.unique()), "flaky": set(cluster.flaky.unique())}
    deliveries = [
        Delivery(
            item=item,
            endpoint=endpoint,
            status=status,
            msg_id=msg_id or "",
            retry_until=retry_until or 0.0,
            last_attempt_at=last,
            received=(msg_id in received[endpoint]) if endpoint in received and msg_id else None,
        )
        for item, endpoint, status, msg_id, retry_until, last in database_query(
            url,
            """
            SELECT q.public_id::text, e.name, d.status, d.msg_id, EXTRACT(EPOCH FROM d.retry_until)::float,
                   (SELECT EXTRACT(EPOCH FROM max(a.at))::float FROM moderation_deliveryattempt a WHERE a.delivery_id = d.id)
            FROM moderation_queueitem q
            JOIN moderation_webhookendpoint e
              ON e.events @> to_jsonb(CASE WHEN q.status = 'withdrawn' THEN 'item.cancelled' ELSE 'item.decided' END)
            LEFT JOIN moderation_webhookdelivery d
              ON d.item_public_id = q.public_id AND d.endpoint_id = e.id AND d.event IN ('item.decided', 'item.cancelled')
            WHERE q.status NOT IN ('pending', 'starting', 'refused') AND NOT q.is_lab""",
        )
    ]
    counters = {
        f"{graph}/{status}": (counter, actual)
        for graph, status, counter, actual in database_query(
            url,
            """
        SELECT coalesce(c.graph, a.graph), coalesce(c.status, a.status), coalesce(c.n, 0), coalesce(a.n, 0)
        FROM (SELECT graph, status, sum(n)::bigint AS n FROM moderation_queuecounter GROUP BY graph, status) c
        FULL JOIN (SELECT graph, status, count(*) AS n FROM moderation_queueitem WHERE NOT is_lab GROUP BY graph, status) a
          ON a.graph = c.graph AND a.status = c.status""",
        )
    }
    live_presence = [
        row[0]
        for row in database_query(
            url,
            "SELECT channel_name FROM moderation_presence WHERE last_seen >= now() - make_interval(secs => %s)",
            [PRESENCE_TTL],
        )
    ]
    import redis

    subscribed = {c.decode() for c in redis.Redis(port=cluster.redis.port).pubsub_channels(f"{cluster.prefix}__group__*")}
    try:
        audit.result()
        audit_status, audit_output = 0, ""
    except ServerError as exc:
        audit_status, audit_output = 1, str(exc)
    finally:
        auditor.shutdown()
    return SoakFacts(
        ops=list(load.history.ops),
        final=final,
        accepted={key: sorted(ids)[0] if len(ids) == 1 else ",".join(sorted(ids)) for key, ids in load.answered_by_key.items()},
        rows_by_key=rows_by_key,
        resent=dict(load.resent),
        deliveries=deliveries,
        counters=counters,
        live_presence=live_presence,
        leaked_groups=sorted(subscribed - baseline_groups),
        memory=memory,
        audit_status=audit_status,
        audit_output=audit_output,
    )


def applied_times(database_url: str) -> list[tuple[float, float]]:
    return database_query(
        database_url,
        """
        SELECT EXTRACT(EPOCH FROM decided_at)::float, EXTRACT(EPOCH FROM applied_at)::float FROM moderation_reviewask
        WHERE decided_at IS NOT NULL AND applied_at IS NOT NULL""",
    )


@dataclass
class SoakResult:
    report: dict
    facts: SoakFacts
    cluster: Cluster
    load: Load
    baseline_groups: set[str]
    paths: tuple[Path, Path]


async def _soak(cluster: Cluster, config: SoakConfig) -> tuple[Load, Nemesis, set[str], list[Memory]]:
    import redis

    rng = random.Random(config.seed)
    load, nemesis = Load(cluster, rng), Nemesis(cluster, random.Random(config.seed + 1), config)
    baseline = {c.decode() for c in redis.Redis(port=cluster.redis.port).pubsub_channels(f"{cluster.prefix}__group__*")}
    until = time.time() + config.minutes * 60
    stop_sampling = asyncio.Event()
    sampler = asyncio.create_task(rss_sample(cluster, stop_sampling))

    async def progress() -> None:
        while time.time() < until:
            await asyncio.sleep(20)
            bad = sum(not r.answered for r in load.requests)
            log(
                f"{max(0.0, until - time.time()) / 60:.1f} min left: {len(load.items)} items, {len(load.requests)} "
                f"requests ({bad} unanswered), {len(nemesis.faults)} faults, {load.sockets_open} sockets open"
            )

    reporter = asyncio.create_task(progress())
    stop_supervising = asyncio.Event()
    supervisor = asyncio.create_task(nemesis.supervise(stop_supervising))
    try:
        nemesis_done = asyncio.Event()

        async def faults() -> None:
            try:
                await nemesis.run(until=until, load=load)
            finally:
                nemesis_done.set()

        await asyncio.gather(load.run(until=until, rate=config.rate, nemesis_done=nemesis_done), faults())
    finally:
        reporter.cancel()
        stop_supervising.set()
        await supervisor
        await load.close()
    log("healing and settling (applies, starts, deadlines, webhooks until delivered or past their retry window)")
    await asyncio.to_thread(nemesis.everything_up)
    left = await asyncio.to_thread(
        work_settled_wait, cluster.database_url, stall=SETTLE_STALL, failed_settles=True, extra=_open_deadlines
    )
    if any(left.values()):
        log(f"not settled (nothing moved for {SETTLE_STALL} s): {left}")
    if load.given_up:
        log(f"sending again the {len(load.given_up)} submit(s) never accepted during the run")
        await load.given_up_resend()
    # Every page closed (the settle's wait counts too): dead pages' presence rows age out, live servers' must be gone already.
    await asyncio.sleep(max(0.0, load.pages_closed_at + PRESENCE_TTL + 2 - time.monotonic()))
    stop_sampling.set()
    await sampler
    return load, nemesis, baseline, memory_read(cluster)


def soak_run(config: SoakConfig, *, keep: Callable[[SoakResult], None] | None = None) -> SoakResult:
    """Run the soak, judge and report it; ``keep`` sees the result while the cluster still runs (a test's controls)."""
    log(f"seed {config.seed} (SOAK_SEED={config.seed} repeats this run's choices), {config.minutes:g} min of load")
    admin_url, _ = services_urls()
    workdir = Path(tempfile.mkdtemp(prefix="soak-"))
    began = time.time()
    try:
        with fresh_database(admin_url, "soak") as database_url:
            log(f"database copied from a migrated template in {time.time() - began:.0f} s")
            cluster = cluster_start(workdir=workdir, database_url=database_url)
            try:
                log(
                    f"two servers ({', '.join(s.url for s in cluster.servers)}) and two workers up in "
                    f"{time.time() - began:.0f} s; redis on {cluster.redis.port} behind proxy {cluster.proxy.port}"
                )
                load, nemesis, baseline, memory = asyncio.run(_soak(cluster, config))
                log("gathering facts and judging")
                facts = facts_gather(cluster, load, baseline_groups=baseline, memory=memory)
                findings = soak_judge(facts)
                log(f"judged: {len(findings)} finding(s)")
                report = soak_report(
                    requests=load.requests,
                    faults=nemesis.faults,
                    applied=applied_times(database_url),
                    findings=findings,
                    config={
                        "seed": config.seed,
                        "minutes": config.minutes,
                        "rate": config.rate,
                        "began": began,
                        "items": len(load.items),
                        "ops": len(facts.ops),
                        "memory": [m.__dict__ for m in facts.memory],
                        "load_average": os.getloadavg(),
                        "socket_drops": dict(load.socket_drops),
                        "errors": dict(load.errors.most_common(10)),
                        "crashes": nemesis.crashes,
                    },
                )
                paths = soak_save(report=report, requests=load.requests, faults=nemesis.faults, directory=config.out)
                result = SoakResult(report=report, facts=facts, cluster=cluster, load=load, baseline_groups=baseline, paths=paths)
                if keep is not None:
                    keep(result)
                return result
            finally:
                cluster_close(cluster)
                _logs_keep(cluster, config.out / "logs")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES") or 30))
    parser.add_argument("--seed", type=int, default=int(os.environ.get("SOAK_SEED") or secrets.randbelow(10**6)))
    parser.add_argument("--rate", type=float, help="items submitted per second (2, or 1.5 in a run under 10 minutes)")
    parser.add_argument("--out", type=Path, default=ROOT / "var" / "soak")
    args = parser.parse_args(argv)
    config = SoakConfig(minutes=args.minutes, seed=args.seed, out=args.out)
    if args.minutes < 10:  # a short run needs its faults closer together to meet every kind
        config = SoakConfig.short(minutes=args.minutes, seed=args.seed, out=args.out)
    if args.rate:
        config.rate = args.rate
    result = soak_run(config)
    print(soak_table(result.report))
    print(f"\nreport: {result.paths[0]}\nchart:  {result.paths[1]}\nseed:   {config.seed}")
    return 0 if result.report["verdict"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
