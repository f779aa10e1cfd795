"""One backend's bench, inside Django (``DJANGO_SETTINGS_MODULE=bench.settings``).

Started by ``bench.run`` with the database, the layer and the server count in the
environment; writes one JSON file. Order matters: the servers' benches run before the
queue-page bench fills the table with 100,000 rows, and the HTTP benches 1, 4 and 7
run before the task worker starts (they measure the request path alone).

The servers and the worker run as in production (the worker applies decisions). In
this process the benches 2 and 3 apply inline: the naive strategy they compare with
resumes the graph in the call, so the guard does too.
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
    parser.add_argument("--queue-rows", type=int, default=100_000)
    args = parser.parse_args(argv)

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections
    from django.test import override_settings

    from bench.api import bench_api
    from bench.applies import backlog_drain, bench_agent_response, bench_applied_rate
    from bench.common import Servers, log, machine_info, moderators_login
    from bench.inprocess import bench_guard_overhead, bench_ingest, bench_isolation, bench_queue_page, items_make
    from bench.served import bench_served

    started = time.time()
    machine = machine_info()
    s = args.scale
    log(f"{args.backend}: migrating a fresh database")
    call_command("migrate", verbosity=0, interactive=False)
    users, logins = moderators_login(9)
    logins = logins[:8]
    metrics = []

    log(f"{args.backend}: 5. ingest")
    ingest, pool = bench_ingest(seconds=3 * s, cap=2000, bulk_size=50)
    metrics += ingest
    need = int(1300 * s) + 200
    if len(pool) < need:
        log(f"{args.backend}: creating {need - len(pool)} more pending items for the decision benches")
        pool += items_make(need - len(pool))

    with override_settings(REVIEWQUEUE_APPLY_INLINE=True):
        log(f"{args.backend}: 2. guard overhead")
        quiet, guard = bench_guard_overhead(items=pool, reviewer=users[8], pairs=max(20, int(80 * s)))
        metrics += [guard, quiet]

        log(f"{args.backend}: 3. isolation")
        metrics += bench_isolation(items=pool, reviewers=users[5:9], seconds=max(1.0, 3 * s))

    agent_count, applied_count = max(30, int(100 * s)), max(100, int(300 * s))
    more = int(700 * s) + 200 - len(pool)
    if more > 0:
        log(f"{args.backend}: creating {more} more pending items for the HTTP benches")
        pool += items_make(more)
    connections.close_all()
    log(f"{args.backend}: 1, 4, 7. starting {args.servers} daphne process(es)")
    servers = Servers(count=args.servers, env=dict(os.environ), logdir=args.workdir)
    note = f"{args.servers} daphne process{'es' if args.servers > 1 else ''}"
    try:
        metrics += bench_served(servers, logins, pool, seconds=max(1.5, 4 * s), notice_seconds=max(2.0, 4 * s), process_note=note)
        log(f"{args.backend}: 11, 12. one task worker applying decisions")
        servers.live[0].worker_start(interval=0.05)
        backlog_drain(timeout=120)
        need = agent_count + applied_count + 10  # and a few for warm-up and the one-at-a-time contrast
        if len(pool) < need:
            log(f"{args.backend}: creating {need - len(pool)} more pending items for the worker benches")
            pool += items_make(need - len(pool))
        metrics += bench_agent_response(servers, logins, pool, count=agent_count, rate=4.0)
        metrics += bench_applied_rate(servers, logins, pool, count=applied_count)
        log(f"{args.backend}: 8, 9, 10. the service API, a webhook worker")
        metrics += bench_api(servers, logins, seconds=max(1.5, 4 * s), bare_rate=ingest[0].baseline)
    finally:
        servers.stop()

    log(f"{args.backend}: 6. queue page")
    metrics += bench_queue_page(user=users[0], rows=args.queue_rows, reps=max(10, int(30 * s)))

    from django.db import connection

    result = {
        "backend": args.backend,
        "database": connection.vendor,
        "channel_layer": "redis pub/sub" if os.environ.get("REDIS_URL") else "in-memory",
        "servers": args.servers,
        "scale": s,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "duration_s": round(time.time() - started, 1),
        "machine": {**machine, "load_at_end": list(os.getloadavg())},
        "metrics": [m.as_json() for m in metrics],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2, default=str))
    from moderation.checkpointer import checkpointer_close_all

    checkpointer_close_all()
    connections.close_all()
    log(f"{args.backend}: done in {result['duration_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
