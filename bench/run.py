"""`make bench`: every measure next to its own baseline, on SQLite and on PostgreSQL + Redis.

    python -m bench.run                      # both backends (PostgreSQL skipped if unreachable)
    python -m bench.run --backend sqlite     # one backend
    python -m bench.run --scale 0.3          # a short smoke run (smaller windows, same measures)
    python -m bench.run --only 17            # one measure (repeatable), and what it needs
    python -m bench.run --show               # print the latest tables again

Each backend gets a fresh database (a file under var/bench/, or CREATE DATABASE
bench_<pid> dropped afterwards) and its own Redis channel prefix. Progress goes to
stderr; the tables go to stdout; results go to var/bench/<timestamp>-<backend>.json and
var/bench/latest-<backend>.json (a run with --only keeps the latest full run there).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.common import ROOT, log
from bench.report import table

POSTGRES_URL = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
# README (Operating it): on 2 cores, one daphne process per core behind the Redis layer.
POSTGRES_SERVERS = int(os.environ.get("BENCH_SERVERS", "2"))
_DROP = ("DATABASE_URL", "REDIS_URL", "CHANNEL_LAYER_PREFIX", "REVIEWQUEUE_FAULTS", "REVIEWQUEUE_LAB", "REVIEWQUEUE_BACKEND_PASS")


def _out_dir() -> Path:
    return Path(os.environ.get("REVIEWQUEUE_VAR_DIR", ROOT / "var")) / "bench"


def _base_env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROP}
    env.update(
        DJANGO_SETTINGS_MODULE="bench.settings",
        DECISION_RATE_LIMIT="0",
        PYTHONUNBUFFERED="1",
        # Production mode, as measured: DEBUG would log every query and slow the DB-heavy
        # decisions more than the ping they are compared with. Plain HTTP on loopback.
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(50),
        AUDIT_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="127.0.0.1,localhost",
        SECURE_SSL_REDIRECT="false",
        REVIEWQUEUE_VAR_DIR=str(workdir),
        # The servers leave the graph's work to the task worker, as in production.
        REVIEWQUEUE_APPLY_INLINE="",
        # The example agent's refund tool stands for a payment provider's latency (bench 11).
        REFUND_AGENT_TOOL_SECONDS="0.5",
        # Bench 9's webhook receiver listens on loopback, where webhooks go only when allowed.
        WEBHOOK_ALLOWED_NETWORKS="127.0.0.1",
        # Bench 26's slow deployment and bench 27's LangGraph deployment (`langgraph dev`) listen on loopback too.
        DEPLOYMENT_ALLOWED_NETWORKS="127.0.0.1",
    )
    return env


def _postgres_admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql)


def _postgres_reachable() -> str | None:
    try:
        _postgres_admin("SELECT 1")
    except Exception as exc:  # any reason at all: the pass is skipped with it
        return str(exc).strip() or type(exc).__name__
    return None


def backend_run(name: str, *, scale: float, stamp: str, queue_rows: int | None, only: list[int]) -> dict | None:
    out = _out_dir()
    workdir = out / f"run-{stamp}-{name}"
    workdir.mkdir(parents=True, exist_ok=True)
    env = _base_env(workdir)
    servers = 1
    dbname = None
    if name == "sqlite":
        env["DATABASE_URL"] = f"sqlite:///{workdir / 'bench.sqlite3'}"
    else:
        problem = _postgres_reachable()
        if problem:
            if os.environ.get("CI", "").lower() == "true":
                raise SystemExit(f"PostgreSQL is required in CI but not reachable: {problem}")
            log(f"postgres: SKIPPED, not reachable ({problem})")
            return None
        dbname = f"bench_{os.getpid()}"
        _postgres_admin(f"CREATE DATABASE {dbname}")
        base, _, _ = POSTGRES_URL.rpartition("/")
        env.update(DATABASE_URL=f"{base}/{dbname}", REDIS_URL=REDIS_URL, CHANNEL_LAYER_PREFIX=f"bench{os.getpid()}")
        servers = POSTGRES_SERVERS
    result_path = out / f"{stamp}-{name}.json"
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.suite",
                "--backend",
                name,
                "--json",
                str(result_path),
                "--workdir",
                str(workdir),
                "--scale",
                str(scale),
                "--servers",
                str(servers),
                *(["--queue-rows", str(queue_rows)] if queue_rows else []),
                *(arg for n in only for arg in ("--only", str(n))),
            ],
            cwd=ROOT,
            env=env,
        )
    finally:
        if dbname:
            try:
                _postgres_admin(f"DROP DATABASE IF EXISTS {dbname} WITH (FORCE)")
            except Exception as exc:
                log(f"postgres: could not drop {dbname}: {exc}")
    if done.returncode != 0:
        log(f"{name}: the bench failed (exit {done.returncode}); logs kept in {workdir}")
        return None
    shutil.rmtree(workdir, ignore_errors=True)  # databases and server logs; the JSON stays
    if not only:
        shutil.copyfile(result_path, out / f"latest-{name}.json")
    return json.loads(result_path.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "all"], default="all")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--queue-rows", type=int, default=None)
    parser.add_argument("--only", type=int, action="append", default=[], metavar="N", help="run measure N (repeatable)")
    parser.add_argument("--show", action="store_true", help="print the latest tables without measuring")
    args = parser.parse_args(argv)
    names = ["sqlite", "postgres"] if args.backend == "all" else [args.backend]
    if args.show:
        for name in names:
            path = _out_dir() / f"latest-{name}.json"
            if path.exists():
                print(table(json.loads(path.read_text())))
        return 0
    stamp = time.strftime("%Y%m%dT%H%M%S")
    results = []
    failed = False
    for name in names:
        log(f"=== {name} ===")
        result = backend_run(name, scale=args.scale, stamp=stamp, queue_rows=args.queue_rows, only=args.only)
        if result is None:
            failed = failed or name == "sqlite"
            continue
        results.append(result)
    for result in results:
        print(table(result))
    if results and not args.only:
        log(f"results in {_out_dir()}/latest-<backend>.json")
    elif results:
        log(f"results in {_out_dir()}/{stamp}-<backend>.json")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
