"""The project's own Python processes (daphne, ``manage.py``, dbtool), forked from a parent that
has imported their libraries once.

Started fresh, each pays 2 to 3 CPU-seconds of imports (Django, LangGraph, LangChain, Twisted)
before its first line of work, and a test run starts hundreds. A multiprocessing fork server
imports the libraries once; each process is forked from it and then becomes what was asked for:
its environment made the asked one whole (settings are read after the fork), its output sent
to a file, a session of its own if asked, and ``sys.argv`` set before the program runs as
``__main__``. ``ForkedProcess`` answers like ``subprocess.Popen`` where the tests use it.

The preload is imports only: none that reads settings, opens a connection or a file, or starts
a thread. ``daphne.server`` is not among them: it makes its event loop (an epoll descriptor)
when imported, which every child of the fork server would share.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import runpy
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PRELOAD = [
    "django.db.models",
    "django.test",
    "django.forms",
    "django.template.defaulttags",
    "channels.generic.websocket",
    "twisted.internet.asyncioreactor",
    "twisted.web.http",
    "autobahn.twisted.websocket",
    "langgraph.graph",
    "langgraph.types",
    "langgraph.checkpoint.sqlite",
    "langgraph.checkpoint.postgres",
    "langchain_core.messages",
    "langchain.agents",
    "langgraph_sdk",
    "psycopg",
    "psycopg_pool",
    "pydantic",
    "httpx",
    "jsonschema",
    "prometheus_client",
    "standardwebhooks",
    "django_tasks",
]

_context = multiprocessing.get_context("forkserver")
# Threads start and wait for these processes at once (test_crash's scenarios), and multiprocessing is
# not thread-safe there: Process.start() polls every other child, and when two polls of one child race,
# both read its exit status from the fork server's pipe and the second, at end-of-file, overwrites it
# with 255. A CI run saw a `recover` that had printed its whole report "fail (255)"; a quick try with 8
# threads did not reproduce it, so this lock closes the one way found by reading multiprocessing.
_POLLS = threading.Lock()
_context.set_forkserver_preload(PRELOAD)


# A test's control only (e2e/test_children.py): a child given this file's path makes its session once the file
# exists (at most 60 s on), so the parent certainly reads it before, as a slow child would be read.
SESSION_HOLD_ENV = "RQ_FORKED_SESSION_AFTER"


def _session_hold(path: str | None) -> None:
    deadline = time.monotonic() + 60
    while path and not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


def _child_main(
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    stdout: str,
    stderr: str,
    new_session: bool,
    channel: socket.socket | None = None,
) -> None:
    if new_session:
        _session_hold(env.get(SESSION_HOLD_ENV))
        os.setsid()
    # Named for ps, top and scripts/cpu_by_kind.py: every fork server child's command line is the fork server's.
    program = argv[1] if argv[0] == "-m" else Path(argv[0]).stem
    command = argv[1] if program == "manage" and len(argv) > 1 else program
    Path("/proc/self/comm").write_text(f"rq-{command}"[:15])
    for fd, path in ((1, stdout), (2, stderr)):
        out = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(out, fd)
        os.close(out)
    if channel is not None:  # stdin and stdout both: the parent's end of the pair talks to it
        os.dup2(channel.fileno(), 0)
        os.dup2(channel.fileno(), 1)
        channel.close()
    else:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own stdin, for its lifetime
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(write_through=True)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    if argv[0] == "-m":
        sys.path[0] = cwd
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")


class ForkedProcess:
    """A forked process, answering like the parts of ``subprocess.Popen`` the tests use."""

    def __init__(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: Path,
        stdout: Path,
        stderr: Path | None = None,
        new_session: bool = True,
        channel: socket.socket | None = None,
    ) -> None:
        """``argv`` as ``python`` would take it, less the interpreter: ``["-m", "daphne", ...]`` or
        ``["manage.py", ...]``; its output appended to ``stdout`` (and ``stderr``, or the same file).
        ``channel`` (one end of a ``socket.socketpair()``, closed here once handed over) becomes its
        stdin and stdout instead, ``stdout`` then taking its stderr alone."""
        self.args = argv
        self._process = _context.Process(
            target=_child_main,
            args=(argv, dict(env), str(cwd), str(stdout), str(stderr or stdout), new_session, channel),
        )
        with _POLLS:
            self._process.start()
        if channel is not None:
            channel.close()  # the child has its own copy: its death is our end's end-of-file
        self.pid: int = self._process.pid  # type: ignore[assignment]
        if new_session:
            self._session_wait()

    def _session_wait(self) -> None:
        # The child makes its session itself, after the fork server has told us its pid. Until then a
        # signal to its group (a planned stop, e2e.children's reaper) finds no group, and the child
        # outlives it: a run killed just after starting a worker left that worker running.
        delay = 0.0005
        while self.poll() is None:
            try:
                if os.getpgid(self.pid) == self.pid:
                    return
            except ProcessLookupError:
                return
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def poll(self) -> int | None:
        with _POLLS:
            return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        multiprocessing.connection.wait([self._process.sentinel], timeout)
        code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def forked_run(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(..., capture_output=True, text=True)`` for ``argv`` (as ``ForkedProcess`` takes
    it), forked: its exit status, stdout and stderr; killed and ``TimeoutExpired`` after ``timeout``."""
    with tempfile.TemporaryDirectory(prefix="forked-run-") as scratch:
        out, err = Path(scratch) / "stdout", Path(scratch) / "stderr"
        proc = ForkedProcess(argv, env=env, cwd=cwd, stdout=out, stderr=err, new_session=False)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
            raise
        return subprocess.CompletedProcess(
            argv,
            code,
            out.read_text(errors="replace"),
            err.read_text(errors="replace"),
        )
