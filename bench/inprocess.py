"""Benches that run inside one Django process: ingest, guard overhead, isolation, queue page."""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Callable

from django.db import connection, connections

from bench.common import Metric, log, median, percentile

WATCH_TEXT = "Is this fine? Click here for free money!!! www.example.com"


def _title(n: int) -> str:
    return f"bench item {n}"


# --- 5. ingest ---------------------------------------------------------------------------


def bench_ingest(*, seconds: float, cap: int, bulk_size: int) -> tuple[list[Metric], list[str]]:
    """Items created and paused at their interrupt: one by one, in bulk, vs the bare graph start.

    Returns the metrics and the public ids of every item created (reused by later benches).
    """
    from moderation import items as items_module
    from moderation.graphs.runtime import graph_start

    created: list[str] = []

    # Baseline: LangGraph's own run to the interrupt, no row, no transaction, no event.
    n, start = 0, time.perf_counter()
    while n < cap and time.perf_counter() - start < seconds:
        thread = f"bench-bare-{uuid.uuid4()}"
        graph_start(name="moderation", thread_id=thread,
                    state={"item_id": thread, "title": _title(n), "body": WATCH_TEXT, "source": "bench"})
        n += 1
    bare_rate = n / (time.perf_counter() - start)
    log(f"ingest: bare graph start {bare_rate:.0f}/s ({n})")

    n, start = 0, time.perf_counter()
    while n < cap and time.perf_counter() - start < seconds:
        created.append(str(items_module.item_create(title=_title(n), body=WATCH_TEXT, source="bench").public_id))
        n += 1
    one_rate = n / (time.perf_counter() - start)
    log(f"ingest: item_create one by one {one_rate:.0f}/s ({n})")

    metrics = [
        Metric("ingest_one", "5. ingest, one by one (item_create)", one_rate, "items/s", bare_rate,
               "bare graph start to interrupt", target=200, check="value", op=">=", detail={"items": n}),
    ]
    bulk = getattr(items_module, "items_create_bulk", None)
    if bulk is not None:
        n, start = 0, time.perf_counter()
        while n < cap and time.perf_counter() - start < seconds:
            batch = bulk([{"title": _title(n + i), "body": WATCH_TEXT, "source": "bench"} for i in range(bulk_size)])
            created.extend(str(i.public_id) for i in batch)
            n += len(batch)
        bulk_rate = n / (time.perf_counter() - start)
        log(f"ingest: items_create_bulk {bulk_rate:.0f}/s ({n})")
        metrics.append(
            Metric("ingest_bulk", f"5. ingest, bulk (items_create_bulk, {bulk_size}/call)", bulk_rate, "items/s",
                   bare_rate, "bare graph start to interrupt", target=200, check="value", op=">=",
                   detail={"items": n, "batch": bulk_size})
        )
    return metrics, created


def items_make(count: int) -> list[str]:
    """Pending items for later benches, by the fastest path the product offers."""
    from moderation import items as items_module

    bulk = getattr(items_module, "items_create_bulk", None)
    out: list[str] = []
    while len(out) < count:
        if bulk is not None:
            batch = bulk([{"title": _title(len(out) + i), "body": WATCH_TEXT, "source": "bench"} for i in range(50)])
            out.extend(str(i.public_id) for i in batch)
        else:
            out.append(str(items_module.item_create(title=_title(len(out)), body=WATCH_TEXT, source="bench").public_id))
    return out


def _pop(items: list[str]) -> str:
    """The next pending item; more are made (outside any timed window's count) if the pool ran dry."""
    if not items:
        log("WARNING: item pool ran dry; making more")
        items.extend(items_make(50))
    return items.pop()


# --- 2. guard overhead ------------------------------------------------------------------------


def bench_guard_overhead(*, items: list[str], reviewer, pairs: int) -> tuple[Metric, Metric]:
    """The product's item_decide vs the naive check-then-act (no wait), alternating, one thread."""
    from moderation.lab.strategies import guarded_decide, naive_decide

    guarded_ms: list[float] = []
    naive_ms: list[float] = []
    for i in range(pairs):
        for fn, sink in ((guarded_decide, guarded_ms), (naive_decide, naive_ms)) if i % 2 == 0 else (
            (naive_decide, naive_ms), (guarded_decide, guarded_ms)):
            item = _pop(items)
            start = time.perf_counter()
            outcome = fn(item_public_id=item, reviewer=reviewer, decision="approve", delay=0.0)
            sink.append((time.perf_counter() - start) * 1000)
            assert outcome.won, outcome
    g, n = median(guarded_ms), median(naive_ms)
    log(f"guard overhead: guarded {g:.2f} ms, naive {n:.2f} ms (medians of {pairs})")
    # Attribution, not a target: the same guard with the after-commit live push switched off.
    from moderation import events

    quiet_ms: list[float] = []
    broadcast = events.decision_broadcast
    events.decision_broadcast = lambda **kwargs: None
    try:
        for _ in range(max(10, pairs // 2)):
            start = time.perf_counter()
            guarded_decide(item_public_id=_pop(items), reviewer=reviewer, decision="approve", delay=0.0)
            quiet_ms.append((time.perf_counter() - start) * 1000)
    finally:
        events.decision_broadcast = broadcast
    log(f"guard overhead: guarded without the live push {median(quiet_ms):.2f} ms")
    quiet = Metric("guard_no_push", "2. (attribution) item_decide without its after-commit live push", median(quiet_ms), "ms", n,
                   "naive check-then-act")
    return quiet, Metric(
        "guard_overhead", "2. guard overhead: item_decide vs naive (median ms/decision)", g, "ms", n,
        "naive check-then-act", target=1.3, check="ratio", op="<=",
        detail={"pairs": pairs, "guarded_mean_ms": statistics.fmean(guarded_ms), "naive_mean_ms": statistics.fmean(naive_ms),
                "guarded_p95_ms": percentile(guarded_ms, 95), "naive_p95_ms": percentile(naive_ms, 95)},
    )


# --- 3. isolation ------------------------------------------------------------------------


def _decide_loop(decide: Callable, *, items: list[str], items_lock: threading.Lock, reviewer, stop: threading.Event,
                 window: list[float], done: list[float], errors: list[str]) -> None:
    try:
        while not stop.is_set():
            with items_lock:
                if not items:
                    log("WARNING: isolation ran out of items; its rate is understated")
                    return
                item = items.pop()
            try:
                decide(item_public_id=item, reviewer=reviewer, decision="reject", delay=0.0)
            except Exception as exc:  # counted, never hidden
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            finished = time.perf_counter()
            if window and window[0] <= finished <= window[1]:
                done.append(finished)
    finally:
        connection.close()


def _isolation_run(decide: Callable, *, stall: bool, items: list[str], reviewers: list, seconds: float) -> tuple[float, int]:
    """Decisions per second on other items by len(reviewers)-1 threads, with reviewers[0] stalled or not."""
    from moderation.faults import fault_inject

    stalled_item = _pop(items)
    entered, release = threading.Event(), threading.Event()

    def hold(key: str) -> None:
        if key == stalled_item:
            entered.set()
            release.wait(timeout=60)

    stalled_errors: list[str] = []

    def staller() -> None:
        try:
            decide(item_public_id=stalled_item, reviewer=reviewers[0], decision="approve", delay=0.0)
        except Exception as exc:
            stalled_errors.append(repr(exc))
        finally:
            connection.close()

    with fault_inject("after_item_lock", hold):
        stall_thread = None
        if stall:
            stall_thread = threading.Thread(target=staller)
            stall_thread.start()
            if not entered.wait(timeout=30):
                raise RuntimeError("the stalled reviewer never reached the guard")
        stop = threading.Event()
        items_lock = threading.Lock()
        done: list[float] = []
        errors: list[str] = []
        window: list[float] = []
        workers = [
            threading.Thread(target=_decide_loop, kwargs=dict(
                decide=decide, items=items, items_lock=items_lock, reviewer=r, stop=stop, window=window, done=done, errors=errors))
            for r in reviewers[1:]
        ]
        for w in workers:
            w.start()
        time.sleep(0.2)  # warm-up: threads open their connections
        window.extend([time.perf_counter(), time.perf_counter() + seconds])
        time.sleep(seconds)
        stop.set()
        release.set()
        for w in workers:
            w.join(timeout=60)
        if stall_thread is not None:
            stall_thread.join(timeout=60)
    if errors:
        log(f"isolation: {len(errors)} errors, first: {errors[0]}")
    return len(done) / seconds, len(errors)


def bench_isolation(*, items: list[str], reviewers: list, seconds: float) -> list[Metric]:
    from moderation.lab.strategies import global_lock_decide, guarded_decide

    metrics = []
    for label, decide, target in (("guard (item_decide)", guarded_decide, 0.95), ("global lock (contrast)", global_lock_decide, None)):
        # A B A B, so a burst of load from elsewhere on this shared machine hits both sides alike.
        runs = {False: [], True: []}
        errors = 0
        for stall in (False, True, False, True):
            rate, errs = _isolation_run(decide, stall=stall, items=items, reviewers=reviewers, seconds=seconds / 2)
            runs[stall].append(rate)
            errors += errs
        free, stalled = statistics.fmean(runs[False]), statistics.fmean(runs[True])
        log(f"isolation {label}: {stalled:.1f} dec/s with a stalled reviewer vs {free:.1f} without")
        metrics.append(
            Metric(f"isolation_{'guard' if target else 'global_lock'}",
                   f"3. isolation, {label}: dec/s on other items, one reviewer stalled",
                   stalled, "dec/s", free, "same, nobody stalled", target=target, check="ratio", op=">=",
                   detail={"threads": len(reviewers) - 1, "seconds": seconds, "errors": errors, "runs": runs})
        )
    return metrics


# --- 6. queue page ---------------------------------------------------------------------------


def _queue_time(client, page: int | str, reps: int) -> tuple[list[float], list[int]]:
    from django.test.utils import CaptureQueriesContext

    from django.db import reset_queries

    times, queries = [], []
    for _ in range(reps):
        # The DEBUG query log is a deque of 9,000: once full, CaptureQueriesContext sees nothing.
        reset_queries()
        with CaptureQueriesContext(connections["default"]) as captured:
            start = time.perf_counter()
            response = client.get(f"/?page={page}")
            times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, response.status_code
        queries.append(len(captured.captured_queries))
    return times, queries


def _queue_rows_insert(rows: int) -> None:
    """``rows`` pending items with fake graph threads, generated by the database itself.

    The queue page never opens a graph (it shows the stored ``review_request``), so the
    rows need no checkpoints; one INSERT ... SELECT takes seconds where 100,000 ORM
    objects take half a minute on this machine.
    """
    import json

    from django.utils import timezone

    from moderation.counts import counts_recount

    flags = ["1 link", "excessive punctuation", "watch words: click here, free money"]
    payload = json.dumps({
        "kind": "batched",
        "action_requests": [{"name": "publish", "description": "Publish this post?", "args": {
            "title": "bulk item", "excerpt": WATCH_TEXT, "source": "bench-bulk", "flags": flags, "risk": 45}}],
        "review_configs": [{"action_name": "publish", "allowed_decisions": ["approve", "reject"]}],
    })
    columns = ("public_id, title, body, source, created_at, status, decided_by_id, decided_at, decision_note, thread_id, "
               "review_request, attention, attempt_count, audit_head, is_lab, metadata, priority, submission_digest, "
               "graph, graph_input, risk, flags, apply_state, applied_result")
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"INSERT INTO moderation_queueitem ({columns}) SELECT gen_random_uuid(), 'bulk item ' || x, %s, 'bench-bulk', "
                "%s + x * interval '1 millisecond', 'pending', NULL, NULL, '', 'bench-fake-' || x, %s::jsonb, '', 0, '', "
                "false, '{}'::jsonb, 0, '', 'moderation', '{}'::jsonb, 45, %s::jsonb, '', '{}'::jsonb "
                "FROM generate_series(0, %s - 1) AS x",
                [WATCH_TEXT, timezone.now(), payload, json.dumps(flags), rows],
            )
        else:
            cursor.execute(
                f"WITH RECURSIVE n(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM n WHERE x < %s - 1) "
                f"INSERT INTO moderation_queueitem ({columns}) SELECT lower(hex(randomblob(16))), 'bulk item ' || x, %s, "
                "'bench-bulk', %s, 'pending', NULL, NULL, '', 'bench-fake-' || x, %s, '', 0, '', 0, '{}', 0, '', "
                "'moderation', '{}', 45, %s, '', '{}' FROM n",
                [rows, WATCH_TEXT, connection.ops.adapt_datetimefield_value(timezone.now()), payload, json.dumps(flags)],
            )
            cursor.execute("ANALYZE")
    # Raw rows bypass the counters (moderation.counts): bring them to the real COUNT, as recover --counts does.
    counts_recount()
    if connection.vendor == "postgresql":
        # What autovacuum does to a table that stopped changing: statistics and the visibility
        # map (without it, index-only counts still visit the heap); outside a transaction.
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE moderation_queueitem")


def bench_queue_page(*, user, rows: int, reps: int) -> list[Metric]:
    """Queue page latency and query count with ``rows`` pending items vs the small queue before them."""
    from django.conf import settings
    from django.test import Client

    from moderation.selectors import queue_pending

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    _queue_time(client, 1, 2)
    small_pending = queue_pending(page=1, per_page=settings.QUEUE_PAGE_SIZE).paginator.count
    base_times, base_queries = _queue_time(client, 1, reps)
    log(f"queue page: baseline {small_pending} pending, p95 {percentile(base_times, 95):.1f} ms")

    log(f"queue page: inserting {rows} rows")
    start = time.perf_counter()
    _queue_rows_insert(rows)
    log(f"queue page: inserted in {time.perf_counter() - start:.1f} s")

    pending = queue_pending(page=1, per_page=settings.QUEUE_PAGE_SIZE).paginator
    last = pending.num_pages
    pages = {"first": 1, "middle": last // 2, "last": last}
    all_times: list[float] = []
    per_page: dict[str, dict] = {}
    query_counts: set[int] = set()
    for label, page in pages.items():
        _queue_time(client, page, 2)
        times, queries = _queue_time(client, page, reps)
        all_times.extend(times)
        query_counts.update(queries)
        per_page[label] = {"page": page, "p50_ms": median(times), "p95_ms": percentile(times, 95), "queries": sorted(set(queries))}
        log(f"queue page {label} (page {page}): p50 {median(times):.1f} ms, p95 {percentile(times, 95):.1f} ms, queries {sorted(set(queries))}")
    worst = max(per_page.values(), key=lambda p: p["p95_ms"])
    return [
        Metric("queue_p95", f"6. queue page, {pending.count:,} pending: p95 (worst of first/middle/last page)", worst["p95_ms"], "ms",
               percentile(base_times, 95), f"same page, {small_pending} pending", target=50, check="value", op="<=",
               detail={"pages": per_page, "p50_all_ms": median(all_times), "p95_all_ms": percentile(all_times, 95), "reps": reps}),
        Metric("queue_p50", "6. queue page, 100k pending: p50 (all pages)", median(all_times), "ms", median(base_times),
               f"same page, {small_pending} pending"),
        # Constant: the most queries any page needed, over the fewest any page (small queue included) needed.
        Metric("queue_queries", "6. queue page, 100k pending: queries per page (most / fewest)", max(query_counts), "queries",
               min(query_counts | set(base_queries)), "fewest on any page, either queue size", target=1.0, check="ratio", op="<=",
               detail={"counts_seen": sorted(query_counts), "baseline_counts_seen": sorted(set(base_queries)),
                       "constant": len(query_counts) == 1 and query_counts == set(base_queries)}),
    ]
