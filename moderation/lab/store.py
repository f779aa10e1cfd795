"""Where lab runs live between processes: one lock, a status file, the latest report.

Everything sits under ``settings.VAR_DIR / "lab"``:
- ``run.lock``: an flock held for the whole run, by the command line or the page's
  background run alike, so only one lab run touches the database at a time. The
  kernel drops it when the holder dies, so a crash never leaves the lab locked.
- ``status.json``: progress of the current (or last) run, read by the page's poll.
- ``latest.json`` and ``latest.svg``: the last finished run's report and chart.
- ``run.log``: stderr of the last run started from the page.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone

from moderation.lab.chart import chart_render
from moderation.lab.harness import database_url_current
from moderation.lab.runner import LabConfig, Progress, lab_run

# A run requested from the page is "starting" until its process takes the lock; after
# this long without the lock it is reported as failed.
STARTING_GRACE_S = 60.0
# How long a starting run waits for the lock, so a status poll probing it cannot make it give up.
LOCK_WAIT_S = 2.0
STATUS_MIN_INTERVAL_S = 0.25
# The page's run: small enough to finish in well under a minute on a small machine.
PAGE_RUN_ARGS = ["--trials", "5", "--reviewers", "3", "--hold", "0.5", "--time-limit", "60"]


class LabBusy(Exception):
    """Another lab run holds the lock."""


def lab_dir() -> Path:
    path = Path(settings.VAR_DIR) / "lab"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def lab_lock(*, wait: float = 0.0) -> Iterator[None]:
    """Hold the lab's run lock; raise LabBusy if it is still taken after ``wait`` seconds."""
    with open(lab_dir() / "run.lock", "a+") as handle:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LabBusy("another lab run is in progress") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def lab_is_running() -> bool:
    try:
        with lab_lock():
            return False
    except LabBusy:
        return True


def lab_run_recorded(*, config: LabConfig, progress: Progress | None = None, chart_path: Path | None = None) -> dict[str, Any]:
    """Run the lab under the lock, keeping status.json current; store the report and chart.

    Raises LabBusy if another run is in progress.
    """
    with lab_lock(wait=LOCK_WAIT_S):
        started_at = timezone.now().isoformat()
        last_write = 0.0

        def tick(done: int, total: int, label: str) -> None:
            nonlocal last_write
            if progress is not None:
                progress(done, total, label)
            now = time.monotonic()
            if now - last_write >= STATUS_MIN_INTERVAL_S or done == total:
                last_write = now
                _status_write({"state": "running", "done": done, "total": total, "label": label, "started_at": started_at})

        _status_write({"state": "running", "done": 0, "total": 0, "label": "setting up", "started_at": started_at})
        try:
            report = lab_run(config=config, progress=tick)
        except Exception as exc:
            _status_write(
                {
                    "state": "failed",
                    "error": f"{type(exc).__name__}: {exc}",
                    "started_at": started_at,
                    "finished_at": timezone.now().isoformat(),
                }
            )
            raise
        _json_write(lab_dir() / "latest.json", report)
        _atomic_chart(report, lab_dir() / "latest.svg")
        if chart_path is not None:
            chart_render(report=report, path=chart_path)
        _status_write({"state": "done", "started_at": started_at, "finished_at": timezone.now().isoformat()})
        return report


def lab_latest() -> dict[str, Any] | None:
    return _json_read(lab_dir() / "latest.json")


def lab_latest_chart() -> Path | None:
    path = lab_dir() / "latest.svg"
    return path if path.exists() else None


def lab_status() -> dict[str, Any]:
    """The current run's progress, with runs that died (lock released, never finished) marked failed."""
    status = _json_read(lab_dir() / "status.json") or {"state": "idle"}
    if status.get("state") not in ("starting", "running") or _starting_recently(status) or lab_is_running():
        return status
    return {**status, "state": "failed", "error": "the run stopped without finishing; see var/lab/run.log"}


def _starting_recently(status: dict[str, Any]) -> bool:
    return status.get("state") == "starting" and time.time() - status.get("requested_ts", 0) < STARTING_GRACE_S


def lab_start_background(*, requested_by: str) -> None:
    """Start a small lab run in its own process (isolated from the web server's threads,
    locks and fault points); raise LabBusy if one is running or starting."""
    with lab_lock():
        if _starting_recently(_json_read(lab_dir() / "status.json") or {}):
            raise LabBusy("a lab run is starting")
        _status_write(
            {
                "state": "starting",
                "requested_by": requested_by,
                "requested_ts": time.time(),
                "started_at": timezone.now().isoformat(),
            }
        )
    env = {**os.environ, "DATABASE_URL": database_url_current(), "REVIEWQUEUE_VAR_DIR": str(settings.VAR_DIR)}
    with open(lab_dir() / "run.log", "wb") as log:
        process = subprocess.Popen(
            [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "racelab", "--json", *PAGE_RUN_ARGS],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=env,
            cwd=settings.BASE_DIR,
            start_new_session=True,
        )
    # Reap the child when it exits so it never lingers as a zombie of the web server.
    threading.Thread(target=process.wait, daemon=True).start()


def _atomic_chart(report: dict[str, Any], path: Path) -> None:
    partial = path.with_name(path.name + ".partial.svg")
    chart_render(report=report, path=partial)
    partial.replace(path)


def _status_write(status: dict[str, Any]) -> None:
    _json_write(lab_dir() / "status.json", status)


def _json_write(path: Path, data: dict[str, Any]) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=2))
    partial.replace(path)


def _json_read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
