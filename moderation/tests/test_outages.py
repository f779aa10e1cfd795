"""Outages of what a decision leans on: Redis (the channel layer and the cache) and PostgreSQL.

- Redis dies while people work: a real daphne process on a Redis of the test's own,
  which the test kills and brings back on the same port. Decisions keep winning and
  losing correctly, the loser is still told by the HTTP response, no request hangs, and
  once Redis is back sockets (new and already open) get live events again.
- PostgreSQL drops the deciding connection while it holds the row lock
  (pg_terminate_backend): the reviewer is told to try again, nothing is half-done, and
  the retry wins.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.urls import reverse
from websockets.asyncio.client import ClientConnection, connect

from e2e.server import LiveServer, free_port
from moderation.core.faults import fault_inject
from moderation.items.models import ItemStatus, QueueItem
from moderation.lab.history import FinalItem, HistoryRecorder, history_check
from moderation.records.models import AttemptOutcome, DecisionAttempt
from moderation.review.decisions import DatabaseUnavailable
from moderation.tests.graphs_support import item_resumes, item_waiting_on
from moderation.tests.real_server import Reviewer, black_hole, port_wait, service_missing

# Nothing here times a decision against a fixed figure: what a Redis outage costs is judged
# against the same decisions, in the same run, with Redis healthy (or absent), so a busy
# machine slows both sides alike. An answer that long in coming is a hang, not a slow answer.
HUNG = 60.0
# Waits for something that comes unless broken (a live frame, Redis back): long, since only
# a failure ever waits them out.
FRAME_WAIT = 30.0
RECOVER_WITHIN, RECOVER_TRY = 60.0, 5.0
# Below this, two medians are both "at once": it keeps a ratio of milliseconds from judging jitter.
JITTER = 0.1


def _costs_nothing(outage: list[float], healthy: list[float]) -> bool:
    """The median answer during the outage within twice the median of the same requests without one."""
    print(
        f"\nmedian answer {statistics.median(outage):.3f} s during the outage, {statistics.median(healthy):.3f} s without "
        f"(slowest {max(outage):.3f} s and {max(healthy):.3f} s)"
    )
    return statistics.median(outage) < 2 * statistics.median(healthy) + JITTER


class RedisProcess:
    """A throw-away redis-server on its own port, killable and restartable on that port."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        port_wait(self.port)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None


@pytest.fixture
def own_redis():
    binary = shutil.which("redis-server")
    if binary is None:
        service_missing("redis-server is not installed")
    redis = RedisProcess(binary)
    redis.start()
    try:
        yield redis
    finally:
        redis.kill()


class Tab:
    """A queue page's socket; frames not yet looked at are kept."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.unread: list[dict] = []

    @classmethod
    async def open(cls, server: LiveServer, reviewer: Reviewer) -> Tab:
        ws = await connect(
            f"ws://127.0.0.1:{server.port}/ws/queue/",
            origin=f"http://127.0.0.1:{server.port}",
            additional_headers=reviewer.ws_headers(),
            open_timeout=FRAME_WAIT,
            ping_interval=None,
        )
        tab = cls(ws)
        assert (await tab.frame("state", timeout=FRAME_WAIT))["type"] == "state"
        return tab

    async def frame(self, kind: str, item: str | None = None, *, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for frame in self.unread:
                if frame["type"] == kind and (item is None or frame.get("item") == item):
                    self.unread.remove(frame)
                    return frame
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {kind} frame for {item} within {timeout} s; got {self.unread}")
            self.unread.append(json.loads(await asyncio.wait_for(self.ws.recv(), left)))


def _timed_decide(history: HistoryRecorder, reviewer: Reviewer, item: str, decision: str) -> tuple[int, dict, float]:
    op = history.invoke(reviewer=reviewer.username, item=item, decision=decision)
    start = time.monotonic()
    status, body = reviewer.decide(item, decision, timeout=HUNG)
    took = time.monotonic() - start
    history.complete_from_http(op, status=status, body=body)
    return status, body, took


def _in_turn_and_at_once(
    history: HistoryRecorder, alice: Reviewer, bob: Reviewer, items: Iterator[str], *, races: int
) -> list[float]:
    """alice decides an item and bob after her (told who won, by name); then both at once on
    ``races`` more items (one winner each, the loser told who). Every answer's seconds."""
    item = next(items)
    status, body, first = _timed_decide(history, alice, item, "approve")
    assert (status, body["winner"]) == (200, "alice"), (status, body)
    status, body, second = _timed_decide(history, bob, item, "reject")
    assert (status, body["outcome"], body["winner"]) == (409, "lost", "alice"), body
    assert body["message"].startswith("Already reviewed by alice (approved,")
    took = [first, second]
    barrier = threading.Barrier(2)

    def race(reviewer: Reviewer, item: str, decision: str):
        barrier.wait(timeout=HUNG)
        return _timed_decide(history, reviewer, item, decision)

    with ThreadPoolExecutor(2) as pool:
        for item in itertools.islice(items, races):
            results = list(pool.map(race, (alice, bob), (item, item), ("approve", "reject")))
            assert sorted(status for status, _, _ in results) == [200, 409], results
            winner = next(body["winner"] for status, body, _ in results if status == 200)
            assert all(body["winner"] == winner for _, body, _ in results), results
            took += [seconds for _, _, seconds in results]
    return took


def _healthz(server: LiveServer) -> tuple[int, dict]:
    import http.client

    conn = http.client.HTTPConnection(server.host, server.port, timeout=HUNG)
    try:
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


@pytest.mark.timeout(240)
@pytest.mark.asyncio
async def test_redis_dies_while_people_work_and_comes_back(own_redis, tmp_path):
    server = LiveServer(tmp_path / "site", extra_env={"REDIS_URL": own_redis.url, "CHANNEL_LAYER_PREFIX": "outage"})
    seeded = await asyncio.to_thread(server.seed, users=["alice", "bob", "carol"], items=24, prefix="Outage")
    items = iter(seeded.items)
    history = HistoryRecorder()
    await server.astart()
    try:
        alice, bob, carol = (Reviewer(server, name, seeded.sessions[name]) for name in ("alice", "bob", "carol"))
        open_tab = await Tab.open(server, carol)
        first = next(items)
        status, _, _ = await asyncio.to_thread(_timed_decide, history, alice, first, "approve")
        assert status == 200
        assert (await open_tab.frame("item.decided", first, timeout=FRAME_WAIT))["winner"] == "alice"
        healthy = await asyncio.to_thread(_in_turn_and_at_once, history, alice, bob, items, races=2)

        await asyncio.to_thread(own_redis.kill)

        # The same with Redis dead: the winner is told at once, and so is the loser, by name,
        # one after the other and at the same moment, as fast as with Redis up.
        dead = await asyncio.to_thread(_in_turn_and_at_once, history, alice, bob, items, races=3)
        assert _costs_nothing(dead, healthy), {"Redis dead": dead, "Redis up": healthy}

        health_status, health = await asyncio.to_thread(_healthz, server)
        assert health_status == 503 and not health["checks"]["channel_layer"]["ok"], health
        assert health["checks"]["database"]["ok"], health
        assert server.process.poll() is None, server.log_tail()

        # Redis returns on the same port: live events flow again, to new and open sockets.
        await asyncio.to_thread(own_redis.start)
        back = time.monotonic()
        delivered = None
        while delivered is None and time.monotonic() - back < RECOVER_WITHIN:
            try:
                tab = await Tab.open(server, bob)
            except Exception:  # the layer may still be reconnecting; the browser would retry too
                await asyncio.sleep(0.25)
                continue
            item = next(items)
            status, _, _ = await asyncio.to_thread(_timed_decide, history, alice, item, "approve")
            assert status == 200
            # A push made before the layer resubscribed is lost: then try again with the next item.
            with contextlib.suppress(TimeoutError):
                delivered = await tab.frame("item.decided", item, timeout=RECOVER_TRY)
            await tab.ws.close()
        assert delivered is not None, f"no item.decided on a new socket within {RECOVER_WITHIN} s of Redis returning"
        assert delivered["winner"] == "alice"
        # The tab that stayed open through the outage hears it too (the layer resubscribed).
        await open_tab.frame("item.decided", item, timeout=FRAME_WAIT)
        await open_tab.ws.close()

        decided = list(dict.fromkeys(op.item for op in history.ops))
        state = await server.atool("state", *decided)
        final = {
            key: FinalItem(winner=row["winner"], winning_attempts=len(row["won_attempts"]), resumes=row["resume_count"])
            for key, row in state.items()
        }
        assert history_check(ops=history.ops, final=final) == []
        assert all(op.completion in {"ok", "fail"} for op in history.ops), [
            op for op in history.ops if op.completion == "unknown"
        ]
    finally:
        await server.aclose()


# A black-holed Redis (accepts, never answers): what a decision costs, and what a loser is told.
BLACK_HOLE_ITEMS = 6
RACERS = ["alice", "bob", "carol", "dave"]


def _four_racers(history: HistoryRecorder, server: LiveServer, sessions: dict[str, str], item: str) -> list[float]:
    """Four reviewers decide ``item`` at once: one winner, three 409s naming it. Every answer's seconds."""
    barrier = threading.Barrier(len(RACERS))

    def race(name: str, decision: str):
        barrier.wait(timeout=HUNG)
        return _timed_decide(history, Reviewer(server, name, sessions[name]), item, decision)

    with ThreadPoolExecutor(len(RACERS)) as pool:
        results = list(pool.map(race, RACERS, ["approve", "reject", "approve", "reject"]))
    assert sorted(status for status, _, _ in results) == [200, 409, 409, 409], results
    winner = next(body["winner"] for status, body, _ in results if status == 200)
    assert all(body["winner"] == winner for _, body, _ in results), results
    return [seconds for _, _, seconds in results]


@pytest.mark.timeout(240)
def test_a_black_holed_redis_costs_decisions_nothing_and_every_loser_is_told(tmp_path):
    holed, healthy = LiveServer(tmp_path / "holed"), LiveServer(tmp_path / "healthy")
    seeded = holed.seed(users=RACERS, items=BLACK_HOLE_ITEMS, prefix="Hole")
    healthy.clone_from(holed)  # the same moderators, sessions and items, on a site without Redis
    histories = {"holed": HistoryRecorder(), "healthy": HistoryRecorder()}
    took: dict[str, list[float]] = {"holed": [], "healthy": []}
    with black_hole() as port:
        # The channel layer and the rate limit's cache both live on the black-holed Redis.
        holed.extra_env.update(REDIS_URL=f"redis://127.0.0.1:{port}/0", CHANNEL_LAYER_PREFIX="blackhole")
        sites = {"holed": holed, "healthy": healthy}
        try:
            for server in sites.values():
                server.start()
            for item in seeded.items:
                # Each item raced on both sites in turn: load from elsewhere on the machine hits both alike.
                for name, server in sites.items():
                    took[name] += _four_racers(histories[name], server, seeded.sessions, item)
            states = {name: server.tool("state", *seeded.items) for name, server in sites.items()}
        finally:
            for server in sites.values():
                server.close()
    for name, state in states.items():
        final = {
            key: FinalItem(winner=row["winner"], winning_attempts=len(row["won_attempts"]), resumes=row["resume_count"])
            for key, row in state.items()
        }
        assert history_check(ops=histories[name].ops, final=final) == [], name
    # The black hole may cost the first racers one cache timeout (0.5 s, once per process per
    # 10 s) and pushes cost nothing; before, every decision waited 4 s for them.
    assert _costs_nothing(took["holed"], took["healthy"]), took


# --- PostgreSQL: the deciding connection is killed while it holds the row lock --------------


def _decide_while_connection_is_killed_at(point: str, client, url: str):
    """POST a decision that stalls at ``point``; kill its database backend meanwhile; return the response."""
    reached, release = threading.Event(), threading.Event()
    backend: dict[str, int] = {}

    def stall(key: str) -> None:
        # Runs in the request's thread, on the connection that holds the row lock.
        backend["pid"] = connection.connection.info.backend_pid
        reached.set()
        release.wait(timeout=10)

    answer: dict[str, object] = {}

    def post() -> None:
        try:
            answer["response"] = client.post(url, data={"decision": "approve"}, content_type="application/json")
        except Exception as exc:  # the test client re-raises what the view did not handle
            answer["error"] = exc
        finally:
            connection.close()

    with fault_inject(point, stall):
        request = threading.Thread(target=post)
        request.start()
        assert reached.wait(timeout=10), f"the decision never reached {point}"
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [backend["pid"]])
            assert cursor.fetchone()[0] is True
        release.set()
        request.join(timeout=20)
    assert not request.is_alive()
    assert "error" not in answer, f"unhandled: {answer.get('error')!r}"
    return answer["response"]


@pytest.fixture
def on_postgres(settings, client, alice, make_item):
    """A pending item and alice's logged-in client with its decision URL, on PostgreSQL only."""
    if connection.vendor != "postgresql":
        pytest.skip("pg_terminate_backend needs PostgreSQL (the postgres_variant pass)")
    settings.DECISION_RATE_LIMIT = 0
    item = make_item()
    client.force_login(alice)
    return item, reverse("moderation:api-decide", args=[item.public_id])


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
def test_connection_killed_holding_the_row_lock_changes_nothing_and_retry_wins(on_postgres, client):
    item, url = on_postgres

    response = _decide_while_connection_is_killed_at("after_row_lock", client, url)
    assert response.status_code == 503, response.content
    assert response.json() == {
        "error": DatabaseUnavailable.code,
        "message": "the database connection was lost; nothing was applied, try again",
    }
    # Nothing half-done: still pending, graph still paused and never resumed, no attempt recorded.
    item.refresh_from_db()
    assert (item.status, item.decided_by, item.decided_at) == (ItemStatus.PENDING, None, None)
    assert item.asks.get().status == "pending"
    assert item_waiting_on(item) == [item.asks.get().interrupt_id] and item_resumes(item) == 0
    assert not DecisionAttempt.objects.filter(item=item).exists()

    retry = client.post(url, data={"decision": "approve"}, content_type="application/json")
    assert retry.status_code == 200 and retry.json()["winner"] == "alice", retry.content
    item = QueueItem.objects.get(pk=item.pk)
    assert item.status == ItemStatus.APPROVED and item_resumes(item) == 1


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
def test_connection_killed_with_every_write_done_but_not_committed_changes_nothing(on_postgres, client):
    """Killed at the last moment before COMMIT (ask, item, attempt, outbox, apply task all
    written): it all goes together, and since the graph only runs after a commit, the
    answer may honestly say nothing was applied."""
    item, url = on_postgres

    response = _decide_while_connection_is_killed_at("before_commit", client, url)
    assert response.status_code == 503, response.content
    assert response.json()["message"] == "the database connection was lost; nothing was applied, try again"
    item.refresh_from_db()
    assert (item.status, item.apply_state) == (ItemStatus.PENDING, "")
    assert item.asks.get().status == "pending" and item_resumes(item) == 0
    assert not DecisionAttempt.objects.filter(item=item).exists()

    again = client.post(url, data={"decision": "approve"}, content_type="application/json")
    assert again.status_code == 200 and again.json()["winner"] == "alice", again.content
    item = QueueItem.objects.get(pk=item.pk)
    assert (item.status, item.decided_by.username) == (ItemStatus.APPROVED, "alice")
    assert item_resumes(item) == 1
    assert DecisionAttempt.objects.filter(item=item, outcome=AttemptOutcome.WON).count() == 1
