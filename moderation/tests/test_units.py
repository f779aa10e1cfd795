"""The systemd template units the deployment docs ship pass ``systemd-analyze verify``, as written there.

Each is read from ``docs/operators/deployment.md`` and verified as instance 1 with this checkout's paths
in place of ``/srv/reviewqueue``; a misspelt key is each one's control (the verifier sees it).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from e2e.server import ROOT

pytestmark = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze (Debian's systemd) is not installed"
)


def _unit(name: str) -> str:
    page = (ROOT / "docs" / "operators" / "deployment.md").read_text()
    [unit] = re.findall(rf"```ini\n(# /etc/systemd/system/{re.escape(name)}\n.*?)```", page, re.DOTALL)
    return unit


def _verified(tmp_path, name: str, unit: str) -> str:
    """What ``systemd-analyze verify`` says of ``unit`` as instance 1, its paths this checkout's."""
    (tmp_path / "env").write_text("METRICS_WORKER_PORT=9101\n")
    unit = unit.replace("/srv/reviewqueue", str(ROOT)).replace("/etc/reviewqueue/env", str(tmp_path / "env"))
    path = tmp_path / name.replace("@.", "@1.")
    path.write_text(unit)
    verified = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    return (verified.stdout + verified.stderr).strip()


def _passes_and_its_control_fails(tmp_path, name: str, unit: str) -> None:
    assert _verified(tmp_path, name, unit) == ""
    misspelt = _verified(tmp_path, name, unit.replace("Restart=always", "Restartt=always"))
    assert "Unknown key 'Restartt'" in misspelt, misspelt


def test_the_task_workers_template_unit_passes_systemd_analyze_verify(tmp_path):
    name = "reviewqueue-worker@.service"
    unit = _unit(name)
    assert "ExecStart=/srv/reviewqueue/.venv/bin/python manage.py db_worker" in unit
    _passes_and_its_control_fails(tmp_path, name, unit)


def test_the_outside_servers_template_unit_passes_and_runs_them_below_the_moderators(tmp_path):
    name = "reviewqueue-outside@.service"
    unit = _unit(name)
    assert "ExecStart=/srv/reviewqueue/.venv/bin/daphne" in unit
    assert "Environment=SERVE_ROUTES=outside" in unit
    assert re.search(r"^CPUWeight=1$", unit, re.MULTILINE)  # measured as bench 26's split lines (nice 19)
    _passes_and_its_control_fails(tmp_path, name, unit)
