"""REVIEWQUEUE_FAULTS: actions at the fault points (moderation.core.faults) for crash tests of a real process.

``after_resume:kill`` SIGKILLs the process there, ``after_row_lock:sleep=2`` stalls. Installed by
this app's start-up (moderation.lab.apps) only: a process without the lab app refuses the setting
(reviewqueue.settings).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

from moderation.core.faults import fault_install


def faults_install_from_setting(spec: str) -> None:
    """Install actions from a spec like ``before_commit:kill,after_row_lock:sleep=0.5``."""
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, action = part.partition(":")
        if action == "kill":
            fault_install(name=name, action=_kill)
        elif action.startswith("sleep="):
            fault_install(name=name, action=_sleeper(float(action.removeprefix("sleep="))))
        else:
            raise ValueError(f"unknown fault action {action!r} for {name}; use kill or sleep=SECONDS")


def _sleeper(seconds: float) -> Callable[[str], None]:
    return lambda key: time.sleep(seconds)


def _kill(item_key: str) -> None:
    os.kill(os.getpid(), signal.SIGKILL)
