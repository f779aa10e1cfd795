"""Measure 27: a decision → a LangGraph deployment's thread resumed, and where the time goes.

A real ``langgraph dev`` (the tests' ``moderation.tests.langgraph_server``, its ``hitl``
graph) is connected as a deployment; agent threads run to their interrupt there and the
sweep makes their items. Two task workers (``db_worker --interval 1``, as the deployment docs
start them) apply. Decisions are made in this process (``item_decide``, as a server does:
the apply is queued, never inline): one at a time, each waited for (quiet), then a burst of
``burst`` threads decided by 8 reviewers at once.

Per decision, on one clock (this machine's): the decision answered (``item_decide`` returned, after
its commit: a worker woken by the task's NOTIFY may pick it up before that),
the apply task's pick-up by a worker (``started_at``), the remote resume's run created on the
deployment and finished there (the run's ``created_at`` / ``updated_at``), and the apply
recorded (``ReviewAsk.applied_at``); the headline is answered → recorded. For attribution, the
calls the apply makes to the deployment are timed alone, quiet: one thread read (``GET
/threads/<id>``, a new HTTP client each, as the apply makes them) and a client's construction; and the
floor, the same resume sent by hand (the SDK's ``runs.wait``) on threads of its own: the deployment's own time.
"""

from __future__ import annotations

import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

from bench.common import Metric, Servers, log, median, percentile

APPLY_TASK = "moderation.review.apply.item_apply_task"
PHASES = (
    "answered → picked up by a worker",
    "picked up → remote run created",
    "run created → run finished",
    "run finished → recorded",
)


def _ts(value) -> float:
    return (value if isinstance(value, datetime) else datetime.fromisoformat(str(value))).timestamp()


def _threads_make(url: str, graph: str, count: int) -> list[str]:
    from moderation.tests.deployments_support import agent_run

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda _n: agent_run(url, graph), range(count)))


def _timeline(url: str, item_pk: int, committed: float) -> dict[str, float] | None:
    """The decision's milestones, seconds since it was answered; None until it is recorded."""
    from django_tasks_db.models import DBTaskResult

    from moderation.items.models import QueueItem, ReviewAsk
    from moderation.tests.deployments_support import sdk

    applied = ReviewAsk.objects.filter(item_id=item_pk, applied_at__isnull=False).values_list("applied_at", flat=True)
    if not applied:
        return None
    task = (
        DBTaskResult.objects.filter(task_path=APPLY_TASK, args_kwargs__args__0=item_pk, started_at__isnull=False)
        .order_by("started_at")
        .values("started_at")
        .first()
    )
    thread_id = QueueItem.objects.get(pk=item_pk).graph_input["external"]["thread_id"]
    runs = sorted(sdk(url).runs.list(thread_id), key=lambda run: _ts(run["created_at"]))
    resume = runs[-1]
    marks = [
        _ts(task["started_at"]) if task else float("nan"),
        _ts(resume["created_at"]),
        _ts(resume["updated_at"]),
        _ts(applied[0]),
    ]
    return {
        "total": marks[-1] - committed,
        **{phase: b - a for phase, a, b in zip(PHASES, [committed, *marks[:-1]], marks, strict=False)},
    }


def _decide_and_time(url: str, item, reviewer) -> tuple[int, float]:
    from moderation.review.decisions import item_decide
    from moderation.tests.deployments_support import edit_to

    outcome = item_decide(item_public_id=item.public_id, reviewer=reviewer, decisions=edit_to(reviewer.username))
    committed = time.time()
    assert outcome.won, outcome
    return item.pk, committed


def _wait_all(url: str, decided: list[tuple[int, float]], *, stall: float = 120) -> list[dict[str, float]]:
    found: dict[int, dict[str, float]] = {}
    moved = time.monotonic()
    while len(found) < len(decided):
        for pk, committed in decided:
            if pk not in found and (timeline := _timeline(url, pk, committed)) is not None:
                found[pk], moved = timeline, time.monotonic()
        assert time.monotonic() - moved < stall, f"{len(decided) - len(found)} decisions not applied after {stall} s"
        time.sleep(0.02)
    return [found[pk] for pk, _ in decided]


def _summary(label: str, timelines: list[dict[str, float]]) -> str:
    parts = ", ".join(f"{phase} {median([t[phase] for t in timelines]) * 1000:.0f}" for phase in PHASES)
    return f"{label}: p50 of each phase (ms): {parts}"


def bench_deployment_resumed(servers: Servers, reviewers: list, *, quiet: int, burst: int) -> list[Metric]:
    from django.db import close_old_connections

    from moderation.graphs.remote import Connection, remote_thread_read
    from moderation.items.models import QueueItem
    from moderation.review.deployments import deployment_sweep
    from moderation.tests.deployments_support import register, sdk
    from moderation.tests.langgraph_server import LangGraphServer

    server = LangGraphServer(Path(tempfile.mkdtemp(prefix="bench-langgraph-")))
    server.start()
    try:
        url = server.url
        agents = register(url)
        for live in servers.live:
            live.workers_stop(timeout=30)
        for n in range(2):
            servers.live[n % len(servers.live)].worker_start(interval=1, worker_id=f"bench27-{n}")
        for n in range(2):
            servers.live[n % len(servers.live)].worker_wait_ready(f"bench27-{n}")

        def items_for(threads: list[str]) -> list:
            deployment_sweep(deployment=agents.deployment)
            by_thread = {
                item.graph_input["external"]["thread_id"]: item
                for item in QueueItem.objects.filter(graph_input__external__thread_id__in=threads)
            }
            assert len(by_thread) == len(threads), (len(by_thread), len(threads))
            return [by_thread[t] for t in threads]

        log(f"27. {quiet} agent threads to their interrupt on langgraph dev, one decision at a time")
        quiet_items = items_for(_threads_make(url, agents.hitl, quiet))
        quiet_times = []
        for n, item in enumerate(quiet_items):
            decided = [_decide_and_time(url, item, reviewers[n % len(reviewers)])]
            quiet_times += _wait_all(url, decided)
        log(_summary("27. quiet", quiet_times))
        connection = Connection(url=url)
        thread_id = quiet_items[0].graph_input["external"]["thread_id"]
        reads, clients = [], []
        for _ in range(20):
            began = time.perf_counter()
            remote_thread_read(connection=connection, thread_id=thread_id)
            reads.append(time.perf_counter() - began)
            began = time.perf_counter()
            connection.client().close()
            clients.append(time.perf_counter() - began)
        calls = {
            "one thread read (ms, p50)": round(median(reads) * 1000, 1),
            "one client made (ms, p50)": round(median(clients) * 1000, 1),
        }
        # The floor: the same resume sent by hand (the SDK's runs.wait, nothing else), on threads of its own.
        bare = []
        client = sdk(url)
        for thread in _threads_make(url, agents.hitl, quiet):
            [interrupt_id] = [i["id"] for task in client.threads.get(thread)["interrupts"].values() for i in task]
            began = time.perf_counter()
            client.runs.wait(thread, agents.hitl, command={"resume": {interrupt_id: {"decisions": []}}})
            bare.append(time.perf_counter() - began)
        calls["bare resume by hand (ms, p50)"] = round(median(bare) * 1000, 1)
        log(f"27. the deployment's calls alone: {calls}")

        log(f"27. {burst} agent threads, decided at once by {len(reviewers)} reviewers")
        burst_items = items_for(_threads_make(url, agents.hitl, burst))
        lock, decided = threading.Lock(), []

        def decide(n: int) -> None:
            try:
                result = _decide_and_time(url, burst_items[n], reviewers[n % len(reviewers)])
                with lock:
                    decided.append(result)
            finally:
                close_old_connections()

        began = time.time()
        with ThreadPoolExecutor(len(reviewers)) as pool:
            list(pool.map(decide, range(len(burst_items))))
        burst_times = _wait_all(url, decided)
        span = max(c + t["total"] for (_, c), t in zip(decided, burst_times, strict=False)) - began
        log(_summary("27. burst", burst_times) + f"; first decision → last recorded {span:.1f} s")
    finally:
        server.stop()

    def ms(values: list[float], p: float) -> float:
        return percentile([v * 1000 for v in values], p)

    def phases(timelines: list[dict[str, float]]) -> dict[str, float]:
        return {phase: round(ms([t[phase] for t in timelines], 50), 1) for phase in PHASES} | {
            f"p99 {phase}": round(ms([t[phase] for t in timelines], 99), 1) for phase in PHASES
        }

    quiet_total = [t["total"] for t in quiet_times]
    burst_total = [t["total"] for t in burst_times]
    # The run's own span holds langgraph dev's wait for its queue (an in-memory poll every 0.5 s): the rest is ours.
    quiet_ours = [t["total"] - t[PHASES[2]] for t in quiet_times]
    return [
        Metric(
            "deployment_resumed_p99_quiet",
            f"27. decision answered → a LangGraph deployment's thread resumed and recorded, "
            f"one at a time ({quiet}), two workers: p99",
            ms(quiet_total, 99),
            "ms",
            ms(bare, 99),
            "the same resume by hand (SDK runs.wait), p99",
            target=500,
            check="value",
            op="<=",
            detail={
                **phases(quiet_times),
                **calls,
                "p50 (ms)": round(ms(quiet_total, 50), 1),
                "bare p50 (ms)": round(ms(bare, 50), 1),
            },
        ),
        Metric(
            "deployment_resumed_ours_p99_quiet",
            "27.   ... of which reviewqueue's part (all but the run's span on the deployment), p99",
            ms(quiet_ours, 99),
            "ms",
            ms(quiet_ours, 50),
            "p50, same run",
            target=500,
            check="value",
            op="<=",
        ),
        Metric(
            "deployment_resumed_p99_burst",
            f"27. the same, {burst} threads decided at once by {len(reviewers)} reviewers: p99",
            ms(burst_total, 99),
            "ms",
            ms(burst_total, 50),
            "p50, same run",
            detail={**phases(burst_times), "first decision → last recorded (s)": round(span, 2)},
        ),
    ]
