"""No orphans: a test run killed outright takes its servers and workers with it (``e2e.children``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from e2e.forked import SESSION_HOLD_ENV, ForkedProcess
from e2e.server import ROOT
from moderation.lab.waits import progress_wait

# A test that starts a real server and task worker the one way tests do, plus (the negative
# control) a process group started as every test started them before: in a session of its own,
# not adopted. It writes the three ids, then waits to be killed.
INNER = textwrap.dedent("""
    import subprocess, time
    from pathlib import Path
    from e2e.server import LiveServer

    def test_runs_until_killed(tmp_path):
        server = LiveServer(tmp_path / "site")
        server.seed(users=["alice"])
        server.start(timeout=300)
        worker = server.worker_start()
        bare = subprocess.Popen(["sleep", "600"], start_new_session=True)
        Path({pids!r}).write_text(f"{{server.process.pid}} {{worker.pid}} {{bare.pid}}")
        time.sleep(600)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def _described(pid: int) -> str:
    """``pid``'s name, state, parent and group, for a failure's message."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return f"{pid} (gone)"
    name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1].split()
    return f"{pid} {name} state={rest[0]} ppid={rest[1]} pgid={rest[2]}"


def test_a_killed_run_leaves_no_server_or_worker_behind(tmp_path):
    pids_file = tmp_path / "pids"
    (tmp_path / "test_inner.py").write_text(INNER.format(pids=str(pids_file)))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-c", os.devnull, "-p", "no:cacheprovider", "-q", str(tmp_path / "test_inner.py")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        started = progress_wait(lambda: pids_file.exists() or run.poll() is not None, done=bool, stall=300)
        assert started and pids_file.exists(), run.communicate(timeout=60)[0]
        server, worker, bare = (int(p) for p in pids_file.read_text().split())
        assert all(_alive(pid) for pid in (server, worker, bare))

        run.kill()  # no teardown, no atexit: the hardest way a run can end
        run.wait(timeout=60)

        gone = progress_wait(lambda: [pid for pid in (server, worker) if _alive(pid)], done=lambda left: not left, stall=60)
        assert gone == [], f"still running after the run was killed: {[_described(pid) for pid in gone]}"
        # The negative control: a group nobody adopted outlives the run, so the check above can see an orphan.
        assert _alive(bare)
    finally:
        if run.poll() is None:
            run.kill()
        if pids_file.exists():
            for pid in (int(p) for p in pids_file.read_text().split()):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)


@pytest.mark.parametrize("waited", [True, False], ids=["waited", "control-not-waited"])
def test_a_forked_process_leads_its_own_group_once_started(tmp_path, monkeypatch, waited):
    """A signal to a process's group (a planned stop, the reaper) reaches it from the moment it is
    started. The child makes its session itself: the control, not waiting for it, reads it still
    in the fork server's group (a CI run's reaper missed such a worker, started 0.1 s before the kill)."""
    env, hold = dict(os.environ), tmp_path / "make-your-session"
    if not waited:
        monkeypatch.setattr(ForkedProcess, "_session_wait", lambda self: None)
        env[SESSION_HOLD_ENV] = str(hold)  # the children make their sessions only once read: a slow child, certain
    (tmp_path / "idle.py").write_text("import time\ntime.sleep(30)\n")
    started = [ForkedProcess([str(tmp_path / "idle.py")], env=env, cwd=tmp_path, stdout=tmp_path / "out") for _ in range(8)]
    try:
        leading = [os.getpgid(process.pid) == process.pid for process in started]
        hold.touch()
    finally:
        for process in started:
            process.kill()
            process.wait(timeout=30)
    assert all(leading) if waited else not any(leading)
