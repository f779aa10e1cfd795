"""The lab is an app of its own: installed with DEBUG on, refused with DEBUG off unless REVIEWQUEUE_LAB asks for it.

Each case is a fresh process in production mode (settings are read once, at start-up): /lab/ is
routed or not, the ``racelab`` command exists or not, and REVIEWQUEUE_FAULTS is refused at start-up
without the lab, or installed (a sleep at a point, timed) with it.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[3]

# In production mode: the lab page's answer to an anonymous GET over HTTPS (302 to the login when
# routed), whether racelab is a command, and how long the after_row_lock point takes.
PROBE = """
import time
import django
django.setup()
from django.core.management import get_commands
from django.test import Client
from moderation.core.faults import fault_point
start = time.monotonic()
fault_point("after_row_lock", item_key="probe")
took = time.monotonic() - start
print(Client().get("/lab/", secure=True).status_code, "racelab" in get_commands(), took >= 0.2)
"""


def _run(**env: str) -> subprocess.CompletedProcess[str]:
    dropped = {"DEBUG", "SECRET_KEY", "AUDIT_KEY", "ALLOWED_HOSTS", "REVIEWQUEUE_LAB", "REVIEWQUEUE_FAULTS"}
    full_env = {k: v for k, v in os.environ.items() if k not in dropped}
    full_env.update(
        DJANGO_SETTINGS_MODULE="reviewqueue.settings",
        SECRET_KEY=secrets.token_urlsafe(50),
        AUDIT_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="testserver",
        **env,
    )
    return subprocess.run([sys.executable, "-c", PROBE], cwd=BASE_DIR, env=full_env, capture_output=True, text=True, timeout=120)


def test_with_debug_off_and_no_opt_in_there_is_no_lab_page_and_no_racelab_command():
    result = _run(DEBUG="false")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["404", "False", "False"]


def test_with_debug_off_and_no_opt_in_fault_injection_is_refused_at_start_up():
    result = _run(DEBUG="false", REVIEWQUEUE_FAULTS="after_row_lock:sleep=0.3")
    assert result.returncode != 0
    assert "REVIEWQUEUE_FAULTS is set but the lab is off" in result.stderr, result.stderr
    assert "set REVIEWQUEUE_LAB=true" in result.stderr


def test_an_operator_who_asks_for_the_lab_gets_it_with_debug_off():
    result = _run(DEBUG="false", REVIEWQUEUE_LAB="true", REVIEWQUEUE_FAULTS="after_row_lock:sleep=0.3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["302", "True", "True"]


def test_with_debug_on_the_lab_is_installed_unless_turned_off():
    result = _run(DEBUG="true")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["302", "True", "False"]
    result = _run(DEBUG="true", REVIEWQUEUE_LAB="false")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["404", "False", "False"]
