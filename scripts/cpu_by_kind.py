"""Where a machine's CPU goes while a command runs, by kind of process (how the test suite was measured).

    .venv/bin/python scripts/cpu_by_kind.py -- make test

Runs the command, and every half second reads every process's CPU time from /proc; at the
end prints a Markdown table of CPU-seconds per kind (pytest workers, daphne servers, task
workers, ``manage.py`` commands, dbtool, Chromium, LangGraph Server, PostgreSQL, Redis, ...).
Processes forked from the tests' fork server name themselves ``rq-<program>`` (``e2e/forked.py``),
since their command line is the fork server's. Sampled: a process that lives less than half a
second is missed, and each loses at most its last half second.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
KINDS = (  # (kind, a test on the command line or the comm) in order: the first that matches names it
    ("task worker (db_worker)", lambda cmd, comm: "db_worker" in cmd or comm == "rq-db_worker"),
    ("daphne server", lambda cmd, comm: "daphne" in cmd or comm == "rq-daphne"),
    ("dbtool", lambda cmd, comm: "dbtool" in cmd or comm == "rq-dbtool"),
    ("manage.py command", lambda cmd, comm: "manage.py" in cmd or comm.startswith("rq-")),
    ("fork server", lambda cmd, comm: "multiprocessing.forkserver" in cmd),
    ("pytest (test processes)", lambda cmd, comm: "pytest" in cmd or "exec(eval(sys.stdin.readline()))" in cmd),
    ("agent processes", lambda cmd, comm: "remote_agent" in cmd or "agent" in comm),
    ("LangGraph Server", lambda cmd, comm: "langgraph" in cmd),
    ("Chromium", lambda cmd, comm: "chrom" in cmd or "chrom" in comm),
    ("PostgreSQL", lambda cmd, comm: comm.startswith("postgres")),
    ("Redis", lambda cmd, comm: comm.startswith("redis")),
    ("Prometheus", lambda cmd, comm: comm.startswith("prom")),
    ("pip, npm, apt (install)", lambda cmd, comm: any(w in cmd for w in ("pip", "npm", "apt", "dpkg"))),
    ("mkdocs, lint-imports", lambda cmd, comm: "mkdocs" in cmd or "lint-imports" in cmd),
    ("other Python", lambda cmd, comm: "python" in cmd),
)


def _sample() -> dict[tuple[int, str], tuple[float, str, str]]:
    """Each process, keyed by its pid and start time (pids are reused): CPU-seconds so far, command line, name."""
    seen = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        seen[(int(entry.name), fields[19])] = ((int(fields[11]) + int(fields[12])) / TICKS, cmd, comm)
    return seen


def _kind(cmd: str, comm: str) -> str:
    return next((kind for kind, test in KINDS if test(cmd, comm)), "other")


def main() -> int:
    command = sys.argv[sys.argv.index("--") + 1 :] if "--" in sys.argv else sys.argv[1:]
    if not command:
        print(__doc__, file=sys.stderr)
        return 2
    before = {key: cpu for key, (cpu, _, _) in _sample().items()}  # what ran before the command is not its
    started = time.monotonic()
    run = subprocess.Popen(command)
    last: dict[tuple[int, str], tuple[float, str, str]] = {}
    while run.poll() is None:
        last.update(_sample())
        time.sleep(0.5)
    last.update(_sample())
    totals: dict[str, float] = defaultdict(float)
    for key, (cpu, cmd, comm) in last.items():
        totals[_kind(cmd, comm)] += cpu - before.get(key, 0.0)
    seconds = time.monotonic() - started
    everything = sum(totals.values())
    print(f"\n{' '.join(command)}: exit {run.returncode}, {seconds:.0f} s, {everything:.0f} CPU-s sampled\n")
    print("| kind | CPU-s | share |\n|---|---:|---:|")
    for kind, cpu in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"| {kind} | {cpu:.0f} | {cpu / everything:.0%} |")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
