"""A taken port stops `make run` and run_cluster.sh before anything starts (scripts/port_check.py)."""

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.server import free_port

ROOT = Path(__file__).resolve().parents[2]
PY = Path(sys.executable)


@pytest.fixture
def taken_port():
    """A port something listens on, as an earlier server would."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def _run(cmd: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    # A database of the test's own, in case anything got as far as migrating.
    full_env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}", "REVIEWQUEUE_VAR_DIR": str(tmp_path), **env}
    return subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=60)


def test_a_free_port_passes_and_a_taken_one_is_named(taken_port, tmp_path):
    free = free_port()
    assert _run([str(PY), "scripts/port_check.py", "127.0.0.1", str(free)], tmp_path).returncode == 0
    done = _run([str(PY), "scripts/port_check.py", "127.0.0.1", str(free), str(taken_port)], tmp_path)
    assert done.returncode == 1
    assert f"cannot serve on 127.0.0.1:{taken_port}" in done.stderr and "choose another port" in done.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_run_on_a_taken_port_fails_before_migrating(taken_port, tmp_path):
    # -o: take the install step as done; this checks what `run` itself does.
    done = _run(["make", "-o", ".venv/.installed", "run", f"PORT={taken_port}", f"PY={PY}"], tmp_path)
    assert done.returncode != 0
    assert f"cannot serve on 127.0.0.1:{taken_port}" in done.stderr
    assert "migrate" not in done.stdout and not (tmp_path / "db.sqlite3").exists()


def test_run_cluster_on_a_taken_port_fails_before_touching_anything(taken_port, tmp_path):
    # Nothing listens on port 1: reaching the database or Redis would fail differently.
    done = _run(
        ["bash", "scripts/run_cluster.sh"],
        tmp_path,
        PY=str(PY),
        PORT1=str(free_port()),
        PORT2=str(taken_port),
        DATABASE_URL="postgres://nobody@127.0.0.1:1/nothing",
        REDIS_URL="redis://127.0.0.1:1/0",
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert f"cannot serve on 127.0.0.1:{taken_port}" in done.stderr
