"""Workers that keep up with the moderators deciding (issue 33): measures 23 and 24.

- 23. With two task workers (``manage.py db_worker``, ``APPLY_LANES`` apply lanes each), as
  ``scripts/run_cluster.sh`` runs them: how fast they apply against how fast the servers
  decide, each with the machine to itself (target ratio ≥ 1.0): a burst (8 reviewers, as
  measure 12) decided while no worker runs, then the two workers started on its backlog,
  their rate timed from the moment both poll. (Measured side by side in one burst, the
  ratio is below 1 even when the workers keep up: the last apply trails the last answer
  by an apply at least; that burst's figures are kept as information.) And decision →
  applied p99 at a sustained 50 decisions/s (open loop: each decision sent at its time,
  whether or not the one before was answered), from the ask's ``decided_at`` (the guard's
  commit) to its ``applied_at`` (the worker's record), target ≤ 500 ms.
- 24. (attribution) Where one lane's time goes: ``count`` decisions queued, then applied
  in this process by one ``QueueLane`` (the worker's apply lane, claiming as it does),
  with each phase of an apply timed, the process's CPU time beside the wall time, and the
  SQL statements and checkpointer calls per apply counted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock

from bench.applies import _burst, applied_wait
from bench.common import Login, Metric, Servers, log, median, percentile
from bench.served import _client, _decide

SUSTAINED_RATE = 50.0  # decisions/s
APPLIED_P99_MS = 500.0


def _rates(runs: list[dict], applied: dict[str, float], start: float) -> tuple[float, float]:
    http_rate = len(runs) / (max(r["done"] for r in runs) - start)
    return http_rate, len(applied) / (max(applied.values(), default=float("nan")) - start)


def bench_two_workers(servers: Servers, logins: list[Login], items: list[str], *, count: int, seconds: float) -> list[Metric]:
    """Measure 23: the two workers' apply rate on a backlog against the servers' decision rate with no worker
    running; then the same workers beside a burst, and at a sustained pace."""
    from moderation.items.models import ReviewAsk

    first, second = servers.live[0], servers.live[1 % len(servers.live)]
    lanes = _lanes()
    for server in servers.live:  # measure 12's worker: the servers decide alone
        server.workers_stop(timeout=60)
    backlog = [items.pop() for _ in range(count)]
    start = time.time()
    runs = asyncio.run(_burst(servers, logins, backlog, reviewers=8))
    http_rate = len(runs) / (max(r["done"] for r in runs) - start)
    for server, name in ((first, "bench-worker-1"), (second, "bench-worker-2")):
        server.worker_start(interval=0.05, worker_id=name)
    for server, name in ((first, "bench-worker-1"), (second, "bench-worker-2")):
        server.worker_wait_ready(name)
    both_polling = time.time()
    applied = applied_wait(backlog, timeout=180)
    after = [at for at in applied.values() if at >= both_polling]
    applied_rate = len(after) / (max(after) - both_polling) if after else float("nan")
    statuses = {s: sum(r["status"] == s for r in runs) for s in {r["status"] for r in runs}}
    log(
        f"two workers: {len(runs)} decisions answered at {http_rate:.1f}/s with no worker running; their backlog "
        f"applied at {applied_rate:.1f}/s once both polled ({len(after)} of {len(applied)}) {statuses}"
    )

    beside = [items.pop() for _ in range(count)]
    start = time.time()
    runs_beside = asyncio.run(_burst(servers, logins, beside, reviewers=8))
    applied_beside = applied_wait(beside, timeout=120)
    http_beside, applied_rate_beside = _rates(runs_beside, applied_beside, start)
    trail = max(applied_beside.values(), default=float("nan")) - max(r["done"] for r in runs_beside)
    log(
        f"two workers beside the burst: {len(runs_beside)} answered at {http_beside:.1f}/s, {len(applied_beside)} "
        f"applied at {applied_rate_beside:.1f}/s, the last {trail:.2f} s after the last answer"
    )

    paced = [items.pop() for _ in range(int(SUSTAINED_RATE * seconds))]
    sent = asyncio.run(_open_loop(servers, logins, paced, rate=SUSTAINED_RATE))
    applied_wait(paced, timeout=120)
    lags = [
        (a - d).total_seconds() * 1000
        for d, a in ReviewAsk.objects.filter(item__public_id__in=paced, applied_at__isnull=False).values_list(
            "decided_at", "applied_at"
        )
    ]
    decided_rate = sum(sent["statuses"].values()) / sent["seconds"]
    log(
        f"two workers at {SUSTAINED_RATE:.0f}/s asked ({decided_rate:.1f}/s sent): decision → applied p50 {median(lags):.0f} / "
        f"p99 {percentile(lags, 99):.0f} ms over {len(lags)} of {len(paced)} {dict(sent['statuses'])}"
    )
    return [
        Metric(
            "applied_rate_two_workers",
            f"23. decisions applied/s, two workers ({lanes} apply lanes each), on a backlog of {count}",
            applied_rate,
            "dec/s",
            http_rate,
            "HTTP decisions/s, 8 reviewers, no worker running",
            target=1.0,
            check="ratio",
            op=">=",
            detail={
                "decisions": count,
                "applied": len(applied),
                "timed": len(after),
                "statuses": statuses,
                "apply_lanes": lanes,
                # Side by side in one burst (information): the last apply trails the last answer.
                "beside_burst": {
                    "http_per_s": http_beside,
                    "applied_per_s": applied_rate_beside,
                    "applied_after_last_answer_s": trail,
                },
            },
        ),
        Metric(
            "applied_p99_sustained",
            f"23. decision → applied p99, two workers, {SUSTAINED_RATE:.0f} decisions/s for {seconds:g} s",
            percentile(lags, 99),
            "ms",
            median(lags),
            "p50, same run",
            target=APPLIED_P99_MS,
            check="value",
            op="<=",
            detail={
                "decisions": len(paced),
                "applied": len(lags),
                "sent_per_s": decided_rate,
                "statuses": dict(sent["statuses"]),
                "apply_lanes": lanes,
            },
        ),
    ]


def _lanes() -> int:
    from django.conf import settings

    return getattr(settings, "APPLY_LANES", 0)  # 0: a worker before apply lanes (a bench of an older tree)


async def _open_loop(servers: Servers, logins: list[Login], items: list[str], *, rate: float) -> dict[str, Any]:
    """Decide ``items`` at ``rate``/s, each sent at its time (not after the previous answer), over 8 reviewers' clients."""
    clients = [_client(servers.host(i), logins[i % len(logins)]) for i in range(8)]
    statuses: dict[int, int] = {}

    async def one(n: int, item: str) -> None:
        status = await _decide(clients[n % len(clients)], item, "approve")
        statuses[status] = statuses.get(status, 0) + 1

    try:
        begin, pending = time.perf_counter(), []
        for n, item in enumerate(items):
            await asyncio.sleep(max(0.0, begin + n / rate - time.perf_counter()))
            pending.append(asyncio.create_task(one(n, item)))
        await asyncio.gather(*pending)
        return {"statuses": statuses, "seconds": time.perf_counter() - begin}
    finally:
        for c in clients:
            await c.aclose()


# --- 24. attribution ---------------------------------------------------------------------------

# (label, where, attribute): each is timed where the apply looks it up, so the measure times what the worker runs.
_PHASES = (
    ("resume lock taken and released", "moderation.review.apply", "thread_resume_lock"),
    ("graph state read (before and after)", "moderation.review.apply", "graph_state_read"),
    ("graph resumed (durability=sync checkpoints)", "moderation.review.apply", "graph_resume"),
    ("applied recorded (one transaction)", "moderation.review.apply", "_record"),
    ("live push handed off", "moderation.records.events", "item_applied_broadcast"),
)


def bench_worker_time(*, items: list[str], reviewer, count: int) -> list[Metric]:
    """Measure 24: ``count`` decisions queued in-process, then applied here by one apply lane, its phases timed."""
    import importlib

    from django.db import connection
    from django.test import override_settings
    from django.test.utils import CaptureQueriesContext
    from django_tasks_db.models import DBTaskResult

    from bench.inprocess import _decide_as_a_request, _pop
    from moderation.core.checkpointer import checkpointer_get
    from moderation.core.taskqueue import QueueLane, TaskWake
    from moderation.records import events
    from moderation.review.apply import APPLY_QUEUE

    # Applies earlier benches queued run in the timed batch too: they are applies like these.
    with override_settings(REVIEWQUEUE_APPLY_INLINE=False):
        for _ in range(count + 1):
            _decide_as_a_request(item=_pop(items), reviewer_pk=reviewer.pk)
    lane = QueueLane(
        wake=TaskWake(),
        queue_names=[APPLY_QUEUE],
        excluded_queue_names=[],
        batch=True,
        interval=0,
        backend_name="default",
        startup_delay=False,
        max_tasks=1,
        worker_id="bench-attribution",
    )
    lane.run()  # the first apply compiles the graph: not timed
    lane.max_tasks = None
    totals: dict[str, float] = {}
    saver = checkpointer_get()
    with ExitStack() as stack:
        loop = events.push_loop_start() if not _relayed() else None
        for label, module, name in _PHASES:
            target = importlib.import_module(module)
            stack.enter_context(mock.patch.object(target, name, _timed(getattr(target, name), label, totals)))
        stack.enter_context(mock.patch.object(lane, "_claim", _timed(lane._claim, "task claimed (poll, claim, commit)", totals)))
        stack.enter_context(
            mock.patch.object(DBTaskResult, "set_successful", _timed(DBTaskResult.set_successful, "task row marked done", totals))
        )
        calls = {"n": 0}
        for method in ("get_tuple", "put", "put_writes"):
            stack.enter_context(mock.patch.object(saver, method, _counted(getattr(saver, method), calls)))
        queries = stack.enter_context(CaptureQueriesContext(connection))
        cpu, wall = time.process_time(), time.perf_counter()
        lane.run()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        applies = lane._run_tasks - 1
    if loop is not None:
        events.server_loop_register(None)
        loop.call_soon_threadsafe(loop.stop)
    per = {label: ms * 1000 / applies for label, ms in totals.items()}
    wall_ms, cpu_ms = wall * 1000 / applies, cpu * 1000 / applies
    inner = sum(v for k, v in per.items() if k not in ("task claimed (poll, claim, commit)", "task row marked done"))
    per["the apply's own reads (item, asks, end of round) and the rest"] = wall_ms - sum(per.values())
    statements = sum(1 for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT")))
    log(
        f"worker time: {applies} applies, {wall_ms:.1f} ms each ({cpu_ms:.1f} ms CPU), {statements / applies:.1f} SQL "
        f"statements and {calls['n'] / applies:.1f} checkpointer calls each; " + ", ".join(f"{k} {v:.1f}" for k, v in per.items())
    )
    detail = {"applies": applies, "phases_ms": per, "apply_inner_ms": inner}
    return [
        Metric(
            "worker_apply_ms",
            "24. (attribution) one apply by one lane, in-process: wall ms",
            wall_ms,
            "ms",
            cpu_ms,
            "the worker process's CPU ms for it",
            detail=detail,
        ),
        *(
            Metric(f"worker_phase_{n}", f"24. (attribution)   {label}", ms, "ms", wall_ms, "the whole apply")
            for n, (label, ms) in enumerate(per.items())
        ),
        Metric(
            "worker_apply_statements",
            "24. (attribution) SQL statements per apply, Django's (task row included)",
            statements / applies,
            "stmts",
            detail={"checkpointer_calls_per_apply": calls["n"] / applies},
        ),
        Metric(
            "worker_apply_checkpointer",
            "24. (attribution) checkpointer calls per apply (read, put, writes)",
            calls["n"] / applies,
            "calls",
        ),
    ]


def _relayed() -> bool:
    from django.conf import settings

    return bool(settings.LIVE_RELAY) or not settings.REDIS_URL


def _timed(fn: Callable, label: str, totals: dict[str, float]) -> Callable:
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            result = fn(*args, **kwargs)
        finally:
            totals[label] = totals.get(label, 0.0) + time.perf_counter() - start
        if hasattr(result, "__enter__"):  # a lock: its release is timed with its taking
            return _timed_context(result, label, totals)
        return result

    return timed


@contextmanager
def _timed_context(cm: Any, label: str, totals: dict[str, float]) -> Iterator[None]:
    start = time.perf_counter()
    cm.__enter__()
    totals[label] = totals.get(label, 0.0) + time.perf_counter() - start
    try:
        yield
    finally:
        start = time.perf_counter()
        cm.__exit__(None, None, None)
        totals[label] = totals.get(label, 0.0) + time.perf_counter() - start


def _counted(fn: Callable, calls: dict[str, int]) -> Callable:
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        return fn(*args, **kwargs)

    return counted
