"""No orphans: the process groups a test process starts die with it, however it dies.

A test starts its servers, workers and agents in process groups of their own
(``start_new_session=True``), so that a Ctrl-C meant for pytest does not reach them half-way
through a test and each is stopped as a group. The price: when pytest itself dies without its
teardown (a second Ctrl-C, SIGKILL, a killed xdist worker, a timeout's ``os._exit``), nothing
stops them. So every such group is adopted here: the first adoption in a process starts a reaper
(``python e2e/children.py``, standard library only) that reads group ids from a pipe. The test
process holds the pipe's only write end; when it exits, for whatever reason, the reaper reads
end-of-file and stops every group still adopted (SIGTERM, then SIGKILL after a grace), if its
leader is still the process adopted: process ids are reused within a run (``pid_max`` is 32768
here), and a reused id may lead another test's group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

GRACE_SECONDS = 5.0

_lock = threading.Lock()
_pipe: int | None = None  # the write end, in the process that started the reaper
_owner: int | None = None  # that process's pid


def _forked() -> None:
    # A forked child (multiprocessing, the fork server) must not keep its parent's write end open,
    # or the reaper would never see end-of-file; it starts a reaper of its own if it adopts.
    global _pipe, _owner
    if _pipe is not None:
        os.close(_pipe)
    _pipe = _owner = None


os.register_at_fork(after_in_child=_forked)


def _say(line: str) -> None:
    global _pipe, _owner
    with _lock:
        if _pipe is None or _owner != os.getpid():
            read, write = os.pipe()
            subprocess.Popen(
                [sys.executable, "-I", str(Path(__file__).resolve())],
                stdin=read,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # beyond the terminal's Ctrl-C, which is for pytest
            )
            os.close(read)
            _pipe, _owner = write, os.getpid()
        os.write(_pipe, f"{line}\n".encode())


def _started(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (with its pid, its identity), or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def children_adopt(process: subprocess.Popen) -> None:
    """Have ``process`` (the leader of a group of its own) stopped, group and all, if this process dies first."""
    started = _started(process.pid)
    if started is not None:
        _say(f"+{process.pid} {started}")


def children_forget(process: subprocess.Popen) -> None:
    """``process``'s group is being stopped as planned: the reaper need not watch it any longer."""
    if _pipe is not None and _owner == os.getpid():
        _say(f"-{process.pid}")


def _groups_stop(groups: set[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for group in list(groups):
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                groups.discard(group)
        deadline = time.monotonic() + GRACE_SECONDS
        while groups and time.monotonic() < deadline:
            time.sleep(0.1)
            for group in list(groups):
                try:
                    os.killpg(group, 0)
                except ProcessLookupError:
                    groups.discard(group)


def _reap() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    adopted: dict[int, str] = {}
    for line in sys.stdin:
        pid, _, started = line[1:].strip().partition(" ")
        if line[0] == "+":
            adopted[int(pid)] = started
        else:
            adopted.pop(int(pid), None)
    _groups_stop({pid for pid, started in adopted.items() if _started(pid) == started})


if __name__ == "__main__":
    _reap()
