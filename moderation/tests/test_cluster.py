"""Two daphne processes, one PostgreSQL database, one Redis: the product's promises across servers.

alice logs in on server 1 and bob on server 2; both decide the same items at the same
instant (a barrier per item, several items in flight at once). Each reviewer's live
socket sits on the *other* server, so every notice a reviewer gets has crossed
between the processes through Redis. The race is judged as a history
(``moderation.lab.history``): every HTTP attempt is an invocation completed ok (200),
fail (409, naming the winner) or unknown (timeout, 5xx, dropped connection), checked
against a final read of the rows, the attempts log and the checkpoint history.

The database is created fresh for the module and dropped after; the channel-layer
prefix is unique to the run. See ``cluster_support`` for how a missing PostgreSQL or
Redis fails (CI) or skips (elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from websockets.asyncio.client import ClientConnection, connect

from e2e.server import LiveServer
from moderation.lab.history import FinalItem, HistoryRecorder, Op, history_check
from moderation.tests.cluster_support import (
    channel_prefix,
    cluster_env,
    fresh_database,
    services_require,
)
from moderation.tests.form_session import FormSession

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

PASSWORD = "cluster-test-pw-1"
RACE_ITEMS = 60
ITEMS_IN_FLIGHT = 4  # items raced at the same time (each by two reviewers on two servers)
HTTP_TIMEOUT = 60
LIVE_TIMEOUT = 20  # a busy 2-core machine shared with other suites: generous

# history_final_read in a process configured for the cluster's database, plus the attempts log.
_FINAL_READ = """
import json, os
from e2e.server import LiveServer
from moderation.lab.history import history_final_read
from moderation.items.models import QueueItem
from moderation.records.models import AttemptOutcome, DecisionAttempt
ids = json.loads(open(os.environ["CLUSTER_IDS_FILE"]).read())
final = history_final_read(items=ids)
status = dict((str(k), v) for k, v in QueueItem.objects.filter(public_id__in=ids).values_list("public_id", "status"))
told = {}
for a in DecisionAttempt.objects.filter(item__public_id__in=ids, outcome=AttemptOutcome.LOST).select_related("item", "reviewer", "winner"):
    told.setdefault(str(a.item.public_id), []).append([a.reviewer.get_username(), a.winner.get_username()])
print(json.dumps({i: {"winner": f.winner, "winning_attempts": f.winning_attempts, "resumes": f.resumes,
                      "status": status[i], "lost_told": told.get(i, [])} for i, f in final.items()}))
"""


@dataclass
class Cluster:
    servers: list[LiveServer]
    items: list[str]

    @property
    def hosts(self) -> list[str]:
        return [server.netloc for server in self.servers]

    def final_read(self, ids: list[str]) -> dict[str, dict]:
        first = self.servers[0]
        ids_file = first.workdir / f"ids-{time.monotonic_ns()}.json"
        ids_file.write_text(json.dumps(ids))
        out = first.manage("shell", "-c", _FINAL_READ, timeout=180, env={"CLUSTER_IDS_FILE": str(ids_file)})
        return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    admin_url, redis_url = services_require()
    with fresh_database(admin_url, "api") as database_url:
        env = cluster_env(redis_url=redis_url, prefix=channel_prefix("api"))
        servers = [
            LiveServer(tmp_path_factory.mktemp(f"cluster-{n}"), database_url=database_url, extra_env=env, health_path="/healthz")
            for n in range(2)
        ]
        started = time.monotonic()
        # alice is staff too: /healthz shows its backends to staff only.
        seeded = servers[0].seed(
            users=["alice", "bob"], staff=["alice"], password=PASSWORD, sessions=False, items=RACE_ITEMS + 2, prefix="Cluster"
        )
        site = Cluster(servers=servers, items=seeded.items)
        seeded_at = time.monotonic()
        try:
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(lambda server: server.start(timeout=90), servers))
            print(
                f"\ncluster: migrated + seeded {len(site.items)} items in {seeded_at - started:.1f} s, "
                f"two servers healthy in {time.monotonic() - seeded_at:.1f} s ({', '.join(site.hosts)})"
            )
            yield site
        finally:
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(LiveServer.close, servers))


class Reviewer(FormSession):
    """A moderator's cookies (one login, valid on every server: sessions live in the database)."""

    def __init__(self, host: str, username: str) -> None:
        super().__init__(host, username, PASSWORD, timeout=HTTP_TIMEOUT)

    async def socket(self, host: str, path: str) -> Listener:
        ws = await connect(
            f"ws://{host}/{path}",
            origin=f"http://{host}",
            ping_interval=None,
            open_timeout=30,
            additional_headers={"Cookie": f"sessionid={self.cookie('sessionid')}"},
        )
        listener = Listener(ws)
        listener.state = await listener.wait(lambda f: f["type"] == "state")
        return listener


class Listener:
    """An open socket whose frames are read all the time (so a busy test never stalls the server's sends)."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.frames: list[dict] = []
        self.state: dict = {}
        self._arrived = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for raw in self.ws:
            self.frames.append(json.loads(raw))
            self._arrived.set()

    async def wait(self, match, *, timeout: float = LIVE_TIMEOUT) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for frame in self.frames:
                if match(frame):
                    return frame
            self._arrived.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no matching frame within {timeout} s; got {[f['type'] for f in self.frames][-20:]}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), remaining)

    def about(self, kind: str, item: str) -> list[dict]:
        return [f for f in self.frames if f["type"] == kind and f.get("item") == item]

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()


@pytest.fixture(scope="module")
def people(cluster):
    return {"alice": Reviewer(cluster.hosts[0], "alice"), "bob": Reviewer(cluster.hosts[1], "bob")}


def test_every_server_reports_postgres_postgressaver_and_redis(cluster, people):
    for host in cluster.hosts:
        with people["alice"].opener.open(f"http://{host}/healthz", timeout=HTTP_TIMEOUT) as response:
            health = json.load(response)
        assert health["ok"], (host, health)
        backends = {name: check["backend"] for name, check in health["checks"].items()}
        assert backends == {
            "database": "postgresql",
            "checkpointer": "PostgresSaver",
            "channel_layer": "RedisPubSubChannelLayer",
        }, (host, health)


def _attempt(
    recorder: HistoryRecorder,
    reviewer: Reviewer,
    host: str,
    item: str,
    decision: str,
    start: threading.Barrier,
    latencies: list[float],
) -> Op:
    start.wait()
    op = recorder.invoke(reviewer=reviewer.username, item=item, decision=decision)
    began = time.monotonic()
    try:
        status, body = reviewer.decide(host, item, decision)
    except Exception as exc:  # noqa: BLE001 - a timeout or dropped connection: the reviewer does not know
        recorder.complete(op, completion="unknown", error=f"{type(exc).__name__}: {exc}")
        return op
    latencies.append(time.monotonic() - began)
    recorder.complete_from_http(op, status=status, body=body)
    return op


@pytest.mark.asyncio
async def test_two_servers_race_one_winner_each_and_losers_told_across_servers(cluster, people):
    """alice posts to server 1, bob to server 2, on every item at the same instant."""
    alice, bob = people["alice"], people["bob"]
    items = cluster.items[:RACE_ITEMS]
    posts_to = {"alice": cluster.hosts[0], "bob": cluster.hosts[1]}
    # Each reviewer listens on the server they do NOT post to: every notice crosses through Redis.
    listens = {"alice": await alice.socket(cluster.hosts[1], "ws/queue/"), "bob": await bob.socket(cluster.hosts[0], "ws/queue/")}

    recorder = HistoryRecorder()
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    in_flight = asyncio.Semaphore(ITEMS_IN_FLIGHT)
    with ThreadPoolExecutor(2 * ITEMS_IN_FLIGHT) as pool:

        async def race(n: int, item: str) -> None:
            # Opposite decisions, swapped every item, so the stored status shows whose won.
            wants = {"alice": "approve", "bob": "reject"} if n % 2 == 0 else {"alice": "reject", "bob": "approve"}
            start = threading.Barrier(2, timeout=60)
            async with in_flight:
                await asyncio.gather(
                    *(
                        loop.run_in_executor(
                            pool, _attempt, recorder, who, posts_to[who.username], item, wants[who.username], start, latencies
                        )
                        for who in (alice, bob)
                    )
                )

        began = time.monotonic()
        await asyncio.gather(*(race(n, item) for n, item in enumerate(items)))
        race_seconds = time.monotonic() - began

    final_raw = await asyncio.to_thread(cluster.final_read, items)
    final = {
        i: FinalItem(winner=f["winner"], winning_attempts=f["winning_attempts"], resumes=f["resumes"])
        for i, f in final_raw.items()
    }
    anomalies = history_check(ops=recorder.ops, final=final)
    assert not anomalies, "\n".join(map(str, anomalies))

    unknown = [op for op in recorder.ops if op.completion == "unknown"]
    assert not unknown, [f"{op.reviewer} on {op.item}: {op.error}" for op in unknown]
    assert sorted(final) == sorted(items), "the final read is missing items"
    wins = {name: 0 for name in posts_to}
    for item in items:
        state, ops = final_raw[item], [op for op in recorder.ops if op.item == item]
        assert state["winner"] in posts_to, f"{item} has no winner: {state}"
        assert (state["winning_attempts"], state["resumes"]) == (1, 1), f"{item}: {state}"
        assert sorted(op.completion for op in ops) == ["fail", "ok"], f"{item}: {ops}"
        loser = "bob" if state["winner"] == "alice" else "alice"
        assert state["lost_told"] == [[loser, state["winner"]]], f"{item}: attempts log says {state['lost_told']}"
        wins[state["winner"]] += 1

    # Live: every loser's socket, on the other server, is told who won; nobody else is told they lost.
    live_began = time.monotonic()
    for item in items:
        winner = final_raw[item]["winner"]
        loser = "bob" if winner == "alice" else "alice"
        status = final_raw[item]["status"]
        wanted = {"alice": "approve", "bob": "reject"} if items.index(item) % 2 == 0 else {"alice": "reject", "bob": "approve"}
        assert status == {"approve": "approved", "reject": "rejected"}[wanted[winner]], f"{item}: {final_raw[item]}"
        notice = await listens[loser].wait(lambda f: f["type"] == "decision.lost" and f.get("item") == item)  # noqa: B023 - awaited at once
        assert notice["winner"] == winner, notice
        assert notice["message"].endswith(f"was not applied: {winner} {status} it first"), notice
        for listener in listens.values():
            decided = await listener.wait(lambda f: f["type"] == "item.decided" and f.get("item") == item)  # noqa: B023 - awaited at once
            assert (decided["winner"], decided["status"]) == (winner, status), decided
    live_wait = time.monotonic() - live_began
    for name, listener in listens.items():
        lost = [f for f in listener.frames if f["type"] == "decision.lost"]
        assert all(f["winner"] != name for f in lost), f"{name} was told they lost an item they won"
        assert len(lost) == sum(1 for item in items if final_raw[item]["winner"] != name), (name, len(lost))
        assert len({f["item"] for f in listener.frames if f["type"] == "item.decided"}) == len(items)
        await listener.close()

    durations = [op.completed_at - op.invoked_at for op in recorder.ops]
    by_item: dict[str, list[Op]] = {}
    for op in recorder.ops:
        by_item.setdefault(op.item, []).append(op)
    skews = [max(op.invoked_at for op in ops) - min(op.invoked_at for op in ops) for ops in by_item.values()]
    # A real race, not two polite turns: on most items the second request left before the first was answered.
    overlapped = sum(max(op.invoked_at for op in ops) < min(op.completed_at for op in ops) for ops in by_item.values())
    assert overlapped >= len(items) / 2, f"{overlapped} of {len(items)} items had both requests in flight at once"
    print(
        f"\ncluster race: {len(items)} items x 2 reviewers on 2 servers in {race_seconds:.1f} s "
        f"({ITEMS_IN_FLIGHT} items in flight); wins alice {wins['alice']} / bob {wins['bob']}; "
        f"request latency median {statistics.median(durations) * 1000:.0f} ms, "
        f"p95 {sorted(durations)[int(0.95 * len(durations)) - 1] * 1000:.0f} ms, max {max(durations) * 1000:.0f} ms; "
        f"live notices all in within {live_wait:.2f} s after the last response"
        + f"; start skew median {statistics.median(skews) * 1000:.1f} ms, max {max(skews) * 1000:.1f} ms; "
        + f"{overlapped} of {len(items)} items raced with both requests in flight"
    )


@pytest.mark.asyncio
async def test_presence_on_server_1_shows_on_server_2(cluster, people):
    alice, bob = people["alice"], people["bob"]
    item = cluster.items[RACE_ITEMS]
    path = f"ws/items/{item}/"
    bob_item = await bob.socket(cluster.hosts[1], path)
    assert bob_item.state["viewers"] == ["bob"], bob_item.state

    alice_item = await alice.socket(cluster.hosts[0], path)
    # Broadcast by server 1 when alice joined, delivered by server 2 through Redis.
    await bob_item.wait(lambda f: f["type"] == "presence.changed" and f["item"] == item and f["viewers"] == ["alice", "bob"])
    # The shared store: a page opened on server 2 now reads alice (joined on server 1) in its snapshot.
    bob_queue = await bob.socket(cluster.hosts[1], "ws/queue/")
    assert bob_queue.state["viewing"].get(item) == ["alice", "bob"], bob_queue.state

    await alice_item.close()
    await bob_item.wait(lambda f: f["type"] == "presence.changed" and f["item"] == item and f["viewers"] == ["bob"])
    await bob_queue.wait(lambda f: f["type"] == "presence.changed" and f["item"] == item and f["viewers"] == ["bob"])
    await bob_item.close()
    await bob_queue.close()
