"""A real LangGraph Server for the tests: ``langgraph dev`` serving ``langgraph_app``'s two graphs.

It runs from ``make langgraph-venv``'s virtualenv (``var/langgraph-venv``: langgraph-cli's
pins are not ours), in a copy of the app folder under the test's temporary directory
(its in-memory runtime writes its state beside ``langgraph.json``, and a virtualenv in
a watched folder would reload it forever: ``--no-reload`` besides). One server serves
every test of a session (``langgraph_server`` in ``moderation/tests/conftest.py``); each
test makes threads of its own.

``PortGate`` puts a port of ours in front of it that can refuse connections for a while:
the deployment "down" without the cost of restarting the server.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx

from e2e.children import children_adopt
from moderation.lab.waits import progress_wait

ROOT = Path(__file__).resolve().parents[2]
LANGGRAPH_BIN = ROOT / "var" / "langgraph-venv" / "bin" / "langgraph"
APP = Path(__file__).resolve().parent / "langgraph_app"
_API_LINE = re.compile(rb"API: \S*http://127\.0\.0\.1:(\d+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LangGraphServer:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.process: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> None:
        """Start it and wait until it answers; RuntimeError (with its log) if it does not."""
        if not LANGGRAPH_BIN.exists():
            raise RuntimeError(f"{LANGGRAPH_BIN} is missing: run `make langgraph-venv`")
        app = self.workdir / "app"
        shutil.copytree(APP, app, ignore=shutil.ignore_patterns("__pycache__", ".langgraph_api"))
        self.log = self.workdir / "langgraph.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH", "LANGCHAIN", "LANGGRAPH"))}
        env["LANGSMITH_TRACING"] = "false"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [str(LANGGRAPH_BIN), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1", "--port", str(free_port())],
                cwd=app,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        children_adopt(self.process)
        # It moves to another port, silently but for its log, when the one asked for got taken meanwhile.
        ready = progress_wait(self._ready, done=bool, stall=60, poll=0.2)
        if not ready:
            self.stop()
            raise RuntimeError(f"langgraph dev did not start:\n{self.log.read_text(errors='replace')[-3000:]}")

    def _ready(self) -> str:
        if self.process.poll() is not None:
            return ""
        found = _API_LINE.search(self.log.read_bytes())
        if not found:
            return ""
        url = f"http://127.0.0.1:{found.group(1).decode()}"
        try:
            if httpx.get(f"{url}/ok", timeout=2).status_code == 200:
                self.url = url
                return url
        except httpx.HTTPError:
            pass
        return ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()


class PortGate:
    """A TCP port forwarding to ``target`` while open; while closed, nothing listens (connection refused).

    ``delay``: seconds each new connection waits before it is forwarded (a deployment that answers slowly).
    """

    def __init__(self, target: str, *, delay: float = 0.0) -> None:
        host, port = target.removeprefix("http://").split(":")
        self.target = (host, int(port))
        self.delay = delay
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._listener: socket.socket | None = None
        self.open()

    def open(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(256)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._forward, args=(client,), daemon=True).start()

    def _forward(self, client: socket.socket) -> None:
        if self.delay:
            time.sleep(self.delay)
        try:
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
