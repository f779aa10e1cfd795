"""Benches that run inside one Django process: ingest, guard overhead, isolation, writer contention, queue page."""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Callable

from django.db import DatabaseError, connection, connections, transaction

from bench.common import Metric, log, median, percentile

WATCH_TEXT = "Is this fine? Click here for free money!!! www.example.com"


def _title(n: int) -> str:
    return f"bench item {n}"


# --- 5. ingest ---------------------------------------------------------------------------


def bench_ingest(*, seconds: float, cap: int) -> tuple[list[Metric], list[str]]:
    """Items created and paused at their interrupt, one by one, vs the bare graph start.

    Returns the metrics and the public ids of every item created (reused by later benches).
    """
    from moderation.graphs.runtime import graph_start
    from moderation.review.items import item_create

    created: list[str] = []

    # Baseline: LangGraph's own run to the interrupt, no row, no transaction, no event.
    n, start = 0, time.perf_counter()
    while n < cap and time.perf_counter() - start < seconds:
        thread = f"bench-bare-{uuid.uuid4()}"
        graph_start(
            name="moderation",
            thread_id=thread,
            state={"item_id": thread, "title": _title(n), "body": WATCH_TEXT, "source": "bench"},
        )
        n += 1
    bare_rate = n / (time.perf_counter() - start)
    log(f"ingest: bare graph start {bare_rate:.0f}/s ({n})")

    n, start = 0, time.perf_counter()
    while n < cap and time.perf_counter() - start < seconds:
        created.append(str(item_create(title=_title(n), body=WATCH_TEXT, source="bench").public_id))
        n += 1
    one_rate = n / (time.perf_counter() - start)
    log(f"ingest: item_create one by one {one_rate:.0f}/s ({n})")

    metrics = [
        Metric(
            "ingest_one",
            "5. ingest, one by one (item_create)",
            one_rate,
            "items/s",
            bare_rate,
            "bare graph start to interrupt",
            target=200,
            check="value",
            op=">=",
            detail={"items": n},
        ),
    ]
    return metrics, created


def items_make(count: int) -> list[str]:
    """Pending items for later benches, each with its graph started, as ``item_create`` makes them."""
    from moderation.review.items import item_create

    return [str(item_create(title=_title(n), body=WATCH_TEXT, source="bench").public_id) for n in range(count)]


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
        for fn, sink in (
            ((guarded_decide, guarded_ms), (naive_decide, naive_ms))
            if i % 2 == 0
            else ((naive_decide, naive_ms), (guarded_decide, guarded_ms))
        ):
            item = _pop(items)
            start = time.perf_counter()
            outcome = fn(item_public_id=item, reviewer=reviewer, decision="approve", delay=0.0)
            sink.append((time.perf_counter() - start) * 1000)
            assert outcome.won, outcome
    g, n = median(guarded_ms), median(naive_ms)
    log(f"guard overhead: guarded {g:.2f} ms, naive {n:.2f} ms (medians of {pairs})")
    # Attribution, not a target: the same guard with the after-commit live push switched off.
    from moderation.records import events

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
    quiet = Metric(
        "guard_no_push",
        "2. (attribution) item_decide without its after-commit live push",
        median(quiet_ms),
        "ms",
        n,
        "naive check-then-act",
    )
    return quiet, Metric(
        "guard_overhead",
        "2. guard overhead: item_decide vs naive (median ms/decision)",
        g,
        "ms",
        n,
        "naive check-then-act",
        target=1.3,
        check="ratio",
        op="<=",
        detail={
            "pairs": pairs,
            "guarded_mean_ms": statistics.fmean(guarded_ms),
            "naive_mean_ms": statistics.fmean(naive_ms),
            "guarded_p95_ms": percentile(guarded_ms, 95),
            "naive_p95_ms": percentile(naive_ms, 95),
        },
    )


def _decide_as_a_request(*, item: str, reviewer_pk: int) -> None:
    """A decision as the HTTP request makes it: the user read afresh (so are its permissions), the apply queued, not run."""
    from django.contrib.auth import get_user_model

    from moderation.review.decisions import item_decide

    reviewer = get_user_model().objects.get(pk=reviewer_pk)
    assert item_decide(item_public_id=item, reviewer=reviewer, decision="approve").won


# SQL statements one decision runs (apply queued, as a server's), savepoints aside: a number to
# watch, which must not grow without a reason written down (docs/contributors/worker-throughput.md).
# moderation/tests/review/test_decision_statements.py fails when it grows past these.
DECISION_STATEMENTS = {"sqlite": 20, "postgresql": 22}


def decision_statements(*, item: str, reviewer_pk: int) -> list[tuple[str, object]]:
    """The statements of one decision as a request makes it (its apply queued), captured in a
    transaction rolled back after: the item stays pending."""
    from django.test import override_settings

    captured: list[tuple[str, object]] = []

    def capture(execute, sql, params, many, context):
        captured.append((sql, params))
        return execute(sql, params, many, context)

    with override_settings(REVIEWQUEUE_APPLY_INLINE=False), transaction.atomic(), connection.execute_wrapper(capture):
        _decide_as_a_request(item=item, reviewer_pk=reviewer_pk)
        transaction.set_rollback(True)
    return [(sql, params) for sql, params in captured if not sql.startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]


def bench_decision_sql(*, items: list[str], reviewer, reps: int) -> list[Metric]:
    """Attribution for measure 1: the database's share of a decision's own work.

    A decision as a request makes it (the user and its permissions read, the apply left
    to the worker, the live push after the commit), timed; then the statements one such
    decision ran, captured in a transaction rolled back after (the item stays pending),
    replayed as written through Django's cursor: no ORM building them, no model
    instances, none of the guard's checks. The after-commit reads of the live push are
    not in the replay (they run after the capture's rollback would have committed).
    """
    from django.test import override_settings

    with override_settings(REVIEWQUEUE_APPLY_INLINE=False):
        decided: list[float] = []
        for _ in range(reps):
            start = time.perf_counter()
            _decide_as_a_request(item=_pop(items), reviewer_pk=reviewer.pk)
            decided.append((time.perf_counter() - start) * 1000)
        statements = decision_statements(item=_pop(items), reviewer_pk=reviewer.pk)
    replays: list[float] = []
    for _ in range(reps):
        start = time.perf_counter()
        with transaction.atomic():
            with connection.cursor() as cursor:
                for sql, params in statements:
                    cursor.execute(sql, params)
            transaction.set_rollback(True)
        replays.append((time.perf_counter() - start) * 1000)
    decide, replay = median(decided), median(replays)
    log(f"decision sql: a decision {decide:.2f} ms; its {len(statements)} statements replayed raw {replay:.2f} ms")
    documented = DECISION_STATEMENTS.get(connection.vendor)
    return [
        Metric(
            "decision_sql_replay",
            f"1. (attribution) one decision's {len(statements)} SQL statements replayed, no ORM, in-process",
            replay,
            "ms",
            decide,
            "the same decision, in-process (apply queued)",
            detail={
                "statements": len(statements),
                "reps": reps,
                "replay_p95_ms": percentile(replays, 95),
                "decision_p95_ms": percentile(decided, 95),
            },
        ),
        Metric(
            "decision_statements",
            "1. SQL statements per decision (watched: grows only with a reason written down)",
            len(statements),
            "stmts",
            documented,
            "the documented number",
            target=documented,
            check="value",
            op="<=",
            detail={"statements": [sql for sql, _ in statements]},
        ),
    ]


# --- 3. isolation ------------------------------------------------------------------------


def _decide_loop(
    decide: Callable,
    *,
    items: list[str],
    items_lock: threading.Lock,
    reviewer,
    stop: threading.Event,
    window: list[float],
    done: list[float],
    errors: list[str],
) -> None:
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
    from moderation.core.faults import fault_inject

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
            threading.Thread(
                target=_decide_loop,
                kwargs=dict(
                    decide=decide,
                    items=items,
                    items_lock=items_lock,
                    reviewer=r,
                    stop=stop,
                    window=window,
                    done=done,
                    errors=errors,
                ),
            )
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
    for label, decide, target in (
        ("guard (item_decide)", guarded_decide, 0.95),
        ("global lock (contrast)", global_lock_decide, None),
    ):
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
            Metric(
                f"isolation_{'guard' if target else 'global_lock'}",
                f"3. isolation, {label}: dec/s on other items, one reviewer stalled",
                stalled,
                "dec/s",
                free,
                "same, nobody stalled",
                target=target,
                check="ratio",
                op=">=",
                detail={"threads": len(reviewers) - 1, "seconds": seconds, "errors": errors, "runs": runs},
            )
        )
    return metrics


# --- 18. writer contention: eight reviewer processes on each item -------------------------------


def bench_writer_contention(*, items: list[str], usernames: list[str], count: int) -> Metric:
    """The longest any of 8 reviewer processes waits for its decision, all 8 released together
    onto each of ``count`` items (the race lab's process harness, the graph applied inline).

    On SQLite every decision takes the database's one write lock, and its busy handler can
    starve a writer for seconds; the IMMEDIATE mode and short transactions keep the worst
    wait low. ``moderation/tests/test_concurrency.py`` checks the same race's outcome.
    """
    from moderation.lab.harness import race_processes

    raced = [_pop(items) for _ in range(count)]
    report = race_processes(
        strategy="guarded", items=raced, usernames=usernames, delay=0.0, extra_env={"REVIEWQUEUE_APPLY_INLINE": "1"}
    )
    worst, p50 = report.latency_ms(percentile=100), report.latency_ms(percentile=50)
    log(
        f"writer contention: worst {worst:.0f} ms, p50 {p50:.0f} ms over {len(report.attempts)} attempts, "
        f"{len(report.errors)} errors, {len(report.anomalies)} anomalies"
    )
    return Metric(
        "writer_contention_worst",
        f"20. worst decision wait, {len(usernames)} reviewer processes on each of {count} items",
        worst,
        "ms",
        p50,
        "p50 of the same race",
        target=1000,
        check="value",
        op="<=",
        detail={
            "p99_ms": report.latency_ms(percentile=99),
            "attempts": len(report.attempts),
            "errors": report.errors[:5],
            "anomalies": [str(a) for a in report.anomalies][:5],
        },
    )


# --- 6. queue page, and the cost of a decision's events, by queue size ------------------------------


def _queue_time(client, query: str, reps: int) -> tuple[list[float], list[int]]:
    from django.db import reset_queries
    from django.test.utils import CaptureQueriesContext

    times, queries = [], []
    for _ in range(reps):
        # The DEBUG query log is a deque of 9,000: once full, CaptureQueriesContext sees nothing.
        reset_queries()
        with CaptureQueriesContext(connections["default"]) as captured:
            start = time.perf_counter()
            response = client.get(f"/?{query}")
            times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, response.status_code
        queries.append(len(captured.captured_queries))
    return times, queries


def _queue_rows_insert(rows: int) -> None:
    """``rows`` pending items, generated by the database itself: a shortcut, not the product's ingest.

    Each row names a graph thread that does not exist (``bench-fake-<n>``): no checkpoint,
    no ask row. That is safe only because the bench never opens, decides or applies these
    items: the queue page shows the stored ``review_request`` and never reads a graph, and
    the events bench decides only items made by ``item_create``. Creating a million real
    graph threads would take over an hour at the ingest rate (bench 5); one INSERT ...
    SELECT takes under a minute. Every column is filled as the model would, ``rank``
    included (``models.queue_rank`` of the row: one row per millisecond, risk 45,
    priority 0); a few rows are checked against the formula afterwards.
    """
    import json

    from django.utils import timezone

    from moderation.items.models import QueueItem, queue_rank
    from moderation.policies.teams import item_policy_resolve
    from moderation.records.counts import counts_recount

    risk = 45
    # The team and policy snapshot item_create would give these rows (none claims "bench-bulk": no team).
    team, policy = item_policy_resolve(slug=None, source="bench-bulk", graph="moderation", policy=None, requester=None)
    assert team is None, team
    # Whole milliseconds: SQLite's date arithmetic has millisecond resolution.
    now = timezone.now().replace(microsecond=0)
    first = QueueItem.objects.order_by("-id").values_list("id", flat=True).first() or 0
    base_rank = queue_rank(priority=0, risk=risk, created_at=now)
    flags = ["1 link", "excessive punctuation", "watch words: click here, free money"]
    payload = json.dumps(
        {
            "kind": "batched",
            "action_requests": [
                {
                    "name": "publish",
                    "description": "Publish this post?",
                    "args": {"title": "bulk item", "excerpt": WATCH_TEXT, "source": "bench-bulk", "flags": flags, "risk": risk},
                }
            ],
            "review_configs": [{"action_name": "publish", "allowed_decisions": ["approve", "reject"]}],
        }
    )
    columns = (
        "public_id, title, body, source, created_at, status, decided_by_id, decided_at, decision_note, thread_id, "
        "review_request, attention, attempt_count, audit_head, is_lab, metadata, priority, submission_digest, "
        "graph, graph_input, risk, flags, apply_state, applied_result, rank, policy"
    )
    # Thread ids continue after the highest row id, so a second batch never collides with the first.
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"INSERT INTO moderation_queueitem ({columns}) SELECT gen_random_uuid(), 'bulk item ' || x, %s, 'bench-bulk', "
                "%s + x * interval '1 millisecond', 'pending', NULL, NULL, '', 'bench-fake-' || (%s + x), %s::jsonb, '', 0, '', "
                "false, '{}'::jsonb, 0, '', 'moderation', '{}'::jsonb, %s, %s::jsonb, '', '{}'::jsonb, %s + x * 1000, %s::jsonb "
                "FROM generate_series(0, %s - 1) AS x",
                [WATCH_TEXT, now, first, payload, risk, json.dumps(flags), base_rank, json.dumps(policy.as_json()), rows],
            )
        else:
            stamp = connection.ops.adapt_datetimefield_value(now)
            cursor.execute(
                f"WITH RECURSIVE n(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM n WHERE x < %s - 1) "
                f"INSERT INTO moderation_queueitem ({columns}) SELECT lower(hex(randomblob(16))), 'bulk item ' || x, %s, "
                # Django's own text form (six fractional digits), so these rows sort among real ones.
                "'bench-bulk', strftime('%%Y-%%m-%%d %%H:%%M:%%f', %s, '+' || (x / 1000.0) || ' seconds') || '000', "
                "'pending', NULL, NULL, '', 'bench-fake-' || (%s + x), %s, '', 0, '', 0, '{}', 0, '', "
                "'moderation', '{}', %s, %s, '', '{}', %s + x * 1000, %s FROM n",
                [rows, WATCH_TEXT, stamp, first, payload, risk, json.dumps(flags), base_rank, json.dumps(policy.as_json())],
            )
            cursor.execute("ANALYZE")
    sample = QueueItem.objects.filter(source="bench-bulk", id__gt=first).order_by("id")
    for item in (sample.first(), sample.last()):
        expected = queue_rank(priority=item.priority, risk=item.risk, created_at=item.created_at)
        assert item.rank == expected, f"bulk row {item.id}: rank {item.rank}, the model's formula says {expected}"
    # Raw rows bypass the counters (moderation.records.counts): bring them to the real COUNT, as recover --counts does.
    counts_recount()
    if connection.vendor == "postgresql":
        # What autovacuum does to a table that stopped changing: statistics and the visibility
        # map (without it, index-only counts still visit the heap); outside a transaction.
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE moderation_queueitem")
    # The insert's dirty pages are written out now, not by a checkpoint in the middle of the timed pages.
    try:
        with connection.cursor() as cursor:
            cursor.execute("CHECKPOINT" if connection.vendor == "postgresql" else "PRAGMA wal_checkpoint(TRUNCATE)")
    except DatabaseError as exc:  # PostgreSQL's CHECKPOINT needs a superuser or pg_checkpoint
        log(f"queue: no checkpoint after the insert ({exc}); the timed pages may meet one")


def _queue_queries(*, per_page: int) -> dict[str, str]:
    """The query string of the first, middle and last page in the default (priority) order.

    The middle and last cursors are made from the row just before each page, read once
    with OFFSET outside the timed window: walking there by cursor would load 20,000 pages.
    The cursor is the one the page's own "next" link would carry (``_cursor_make``).
    """
    from urllib.parse import urlencode

    from moderation.items.models import ItemStatus, QueueItem
    from moderation.records.selectors import QUEUE_ORDER_DEFAULT, QUEUE_ORDERS, _cursor_make, queue_counts

    pending = queue_counts().pending
    ordered = QueueItem.objects.filter(status=ItemStatus.PENDING, is_lab=False).order_by(*QUEUE_ORDERS[QUEUE_ORDER_DEFAULT])
    queries = {"first": ""}
    for label, position in (("middle", pending // 2), ("last", pending - per_page)):
        before = ordered.only("id", "rank")[position - 1]
        queries[label] = urlencode({"cursor": _cursor_make(order=QUEUE_ORDER_DEFAULT, forward=True, item=before)})
    return queries


def _queue_pages_time(client, *, per_page: int, reps: int) -> dict[str, dict]:
    pages = {}
    for label, query in _queue_queries(per_page=per_page).items():
        _queue_time(client, query, 2)
        times, queries = _queue_time(client, query, reps)
        pages[label] = {
            "p50_ms": median(times),
            "p95_ms": percentile(times, 95),
            "queries": max(queries),
            "queries_seen": sorted(set(queries)),
            "times": times,
        }
        log(f"queue page {label}: p50 {median(times):.1f} ms, p95 {percentile(times, 95):.1f} ms, queries {sorted(set(queries))}")
    return pages


def _events_time(*, outcome, reps: int) -> dict[str, float]:
    """One decision's live events, as the winner's commit runs them: the counts they carry and the sends."""
    from moderation.records import events

    counts_ms, broadcast_ms = [], []
    for _ in range(reps):
        start = time.perf_counter()
        events._counts()
        counts_ms.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        events.decision_broadcast(outcome=outcome)
        broadcast_ms.append((time.perf_counter() - start) * 1000)
    result = {
        "counts_p50_ms": median(counts_ms),
        "broadcast_p50_ms": median(broadcast_ms),
        "broadcast_p95_ms": percentile(broadcast_ms, 95),
    }
    log(f"events: counts {result['counts_p50_ms']:.3f} ms, whole broadcast {result['broadcast_p50_ms']:.3f} ms (p50 of {reps})")
    return result


def _observe_time(*, reps: int) -> dict[str, float]:
    """A /metrics scrape's queue state (issue 32) and the team page's numbers (a month of the no-team rows)."""
    from django.utils import timezone

    from moderation.records.metrics import metrics_exposition
    from moderation.records.teamstats import team_stats_read

    scrape_ms, team_ms = [], []
    for _ in range(reps):
        start = time.perf_counter()
        metrics_exposition()
        scrape_ms.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        team_stats_read(team=None, days=30, today=timezone.localdate())
        team_ms.append((time.perf_counter() - start) * 1000)
    log(f"observe: scrape {median(scrape_ms):.2f} ms, team page numbers {median(team_ms):.2f} ms (p50 of {reps})")
    return {"scrape_p50_ms": median(scrape_ms), "team_p50_ms": median(team_ms)}


def _pending_fill(to: int) -> int:
    from moderation.records.selectors import queue_counts

    missing = to - queue_counts().pending
    if missing > 0:
        log(f"queue: inserting {missing:,} rows")
        start = time.perf_counter()
        _queue_rows_insert(missing)
        log(f"queue: inserted in {time.perf_counter() - start:.1f} s")
    return queue_counts().pending


def bench_queue_size(*, user, items: list[str], rows: int, small: int, reps: int) -> list[Metric]:
    """Queue pages and a decision's events at ``small`` pending, then at ``rows`` pending.

    The page is the workbench's default (priority order, keyset by cursor); the events are
    what one winner's commit pushes (``events.decision_broadcast``, the counts included),
    to the bench's own channel layer, for one real decision made here.
    """
    from django.conf import settings
    from django.test import Client

    from moderation.review.decisions import item_decide

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    outcome = item_decide(item_public_id=_pop(items), reviewer=user, decision="approve")
    assert outcome.won, outcome
    per_page = settings.QUEUE_PAGE_SIZE
    event_reps = max(100, reps * 10)

    small_pending = _pending_fill(small)
    small_pages = _queue_pages_time(client, per_page=per_page, reps=reps)
    small_events = _events_time(outcome=outcome, reps=event_reps)
    small_observe = _observe_time(reps=reps)
    large_pending = _pending_fill(rows)
    large_pages = _queue_pages_time(client, per_page=per_page, reps=reps)
    large_events = _events_time(outcome=outcome, reps=event_reps)
    large_observe = _observe_time(reps=reps)

    def worst(pages: dict[str, dict], key: str) -> float:
        return max(page[key] for page in pages.values())

    all_large = [t for page in large_pages.values() for t in page.pop("times")]
    all_small = [t for page in small_pages.values() for t in page.pop("times")]
    sizes = f"{large_pending:,} pending"
    return [
        Metric(
            "queue_p95",
            f"6. queue page, {sizes}: p95 (worst of first/middle/last page, by cursor)",
            worst(large_pages, "p95_ms"),
            "ms",
            worst(small_pages, "p95_ms"),
            f"same pages, {small_pending:,} pending",
            target=50,
            check="value",
            op="<=",
            detail={"pages": large_pages, "small_pages": small_pages, "reps": reps},
        ),
        Metric(
            "queue_p50",
            f"6. queue page, {sizes}: p50 (all three pages)",
            median(all_large),
            "ms",
            median(all_small),
            f"same pages, {small_pending:,} pending",
        ),
        # Constant: no page of the big queue needs more queries than the same page of the small one.
        Metric(
            "queue_queries",
            f"6. queue page, {sizes}: queries per page (most on any page)",
            worst(large_pages, "queries"),
            "queries",
            worst(small_pages, "queries"),
            f"same pages, {small_pending:,} pending",
            target=1.0,
            check="ratio",
            op="<=",
            detail={page: (small_pages[page]["queries_seen"], large_pages[page]["queries_seen"]) for page in large_pages},
        ),
        Metric(
            "events_cost",
            f"13. one decision's events (counts + pushes), {sizes} (p50 ms)",
            large_events["broadcast_p50_ms"],
            "ms",
            small_events["broadcast_p50_ms"],
            f"same, {small_pending:,} pending",
            target=1.2,
            check="ratio",
            op="<=",
            detail={"large": large_events, "small": small_events, "reps": event_reps},
        ),
        Metric(
            "events_counts",
            f"13. (attribution) the counts an event carries, {sizes} (p50 ms)",
            large_events["counts_p50_ms"],
            "ms",
            small_events["counts_p50_ms"],
            f"same, {small_pending:,} pending",
        ),
        # Issue 32: counter rows and index seeks, so the queue's size must not show.
        Metric(
            "metrics_scrape",
            f"32. /metrics scrape (queue state included), {sizes} (p50 ms)",
            large_observe["scrape_p50_ms"],
            "ms",
            small_observe["scrape_p50_ms"],
            f"same, {small_pending:,} pending",
            target=1.5,
            check="ratio",
            op="<=",
        ),
        Metric(
            "team_page",
            f"32. team page numbers (30 days, items of no team), {sizes} (p50 ms)",
            large_observe["team_p50_ms"],
            "ms",
            small_observe["team_p50_ms"],
            f"same, {small_pending:,} pending",
            target=1.5,
            check="ratio",
            op="<=",
        ),
    ]
