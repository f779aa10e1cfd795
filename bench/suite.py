"""One backend's bench, inside Django (``DJANGO_SETTINGS_MODULE=bench.settings``).

Started by ``bench.run`` with the database, the layer and the server count in the
environment; writes one JSON file. Order matters: the servers' benches run before the
queue-size benches (6, 13) fill the table to 10,000 and then 1,000,000 pending rows, the
HTTP benches 1, 4, 7, 15 and 18 run before the task worker starts (they measure the request
path alone), the browsers of 17 and 19 on servers of their own after those, and the counts are
checked (16) after every concurrent bench. ``--only N`` (repeatable) runs those measures
alone, with what they need (8's baseline is 5's).

The servers and the worker run as in production (the worker applies decisions). In
this process the benches 2 and 3 apply inline: the naive strategy they compare with
resumes the graph in the call, so the guard does too. Measure 1's attribution (one
decision in-process, and its SQL replayed) runs here too, before the servers start, and
leaves the apply queued, as a server does; so does measure 24's (one apply lane applying
decisions in this process, its phases timed). Measure 23 runs last of the worker benches:
the second worker it starts would change the one-worker measures (11, 12, 14, 8-10).
Measure 25 (an idle worker's CPU) runs first, on the empty task table. Measure 26 (the
moderators under outside bursts) runs just before 23, on the one worker, with items of its own, and
starts one more daphne process of its own for its process split (``BENCH_OUTSIDE_SERVERS``).
Measure 27 (a LangGraph deployment's thread resumed) runs after 23, on two workers of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", required=True)
    parser.add_argument("--json", required=True, type=Path)
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every timed window (0.3 for a smoke run)")
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument(
        "--queue-rows",
        type=int,
        default=None,
        help="pending items for the queue-size benches (default 1,000,000 times the scale, at most 1,000,000)",
    )
    parser.add_argument("--only", type=int, action="append", default=[], help="run this measure (repeatable); all by default")
    args = parser.parse_args(argv)
    only = set(args.only)

    def wanted(*measures: int) -> bool:
        return not only or bool(only.intersection(measures))

    import django

    django.setup()
    from django.conf import settings

    # The in-process measures stand in for a server's request: their events go to this
    # process's layer, not through the database as a worker's would (moderation.records.relay).
    settings.LIVE_RELAY = False
    from django.core.management import call_command
    from django.db import connections
    from django.test import override_settings

    from bench.agents import bench_agent_resumed, bench_ask_visible, bench_node_agent_resumed
    from bench.api import bench_api, bench_page_under_waits
    from bench.applies import backlog_drain, bench_agent_response, bench_applied_rate
    from bench.common import Metric, Servers, log, machine_info, moderators_login
    from bench.duplicates import bench_duplicate_reading
    from bench.inprocess import (
        bench_decision_sql,
        bench_guard_overhead,
        bench_ingest,
        bench_isolation,
        bench_queue_size,
        bench_writer_contention,
        items_make,
    )
    from bench.notices import bench_loser_other_tab
    from bench.served import bench_loser, bench_many_watchers, bench_served, bench_socket_memory
    from bench.workers import bench_two_workers, bench_worker_time
    from moderation.records.counts import counts_recount
    from reviewqueue.heap import heap_freeze

    # The in-process measures (2, 3, 5, 6, 13 and 1's attribution) run product code in this process: its heap is
    # frozen as the servers' and the worker's are, or their p95 would time the collector.
    heap_freeze()

    started = time.time()
    machine = machine_info()
    s = args.scale
    log(f"{args.backend}: migrating a fresh database")
    call_command("migrate", verbosity=0, interactive=False)
    users, logins = moderators_login(9)
    logins = logins[:8]
    # The socket benches open up to 1,000 sockets: a login may hold LIVE_SOCKETS_PER_SESSION (20).
    _, watch_logins = moderators_login(60, prefix="bench-watch")
    metrics = []

    if wanted(25):  # first: the task table is still empty, so the worker measured is idle
        from bench.idle import bench_idle_worker

        log(f"{args.backend}: 25. an idle task worker's CPU")
        connections.close_all()
        metrics += bench_idle_worker(env=dict(os.environ), vendor=connections["default"].vendor, seconds=max(10.0, 30 * s))

    pool: list[str] = []
    ingest = []
    if wanted(5, 8, 9, 10):  # 8's baseline is 5's bare graph start (9 and 10 run with 8)
        log(f"{args.backend}: 5. ingest")
        ingest, pool = bench_ingest(seconds=3 * s, cap=2000)
        metrics += [m for m in ingest if wanted(5)]

    if wanted(2, 3):
        need = int(1300 * s) + 200
        if len(pool) < need:
            log(f"{args.backend}: creating {need - len(pool)} more pending items for the decision benches")
            pool += items_make(need - len(pool))
        with override_settings(REVIEWQUEUE_APPLY_INLINE=True):
            if wanted(2):
                log(f"{args.backend}: 2. guard overhead")
                quiet, guard = bench_guard_overhead(items=pool, reviewer=users[8], pairs=max(20, int(80 * s)))
                metrics += [guard, quiet]
            if wanted(3):
                log(f"{args.backend}: 3. isolation")
                metrics += bench_isolation(items=pool, reviewers=users[5:9], seconds=max(1.0, 3 * s))

        # The contrast strategies (naive, global lock) are the race lab's: they write the row with
        # a bare UPDATE and no counter, as they may for the lab's uncounted items. Here they ran on
        # real items, so bring the counters back to the COUNT before the concurrent run is checked.
        repaired = counts_recount()
        log(f"{args.backend}: counters repaired after the contrast strategies' bare writes: {[str(d) for d in repaired]}")

    if wanted(20):
        contended = max(10, int(20 * s))
        if len(pool) < contended:
            pool += items_make(contended - len(pool))
        log(f"{args.backend}: 20. writer contention, 8 reviewer processes")
        metrics.append(bench_writer_contention(items=pool, usernames=[u.username for u in users[:8]], count=contended))

    # Sized so the full run stays under 10 minutes on 2 cores (PostgreSQL applies ~10/s there).
    agent_count, applied_count = max(30, int(60 * s)), max(100, int(150 * s))
    race_rounds = max(50, int(200 * s))
    many = 1000 if args.servers > 1 else 0
    # One decision a second: each decision's fan-out to 1,000 sockets is measured on its own,
    # not queued behind the previous one's (at 4/s this machine's two cores fall behind).
    many_rate, many_seconds = 1.0, max(4.0, 8 * s)
    note = f"{args.servers} daphne process{'es' if args.servers > 1 else ''}"
    two_count, sustained_seconds = max(150, int(300 * s)), max(4.0, 10 * s)
    noisy_seconds = max(6.0, 10 * s)
    if wanted(1, 4, 7, 15, 18, 11, 12, 14, 8, 9, 10, 21, 22, 23, 24, 26, 27):
        replays = max(50, int(200 * s)) if wanted(1) else 0
        attributed = max(50, int(150 * s)) if wanted(24) else 0
        more = int(700 * s) + 200 + int(many_rate * many_seconds) + 2 * replays + attributed + 2 - len(pool)
        if not wanted(1, 4, 7, 15, 18, 11, 12, 14, 8, 9, 10, 23, 24):
            more = 0  # the agents' benches (21, 22) submit their own asks, 26 makes its own items
        if more > 0:
            log(f"{args.backend}: creating {more} more pending items for the HTTP benches")
            pool += items_make(more)
        if attributed:
            log(f"{args.backend}: 24. (attribution) where an apply lane's time goes, in-process")
            metrics += bench_worker_time(items=pool, reviewer=users[8], count=attributed)
        if replays:
            log(f"{args.backend}: 1. (attribution) one decision's SQL, in-process")
            metrics += bench_decision_sql(items=pool, reviewer=users[8], reps=replays)
        connections.close_all()
        log(f"{args.backend}: starting {args.servers} daphne process(es)")
        servers = Servers(count=args.servers, env=dict(os.environ), logdir=args.workdir)
        try:
            if wanted(1, 4, 7):
                log(f"{args.backend}: 1, 4, 7. decisions, notices, memory")
                metrics += bench_served(
                    servers, logins, pool, seconds=max(1.5, 4 * s), notice_seconds=max(2.0, 4 * s), process_note=note
                )
            if wanted(15):
                log(f"{args.backend}: 15. memory per socket")
                metrics += bench_socket_memory(servers, watch_logins, sockets=max(200, int(1000 * s)))
            if many and wanted(4):
                log(f"{args.backend}: 4. notice latency, {many} watchers")
                metrics += bench_many_watchers(
                    servers, watch_logins, pool, watchers=many, rate=many_rate, seconds=many_seconds, process_note=note
                )
            if wanted(18):
                log(f"{args.backend}: 18. a moderator's page during 200 long-poll waits")
                _, ops = moderators_login(1, prefix="bench-ops", staff=True)
                metrics += bench_page_under_waits(servers, logins[0], ops[0], waits=200, reps=max(20, int(50 * s)))
            if wanted(21):
                log(f"{args.backend}: 21. an agent's ask, submitted → in a moderator's queue")
                metrics += bench_ask_visible(servers, logins[0], count=max(20, int(100 * s)))
            if wanted(11, 12, 14, 8, 9, 10, 22, 23, 26):
                log(f"{args.backend}: one task worker applying decisions")
                servers.live[0].worker_start(interval=0.05)
                backlog_drain(timeout=120)
                # And a few for warm-up and the one-at-a-time contrast.
                need = agent_count + applied_count + race_rounds + 20 + 2 * two_count + int(50 * sustained_seconds)
                if wanted(11, 12, 14, 8, 9, 10, 23) and len(pool) < need:
                    log(f"{args.backend}: creating {need - len(pool)} more pending items for the worker benches")
                    pool += items_make(need - len(pool))
            if wanted(11):
                log(f"{args.backend}: 11. agent items, a 500 ms tool")
                metrics += bench_agent_response(servers, logins, pool, count=agent_count, rate=4.0)
            if wanted(12):
                log(f"{args.backend}: 12. decisions applied by one worker")
                metrics += bench_applied_rate(servers, logins, pool, count=applied_count)
            if wanted(14):
                log(f"{args.backend}: 14. two reviewers race one item, worker mode")
                metrics += bench_loser(servers, logins, pool, rounds=race_rounds, process_note=note)
            if wanted(8, 9, 10):
                log(f"{args.backend}: 8, 9, 10. the service API, a webhook worker")
                metrics += bench_api(servers, logins, seconds=max(1.5, 4 * s), bare_rate=ingest[0].baseline)
            if wanted(22):
                log(f"{args.backend}: 22. decision → an agent resumed, by long-poll and by webhook")
                metrics += bench_agent_resumed(servers, logins[1], waves=max(1, round(3 * s)))
                log(f"{args.backend}: 22. decision → a Node agent (LangChain.js) resumed, by webhook")
                metrics += bench_node_agent_resumed(servers, logins[1], count=20 * max(1, round(3 * s)))
            if wanted(26):
                from bench.noisy import bench_noisy_neighbours, decisions_needed, servers_renice

                log(f"{args.backend}: 26. noisy neighbours: moderators' pages and decisions, quiet and under each burst")
                _, noisy_ops = moderators_login(1, prefix="bench-noisy-ops", staff=True)
                noisy_items = items_make(decisions_needed(seconds=noisy_seconds))  # its own: 23 counts on the pool
                # The process split's outside process(es): only /api/v1/ (SERVE_ROUTES), same database, layer, worker.
                log(f"{args.backend}: 26. starting the outside's daphne process (SERVE_ROUTES=outside)")
                outside = Servers(
                    count=int(os.environ.get("BENCH_OUTSIDE_SERVERS", "1")),
                    env={**os.environ, "SERVE_ROUTES": "outside"},
                    logdir=args.workdir,
                    name="outside",
                    health_path="/healthz",
                )
                try:
                    # As the deployment docs' unit for the outside's processes (CPUWeight=1 of the default 100).
                    nice = int(os.environ.get("BENCH_OUTSIDE_NICE", "19"))
                    log(f"{args.backend}: 26. the outside's daphne process at nice {nice}")
                    servers_renice(outside, nice)
                    metrics += bench_noisy_neighbours(
                        servers,
                        outside,
                        logins,
                        noisy_ops[0],
                        noisy_items,
                        seconds=noisy_seconds,
                        process_note=note,
                        outside_nice=nice,
                    )
                finally:
                    outside.stop()
            if wanted(23):  # last: its second worker would change the one-worker measures above
                log(f"{args.backend}: 23. two task workers: applied rate, and decision → applied at 50/s")
                metrics += bench_two_workers(servers, logins, pool, count=two_count, seconds=sustained_seconds)
            if wanted(27):  # after 23: it runs two workers of its own (the ones before are stopped)
                from bench.deployments import bench_deployment_resumed

                log(f"{args.backend}: 27. decision → a LangGraph deployment's thread resumed, quiet and a 60-thread burst")
                metrics += bench_deployment_resumed(servers, users[:8], quiet=max(10, int(20 * s)), burst=60)
        finally:
            servers.stop()

    if wanted(17):
        metrics += bench_duplicate_reading(
            env=dict(os.environ),
            logdir=args.workdir,
            count=args.servers,
            logins=logins,
            items=max(9, int(30 * s)),
            process_note=note,
        )
    if wanted(19):
        metrics += bench_loser_other_tab(
            env=dict(os.environ),
            logdir=args.workdir,
            count=args.servers,
            logins=logins,
            rounds=max(10, int(20 * s)),
            process_note=note,
        )

    # Every decision since the repair above went through the product, concurrently (8 reviewers,
    # races, the worker applying, API submits): the counters must equal a real COUNT.
    # counts_recount reports (and repairs) any drift.
    if wanted(16):
        drifts = counts_recount()
        log(f"{args.backend}: 16. counts after the concurrent run: {len(drifts)} counters drifted {[str(d) for d in drifts]}")
        metrics.append(
            Metric(
                "counts_drift",
                "16. counts after the concurrent run: |counter - COUNT| summed over counters",
                sum(abs(d.counter - d.actual) for d in drifts),
                "items",
                target=0,
                check="value",
                op="<=",
                detail={"drifts": [str(d) for d in drifts]},
            )
        )

    if wanted(6, 13):
        rows = args.queue_rows or int(1_000_000 * min(1.0, s))
        log(f"{args.backend}: 6, 13. queue page and a decision's events at 10,000 and {rows:,} pending")
        metrics += bench_queue_size(user=users[0], items=pool, rows=rows, small=10_000, reps=max(10, int(30 * s)))

    from django.db import connection

    result = {
        "backend": args.backend,
        "database": connection.vendor,
        "channel_layer": "redis pub/sub" if os.environ.get("REDIS_URL") else "in-memory",
        "servers": args.servers,
        "scale": s,
        "only": sorted(only),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "duration_s": round(time.time() - started, 1),
        "machine": {**machine, "load_at_end": list(os.getloadavg())},
        "metrics": [m.as_json() for m in metrics],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2, default=str))
    from moderation.core.checkpointer import checkpointer_close_all

    checkpointer_close_all()
    connections.close_all()
    log(f"{args.backend}: done in {result['duration_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
