"""Workers scale out: two servers and two task workers on one PostgreSQL and one Redis, one worker SIGKILLed mid-apply.

Eight moderators race 100 items, two per item on different servers, while two ``db_worker``
processes apply the decisions and deliver webhooks to a real receiver. One worker holds each
apply between the graph's resume and its record (a ``before_record`` fault) and is SIGKILLed
in that window during the burst; a replacement starts, and only the sweeps bring its work
back. Judged: the history (``moderation.lab.history``), every graph resumed exactly once and
never forked, and one webhook-id per (event, item).

Negative control: a lone worker killed in the same window and never replaced leaves the
decision resumed but unrecorded; a new worker's sweep records it without resuming again.

Queued starts scale out the same way: 100 items accepted with ``start: "queued"``, one of two
workers SIGKILLed while it holds a start; every graph must start once and every item be
decided once and resumed once.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import httpx
import pytest

from e2e.server import LiveServer
from moderation.lab.history import FinalItem, HistoryRecorder, history_check
from moderation.tests.cluster_support import (
    channel_prefix,
    cluster_env,
    database_query,
    fresh_database,
    services_require,
    work_settled_wait,
    work_unsettled,
)
from moderation.tests.real_server import Reviewer
from moderation.tests.webhook_receiver import Receiver

# A net for a hang, not a speed claim: the waits fail on a stall (SETTLE_STALL); a loaded 2-core machine is slow.
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

ITEMS = 100
MODERATORS = [f"mod{n}" for n in range(8)]
IN_FLIGHT = 8  # items raced at the same time
DOOMED_HOLD = 2.5  # seconds the doomed worker holds each apply between resume and record
KILL_MARGIN = 0.5  # seconds the kill may take after the last look
DOOMED_APPLIES_BEFORE_KILL = 1
# The settle waits give up once nothing has moved for this long: a busy machine makes the work slow, not stuck.
SETTLE_STALL = 60
WORKER_ENV = {
    # The suite's conftest sets "1" (apply in the deciding process); here the workers apply.
    "REVIEWQUEUE_APPLY_INLINE": "",
    # A killed worker's apply is queued again after 3 s, its lost delivery after its lease
    # (WEBHOOK_TIMEOUT + 2 s) and 5 s of grace; both sweeps run every 0.5 s.
    "APPLY_SWEEP_GRACE": "3",
    "WEBHOOK_SWEEP_INTERVAL": "0.5",
    "WEBHOOK_LEASE_GRACE": "5",
    "WEBHOOK_TIMEOUT": "2",
    "WEBHOOK_RETRY_BASE": "0.2",
    "WEBHOOK_RETRY_MAX": "1",
}
EVENTS = ("item.decided", "item.applied")
_ENDPOINT = """
from moderation.delivery.models import WebhookEndpoint
e = WebhookEndpoint.objects.create(name="receiver", url={url!r}, events={events!r})
print("SECRET " + e.secret)
"""
APPLY_TASK = "moderation.review.apply.item_apply_task"


# Claimed by a worker: by its main loop (its id) or by one of its lanes (``<id>-applies-<n>``, ``<id>-deliveries-<n>``).
_CLAIMED_BY = """EXISTS (SELECT 1 FROM jsonb_array_elements_text(worker_ids) AS w
                         WHERE w ~ ('^' || %s || '(-(applies|deliveries)-[0-9]+)?$'))"""


def _tasks(database_url: str, worker_id: str, status: str) -> list[tuple]:
    """(task path, args) of the task rows ``worker_id`` (or its lanes) claimed that are now in ``status``."""
    return database_query(
        database_url,
        f"""
        SELECT task_path, args_kwargs FROM django_tasks_database_dbtaskresult
        WHERE status = %s AND {_CLAIMED_BY} ORDER BY started_at""",
        [status, worker_id],
    )


def _applies_left(database_url: str, *, but: object | None) -> bool:
    """Whether an apply task (other than the task ``but``) is still queued or running."""
    return bool(
        database_query(
            database_url,
            """
        SELECT 1 FROM django_tasks_database_dbtaskresult
        WHERE status IN ('READY', 'RUNNING') AND task_path = %s AND id::text <> %s LIMIT 1""",
            [APPLY_TASK, str(but or "")],
        )
    )


def _item_public_id(database_url: str, pk: int) -> str:
    return database_query(database_url, "SELECT public_id::text FROM moderation_queueitem WHERE id = %s", [pk])[0][0]


def _workers_stop(site: SimpleNamespace) -> None:
    """SIGTERM every worker still running (each finishes its task first): a test's own workers alone work after this."""
    for server in site.servers:
        server.workers_stop(timeout=30)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    admin_url, redis_url = services_require()
    receiver = Receiver().start()
    with fresh_database(admin_url, "workers") as database_url:
        env = {**cluster_env(redis_url=redis_url, prefix=channel_prefix("workers")), **WORKER_ENV}
        servers = [
            LiveServer(tmp_path_factory.mktemp(f"workers-{n}"), database_url=database_url, extra_env=env) for n in range(2)
        ]
        try:
            began = time.monotonic()
            # Beyond the burst: the negative control's item, and one per kill point inside the graph's run.
            seeded = servers[0].seed(users=MODERATORS, items=ITEMS + 1 + len(GRAPH_KILL_POINTS), prefix="Burst")
            out = servers[0].manage("shell", "-c", _ENDPOINT.format(url=receiver.url, events=list(EVENTS)))
            receiver.secret = next(line for line in out.splitlines() if line.startswith("SECRET ")).removeprefix("SECRET ")
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(lambda server: server.start(timeout=90), servers))
            print(f"\ncluster workers: {ITEMS + 1} items seeded and two servers up in {time.monotonic() - began:.1f} s")
            # Moderator n posts to server n % 2, so an item's two reviewers (n, n + 1) are on different servers.
            reviewers = [Reviewer(servers[n % 2], name, seeded.sessions[name]) for n, name in enumerate(MODERATORS)]
            yield SimpleNamespace(
                servers=servers,
                database_url=database_url,
                receiver=receiver,
                items=seeded.items[:ITEMS],
                spare=seeded.items[ITEMS],
                in_graph=dict(zip(GRAPH_KILL_POINTS, seeded.items[ITEMS + 1 :], strict=False)),
                reviewers=reviewers,
            )
        finally:
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(LiveServer.close, servers))
            receiver.stop()
            for server in servers:
                print(f"\n--- {server.workdir.name} worker log ---\n{server.log_tail(30, worker=True)}")


def _attempt(recorder: HistoryRecorder, reviewer: Reviewer, item: str, decision: str, start: threading.Barrier) -> None:
    start.wait()
    reviewer.decide_recorded(recorder, item, decision)


class Killer(threading.Thread):
    """Waits until the doomed worker has applied a few decisions, then SIGKILLs it between a resume and
    its record; keeps what went wrong for the test."""

    def __init__(self, site: SimpleNamespace, doomed, burst_done: threading.Event) -> None:
        super().__init__(name="killer", daemon=True)
        self.site, self.doomed, self.burst_done = site, doomed, burst_done
        self.orphan: str | None = None  # the item whose apply the kill interrupted
        self.orphan_state: dict = {}
        self.error: BaseException | None = None
        self.killed_at: float | None = None
        self.applied_before = 0
        self.seen_paused: dict[object, float] = {}  # task id -> when a look last saw its graph paused
        self.others_in_flight = False  # other applies queued or running when it struck

    def run(self) -> None:
        try:
            self._hunt()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def _hunt(self) -> None:
        url, tool = self.site.database_url, self.site.servers[1].tool
        deadline = time.monotonic() + 120
        # Applies go on after the burst's last answer (on a busy machine, most of them): the hunt goes on
        # while any apply is left to run, not only while decisions are being made.
        while time.monotonic() < deadline and not (self.burst_done.is_set() and not _applies_left(url, but=None)):
            applied = [t for t in _tasks(url, "doomed", "SUCCESSFUL") if t[0] == APPLY_TASK]
            running = database_query(
                url,
                f"""
                SELECT id, args_kwargs FROM django_tasks_database_dbtaskresult
                WHERE status = 'RUNNING' AND task_path = %s AND {_CLAIMED_BY}""",
                [APPLY_TASK, "doomed"],
            )
            if len(applied) >= DOOMED_APPLIES_BEFORE_KILL and running:
                task_id, args = running[0]
                item = _item_public_id(url, args["args"][0])
                looked = time.monotonic()
                if tool("state", item)[item]["graph_paused"]:
                    self.seen_paused[task_id] = looked
                    continue  # not resumed yet
                # Resumed, and the hold cannot have ended yet: it began after the claim, and after the last
                # look that still saw the graph paused (on a loaded machine a resume alone takes seconds).
                claimed_ago = database_query(
                    url,
                    """
                    SELECT EXTRACT(EPOCH FROM now() - started_at)::float FROM django_tasks_database_dbtaskresult
                    WHERE id = %s AND status = 'RUNNING'""",
                    [task_id],
                )
                hold_began_within = min(
                    claimed_ago[0][0] if claimed_ago else DOOMED_HOLD, looked - self.seen_paused.get(task_id, float("-inf"))
                )
                if claimed_ago and hold_began_within < DOOMED_HOLD - KILL_MARGIN:
                    self.others_in_flight = _applies_left(url, but=task_id)
                    self.doomed.kill()
                    self.killed_at = time.monotonic()
                    self.applied_before = len(applied)
                    self.doomed.wait(timeout=10)
                    self.orphan, self.orphan_state = item, tool("state", item)[item]
                    # Only now a second worker, on the other server: while the doomed one worked alone, the
                    # burst's applies queued behind it (a loaded machine's steady worker had left it none).
                    self.site.servers[1].worker_start(worker_id="steady")
                    return
            time.sleep(0.02)


def test_a_worker_killed_mid_apply_during_a_burst_loses_nothing_and_applies_nothing_twice(site):
    url, items, receiver = site.database_url, site.items, site.receiver
    doomed = site.servers[0].worker_start(worker_id="doomed", faults=f"before_record:sleep={DOOMED_HOLD}")
    site.servers[0].worker_wait_ready("doomed")
    site.servers[1].tool("ping")  # the killer's state reads: start their process now, not mid-hunt
    burst_done = threading.Event()
    killer = Killer(site, doomed, burst_done)
    killer.start()

    recorder = HistoryRecorder()
    began = time.monotonic()
    with ThreadPoolExecutor(2 * IN_FLIGHT) as pool:
        for n, item in enumerate(items):
            first, second = site.reviewers[n % 8], site.reviewers[(n + 1) % 8]
            wants = ("approve", "reject") if n % 2 == 0 else ("reject", "approve")
            start = threading.Barrier(2, timeout=60)
            # The two halves of a pair are queued side by side, so a pair never waits on a missing partner.
            pool.submit(_attempt, recorder, first, item, wants[0], start)
            pool.submit(_attempt, recorder, second, item, wants[1], start)
    burst_end = time.monotonic()
    burst_done.set()
    killer.join(timeout=150)
    assert killer.error is None, killer.error
    assert killer.killed_at is not None, "the doomed worker was never caught between a resume and its record"
    assert doomed.returncode == -signal.SIGKILL
    # What a supervisor does: start another (the sweeps of any worker would do without it).
    site.servers[0].worker_start(worker_id="replacement")

    left = work_settled_wait(url, stall=SETTLE_STALL)
    settled_at = time.monotonic()
    assert not any(left.values()), f"stuck after the burst (nothing moved for {SETTLE_STALL} s): {left}"

    # The kill landed in the burst, after the graph's resume and before the record.
    assert killer.applied_before >= DOOMED_APPLIES_BEFORE_KILL
    assert killer.others_in_flight, "the worker was killed with no other apply in flight: not during the burst"
    orphan = killer.orphan_state
    assert (orphan["apply_state"], orphan["graph_paused"], orphan["resume_count"]) == ("applying", False, 1), orphan
    # Its task was never finished by the dead worker: the sweep that queued its work again marked it failed,
    # as it did those of the worker's other lanes, killed wherever their applies (or deliveries) were (the
    # checks below judge those items too: each resumed once, at its end; each webhook delivered once).
    assert _tasks(url, "doomed", "RUNNING") == []
    failed = [(path, args["args"][0]) for path, args in _tasks(url, "doomed", "FAILED")]
    orphan_pk = database_query(url, "SELECT id FROM moderation_queueitem WHERE public_id = %s", [killer.orphan])[0][0]
    assert orphan_pk in {pk for path, pk in failed if path == APPLY_TASK}, failed

    # The race: one winner and one loser per item, told the truth, through both servers.
    unknown = [op for op in recorder.ops if op.completion != "ok" and op.completion != "fail"]
    assert not unknown, [f"{op.reviewer} on {op.item}: {op.completion} {op.error}" for op in unknown]
    state = site.servers[1].tool("state", *items)
    assert sorted(state) == sorted(items)
    final = {item: FinalItem(**row["final"]) for item, row in state.items()}
    anomalies = history_check(ops=recorder.ops, final=final)
    assert not anomalies, "\n".join(map(str, anomalies))
    by_item = defaultdict(list)
    for op in recorder.ops:
        by_item[op.item].append(op)
    for item in items:
        row = state[item]
        assert sorted(op.completion for op in by_item[item]) == ["fail", "ok"], (item, by_item[item])
        assert len(row["won_attempts"]) == 1 and row["status"] in {"approved", "rejected"}, (item, row)
        # Applied exactly once: one resume, no fork, recorded as finished.
        assert (row["resume_count"], row["forks"], row["graph_paused"]) == (1, 0, False), (item, row)
        assert (row["apply_state"], row["applied_result"]["state"]) == ("", "finished"), (item, row)

    # Webhooks: exactly one webhook-id per (event, item); repeats of an id are the only duplicates.
    ids: dict[tuple[str, str], set[str]] = defaultdict(set)
    firsts = receiver.unique()
    for received in firsts.values():
        ids[(received.type, received.data["id"])].add(received.msg_id)
    assert set(ids) == {(event, item) for event in EVENTS for item in items}, "webhooks missing or unexpected"
    assert all(len(msg_ids) == 1 for msg_ids in ids.values()), {k: v for k, v in ids.items() if len(v) > 1}
    assert receiver.bad_signatures == 0
    for received in firsts.values():
        row = state[received.data["id"]]
        if received.type == "item.decided":
            assert received.data["decision"]["by"] == row["winner"], received
        else:
            assert received.data["applied_result"]["state"] == "finished", received
    repeats = len(receiver.received) - len(firsts)

    worked = Counter()
    for worker in ("doomed", "steady", "replacement"):
        worked[worker] = sum(1 for path, _ in _tasks(url, worker, "SUCCESSFUL") if path == APPLY_TASK)
    ((apply_tasks,),) = database_query(
        url, "SELECT count(*) FROM django_tasks_database_dbtaskresult WHERE task_path = %s", [APPLY_TASK]
    )
    wins = Counter(row["winner"] for row in state.values())
    print(
        f"\ncluster workers: {ITEMS} items x 2 moderators on 2 servers in {burst_end - began:.1f} s "
        f"(wins {dict(sorted(wins.items()))}); worker 'doomed' SIGKILLed {killer.killed_at - began:.1f} s in, "
        f"after {killer.applied_before} applies, between item {killer.orphan}'s resume and its record "
        f"({'with' if killer.others_in_flight else 'without'} other applies in flight); "
        f"settled {settled_at - burst_end:.1f} s after the burst; apply tasks succeeded per worker {dict(worked)} "
        f"({apply_tasks} apply tasks for {ITEMS} decisions, the sweeps' re-queues included); "
        f"{len(firsts)} webhooks, {repeats} repeated deliveries of an id; every graph resumed once, no fork"
    )


def test_control_a_killed_worker_never_replaced_leaves_its_apply_lost_until_a_sweep(site):
    url, item, receiver = site.database_url, site.spare, site.receiver
    _workers_stop(site)  # the first test's workers: nobody may sweep
    assert not any(work_unsettled(url).values()), "the first test left work behind"
    doomed = site.servers[0].worker_start(worker_id="control-doomed", faults="before_record:kill")
    status, body = site.reviewers[0].decide(item, "approve")
    assert (status, body["outcome"]) == (200, "won"), body
    assert doomed.wait(timeout=30) == -signal.SIGKILL

    # Longer than the sweep's grace: with no worker alive, time alone repairs nothing.
    time.sleep(float(WORKER_ENV["APPLY_SWEEP_GRACE"]) + 2)
    lost = site.servers[0].tool("state", item)[item]
    assert (lost["apply_state"], lost["graph_paused"], lost["resume_count"]) == ("applying", False, 1), lost
    assert work_unsettled(url)["applying"] == 1  # what the burst test's wait would have timed out on
    assert not [r for r in receiver.unique().values() if r.type == "item.applied" and r.data["id"] == item]

    site.servers[1].worker_start(worker_id="control-rescuer")
    left = work_settled_wait(url, stall=SETTLE_STALL)
    assert not any(left.values()), left
    row = site.servers[0].tool("state", item)[item]
    assert (row["apply_state"], row["resume_count"], row["forks"]) == ("", 1, 0), row
    applied = {r.msg_id for r in receiver.unique().values() if r.type == "item.applied" and r.data["id"] == item}
    assert len(applied) == 1


GRAPH_KILL_POINTS = ("in_review_node", "in_apply_node")


@pytest.mark.parametrize("point", GRAPH_KILL_POINTS)
def test_a_worker_killed_inside_the_graph_run_leaves_no_graph_short_of_its_end(site, point):
    """Killed in the resumed node (its answer not checkpointed) or in the next one (the
    resume's first checkpoint written, no interrupt left to resume): the next worker's
    sweep runs the graph on to its end, resumed once, and only then records it applied.
    Before the rescue the checker sees the harm a retry that only records would leave."""
    url, item = site.database_url, site.in_graph[point]
    _workers_stop(site)  # earlier tests' workers: only the doomed one may take this apply
    recorder = HistoryRecorder()
    doomed = site.servers[0].worker_start(worker_id=f"graph-doomed-{point}", faults=f"{point}:kill")
    site.reviewers[0].decide_recorded(recorder, item, "approve")
    assert doomed.wait(timeout=60) == -signal.SIGKILL
    killed = site.servers[0].tool("state", item)[item]
    assert (killed["apply_state"], killed["graph_paused"]) == ("applying", point == "in_review_node"), killed
    if point == "in_apply_node":
        assert [str(a) for a in history_check(ops=recorder.ops, final={item: FinalItem(**killed["final"])})] == [
            f"graph_unsettled on {item}: decided by mod0 but its graph neither reached its end nor its next interrupt"
        ]

    site.servers[1].worker_start(worker_id=f"graph-rescuer-{point}")
    left = work_settled_wait(url, stall=SETTLE_STALL)
    _workers_stop(site)  # the tests after this one count their own workers' tasks
    assert not any(left.values()), left
    row = site.servers[1].tool("state", item)[item]
    assert (row["apply_state"], row["applied_result"]["state"], row["resume_count"], row["forks"]) == ("", "finished", 1, 0), row
    assert row["applied_result"]["result"]["status"] == "approved", row
    assert history_check(ops=recorder.ops, final={item: FinalItem(**row["final"])}) == []
    assert [args["args"] for path, args in _tasks(url, f"graph-doomed-{point}", "FAILED") if path == APPLY_TASK] == [
        [database_query(url, "SELECT id FROM moderation_queueitem WHERE public_id = %s", [item])[0][0]]
    ]


START_TASK = "moderation.review.starts.items_start_task"


def _accept(server, token: str, count: int) -> list[str]:
    """Submit ``count`` items in queued batches of 100 through the API; their public ids."""
    ids: list[str] = []
    with httpx.Client(
        base_url=f"http://{server.host}:{server.port}/api/v1", timeout=60, headers={"Authorization": f"Bearer {token}"}
    ) as api:
        for first in range(0, count, 100):
            batch = [
                {"title": f"Queued {n}", "body": "Some harmless text.", "source": "pipeline", "idempotency_key": f"queued-{n}"}
                for n in range(first, min(count, first + 100))
            ]
            answer = api.post("/items:batch", json={"items": batch, "start": "queued"})
            assert answer.status_code == 200, answer.text
            results = answer.json()["results"]
            assert {r["outcome"] for r in results} == {"accepted"}, results
            ids += [r["item"]["id"] for r in results]
    return ids


class _StartsProgress:
    """Whether the workers still start items: the count still starting, read at most once a second
    for all the reviewers' threads, and when it last changed."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self._lock = threading.Lock()
        self._starting: int | None = None
        self._read_at = self._moved_at = time.monotonic()

    def stalled(self) -> bool:
        with self._lock:
            now = time.monotonic()
            if self._starting is None or now - self._read_at >= 1:
                starting = work_unsettled(self.database_url)["starting"]
                if starting != self._starting:
                    self._starting, self._moved_at = starting, now
                self._read_at = now
            return now - self._moved_at >= SETTLE_STALL


def _decide_once_started(
    recorder: HistoryRecorder, reviewer: Reviewer, item: str, decision: str, start: threading.Barrier, starts: _StartsProgress
) -> int:
    """Race the pair's other reviewer; an answer "still starting" records nothing, so try again
    while the workers are still starting items. Returns how many times the item was still starting."""
    start.wait()
    refusals = 0
    while not starts.stalled():
        op = recorder.invoke(reviewer=reviewer.username, item=item, decision=decision)
        try:
            status, body = reviewer.decide(item, decision, timeout=60)
        except Exception as exc:  # noqa: BLE001 - whatever it was, the reviewer got no answer
            recorder.complete(op, completion="unknown", error=f"{type(exc).__name__}: {exc}")
            return refusals
        if status == 409 and body.get("error") == "starting":
            recorder.refused(op)
            refusals += 1
            time.sleep(0.05)
            continue
        recorder.complete_from_http(op, status=status, body=body)
        return refusals
    raise AssertionError(f"{reviewer.username}: item {item} still starting, and no item started for {SETTLE_STALL} s")


def test_a_worker_killed_mid_start_of_a_queued_batch_leaves_every_item_started_once_and_decided_once(site):
    """100 items accepted through the API (start "queued") while two workers start them, one
    SIGKILLed between a graph's start and its row's record; pairs of reviewers on both servers
    decide each item as soon as it is in the queue. Judged by the history checker, starts included."""
    url = site.database_url
    _workers_stop(site)  # the earlier tests' workers
    token = site.servers[0].manage("apiclient_create", "queued-pipeline").strip()
    # The doomed worker SIGKILLs itself at its first start, between the graph's run and the row's record
    # (a fault point, not a hunter timing a kill from outside: a busy machine's reads outlast any hold).
    doomed = site.servers[0].worker_start(worker_id="start-doomed", faults="after_start_run:kill")
    site.servers[1].worker_start(worker_id="start-steady")
    site.servers[0].worker_wait_ready("start-doomed")
    site.servers[1].worker_wait_ready("start-steady")

    began = time.monotonic()
    items = _accept(site.servers[0], token, ITEMS)
    accepted_in = time.monotonic() - began
    recorder = HistoryRecorder()
    with ThreadPoolExecutor(2 * IN_FLIGHT) as pool:
        attempts = []
        starts = _StartsProgress(url)
        for n, item in enumerate(items):
            first, second = site.reviewers[n % 8], site.reviewers[(n + 1) % 8]
            start = threading.Barrier(2, timeout=60)
            attempts.append(pool.submit(_decide_once_started, recorder, first, item, "approve", start, starts))
            attempts.append(pool.submit(_decide_once_started, recorder, second, item, "reject", start, starts))
        refusals = sum(a.result() for a in attempts)
    burst_end = time.monotonic()
    try:
        returncode = doomed.wait(timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError("the doomed worker never started an item") from None
    assert returncode == -signal.SIGKILL, returncode
    # The kill left its task unfinished: the sweep started its chunk again (the orphan's second start joining
    # the first), and marked the task failed.
    [[chunk]] = [args["args"] for path, args in _tasks(url, "start-doomed", "FAILED") if path == START_TASK]

    left = work_settled_wait(url, stall=SETTLE_STALL)
    assert not any(left.values()), f"stuck after the burst (nothing moved for {SETTLE_STALL} s): {left}"
    unknown = [op for op in recorder.ops if op.completion not in ("ok", "fail")]
    assert not unknown, [f"{op.reviewer} on {op.item}: {op.completion} {op.error}" for op in unknown]
    state = site.servers[1].tool("state", *items)
    assert sorted(state) == sorted(items)
    final = {item: FinalItem(**row["final"]) for item, row in state.items()}
    anomalies = history_check(ops=recorder.ops, final=final)
    assert not anomalies, "\n".join(map(str, anomalies))
    assert refusals >= 1, "no reviewer ever found an item still starting: the decisions never overlapped the starts"
    for item in items:
        row = state[item]
        assert row["final"]["starts"] == 1, (item, row)  # started once, whoever started it
        assert len(row["won_attempts"]) == 1 and row["status"] in {"approved", "rejected"}, (item, row)
        assert (row["resume_count"], row["forks"], row["apply_state"]) == (1, 0, ""), (item, row)
        ops = [op for op in recorder.ops if op.item == item]
        assert sorted(op.completion for op in ops) == ["fail", "ok"], (item, ops)
    worked = Counter(
        worker
        for worker in ("start-doomed", "start-steady")
        for path, _ in _tasks(url, worker, "SUCCESSFUL")
        if path == START_TASK
    )
    ((start_tasks,),) = database_query(
        url, "SELECT count(*) FROM django_tasks_database_dbtaskresult WHERE task_path = %s", [START_TASK]
    )
    print(
        f"\ncluster starts: {ITEMS} items accepted in {accepted_in:.2f} s; decided by pairs on 2 servers "
        f"{burst_end - began:.1f} s after the first submit; worker 'start-doomed' SIGKILLed holding the start "
        f"of a chunk of {len(chunk)}; start tasks succeeded per worker {dict(worked)} ({start_tasks} start tasks for "
        f"{ITEMS} items, the sweep's re-queues included); {refusals} attempts answered 'still starting'; "
        "every graph started once, resumed once, no fork"
    )
