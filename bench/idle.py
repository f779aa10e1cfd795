"""An idle task worker's CPU (issue 39): measure 25.

``manage.py db_worker`` as the operators' docs start it, on an empty task table, its
process's CPU time (user + system, every thread: loops, lanes, sweeps, heartbeat, the
task wake-up listener) over a window, as a percent of one core. On PostgreSQL the loops
sleep until a task is queued (NOTIFY) and poll only every ``WORKER_IDLE_POLL`` seconds:
target ≤ 1 % of a core. On SQLite, which has no notifications, the loops poll every
``--interval``: information only. Beside it, the same worker at ``--interval 0.1`` (what
the docs said before), for the comparison.

Run alone: ``.venv/bin/python -m bench.idle`` with the bench's environment (``DATABASE_URL``
of a migrated database, ``SECRET_KEY``, ``AUDIT_KEY``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, Metric, log

IDLE_TARGET_PERCENT = 1.0
# The docs' command line (docs/operators/deployment.md), and what it said before.
DOCUMENTED_INTERVAL = 1.0
OLD_INTERVAL = 0.1


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def idle_worker_cpu(*, env: dict[str, str], interval: float, seconds: float, warmup: float = 5.0) -> float:
    """Percent of one core a ``db_worker --interval interval`` with nothing to do takes over ``seconds``."""
    with tempfile.NamedTemporaryFile("w+", suffix=".log") as out:
        worker = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "manage.py"),
                "db_worker",
                "--no-reload",
                "--no-startup-delay",
                "--interval",
                str(interval),
                "--worker-id",
                "bench-idle",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 120
            while "worker_id=bench-idle " not in Path(out.name).read_text(errors="replace"):
                assert worker.poll() is None and time.monotonic() < deadline, Path(out.name).read_text()[-3000:]
                time.sleep(0.2)
            time.sleep(warmup)  # its lanes and sweeps started, its first sweeps done
            cpu, wall = _cpu_seconds(worker.pid), time.monotonic()
            time.sleep(seconds)
            return 100 * (_cpu_seconds(worker.pid) - cpu) / (time.monotonic() - wall)
        finally:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()


def bench_idle_worker(*, env: dict[str, str], vendor: str, seconds: float) -> list[Metric]:
    """Measure 25: the documented worker idle, and the old ``--interval 0.1`` beside it."""
    documented = idle_worker_cpu(env=env, interval=DOCUMENTED_INTERVAL, seconds=seconds)
    old = idle_worker_cpu(env=env, interval=OLD_INTERVAL, seconds=seconds)
    log(
        f"25. idle worker: {documented:.2f}% of a core (--interval {DOCUMENTED_INTERVAL:g}), "
        f"{old:.2f}% (--interval {OLD_INTERVAL:g})"
    )
    target = IDLE_TARGET_PERCENT if vendor == "postgresql" else None
    return [
        Metric(
            "idle_worker_cpu",
            f"25. an idle task worker's CPU, --interval {DOCUMENTED_INTERVAL:g} (docs)",
            documented,
            "% of a core",
            baseline=old,
            baseline_name=f"--interval {OLD_INTERVAL:g}",
            target=target,
            check="value",
            op="<=",
            detail={"seconds": seconds, "vendor": vendor},
        ),
    ]


if __name__ == "__main__":
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    django.setup()
    from django.db import connection

    for row in bench_idle_worker(
        env=dict(os.environ), vendor=connection.vendor, seconds=float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    ):
        print(row.as_json())
