"""A real daphne server process on a free port, over its own SQLite file database.

Used by the e2e fixtures and by the demo driver. The test process never imports the
project's models: set-up and inspection go through ``e2e/dbtool.py`` in a child
process with the server's DATABASE_URL, and quick reads of an item's state go straight
to the SQLite file (read-only, WAL lets them run beside the server's writes).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DBTOOL = Path(__file__).resolve().parent / "dbtool.py"
# Environment the server must not inherit from whoever runs the tests.
_SCRUBBED_ENV = ("REDIS_URL", "DJANGO_ALLOW_ASYNC_UNSAFE", "REVIEWQUEUE_BACKEND_PASS", "SECRET_KEY", "ALLOWED_HOSTS")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class ItemRow:
    id: str
    title: str
    status: str
    winner: str | None


class ServerError(RuntimeError):
    pass


class LiveServer:
    """One server process (restartable) and the database it serves."""

    def __init__(
        self, workdir: Path, *, host: str = "127.0.0.1", port: int | None = None, db_name: str = "e2e",
        settings: str = "reviewqueue.settings", extra_env: dict[str, str] | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.extra_env = dict(extra_env or {})  # this server's processes only (REDIS_URL, limits, ...)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.port = port or free_port(host)
        self.db_path = self.workdir / f"{db_name}.sqlite3"
        self.checkpoints_path = self.workdir / f"{db_name}-checkpoints.sqlite3"
        self.log_path = self.workdir / "server.log"
        self.settings = settings
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self._tool: subprocess.Popen | None = None
        self._tool_lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.db_path}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
        env.update(
            DATABASE_URL=self.database_url,
            DEBUG="true",
            REVIEWQUEUE_VAR_DIR=str(self.workdir),
            DJANGO_SETTINGS_MODULE=self.settings,
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        return env

    # --- database ------------------------------------------------------------------

    def prepare(self) -> None:
        """Migrate a fresh database and create alice, bob, carol (moderators) and dave."""
        for path in (self.db_path, self.checkpoints_path):
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        self._run([sys.executable, str(ROOT / "manage.py"), "migrate", "--no-input", "-v0"])
        self._run([sys.executable, str(DBTOOL), "users"])

    def clone_from(self, other: LiveServer) -> None:
        """Copy another (stopped or idle) server's databases: a fresh copy of a prepared one."""
        for src, dst in ((other.db_path, self.db_path), (other.checkpoints_path, self.checkpoints_path)):
            for suffix in ("", "-wal", "-shm"):
                Path(f"{dst}{suffix}").unlink(missing_ok=True)
            with sqlite3.connect(src) as source, sqlite3.connect(dst) as target:
                source.backup(target)
            sqlite3.connect(src).close()

    def tool(self, *args: str) -> object:
        """Run a dbtool command against this server's database; return its JSON answer.

        Commands go to one long-lived ``dbtool.py serve`` process, so each costs a
        query rather than a Django start-up.
        """
        with self._tool_lock:
            if self._tool is None or self._tool.poll() is not None:
                self._tool = subprocess.Popen(
                    [sys.executable, str(DBTOOL), "serve"], cwd=ROOT, env=self.env(), text=True,
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(self.workdir / "dbtool.log", "a"),
                )
            self._tool.stdin.write(json.dumps(list(args)) + "\n")
            self._tool.stdin.flush()
            line = self._tool.stdout.readline()
        if not line:
            raise ServerError(f"dbtool {args[0]} died: see {self.workdir / 'dbtool.log'}")
        answer = json.loads(line)
        if "error" in answer:
            raise ServerError(f"dbtool {' '.join(args)} failed:\n{answer['error']}")
        return answer["ok"]

    def tool_close(self) -> None:
        with self._tool_lock:
            tool, self._tool = self._tool, None
        if tool is not None and tool.poll() is None:
            tool.stdin.close()
            try:
                tool.wait(timeout=10)
            except subprocess.TimeoutExpired:
                tool.kill()
                tool.wait()

    async def atool(self, *args: str) -> object:
        return await asyncio.to_thread(self.tool, *args)

    async def items_create(self, count: int, prefix: str) -> list[dict]:
        return await self.atool("items", "--count", str(count), "--prefix", prefix)  # type: ignore[return-value]

    async def state(self, ids: list[str]) -> dict[str, dict]:
        """Full state per item, graph included (slow: starts a Django process)."""
        return await self.atool("state", *ids)  # type: ignore[return-value]

    def rows(self, ids: list[str]) -> dict[str, ItemRow]:
        """Status and winner per item, read straight from the SQLite file (fast)."""
        keys = {uuid.UUID(i).hex: i for i in ids}
        conn = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=10)
        try:
            found = conn.execute(
                "SELECT q.public_id, q.title, q.status, u.username FROM moderation_queueitem q "
                "LEFT JOIN auth_user u ON u.id = q.decided_by_id "
                f"WHERE q.public_id IN ({','.join('?' * len(keys))})",
                list(keys),
            ).fetchall()
        finally:
            conn.close()
        return {
            keys[str(pid).replace("-", "")]: ItemRow(keys[str(pid).replace("-", "")], title, status, winner)
            for pid, title, status, winner in found
        }

    async def arows(self, ids: list[str]) -> dict[str, ItemRow]:
        return await asyncio.to_thread(self.rows, ids)

    def _run(self, cmd: list[str]) -> str:
        done = subprocess.run(cmd, cwd=ROOT, env=self.env(), capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise ServerError(f"{' '.join(cmd[1:3])} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return done.stdout

    # --- process -------------------------------------------------------------------

    def start(self, *, timeout: float = 60.0) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        log = open(self.log_path, "a", buffering=1)  # noqa: SIM115 - owned by the child
        log.write(f"\n--- start #{self.starts + 1} on port {self.port} ---\n")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", self.host, "-p", str(self.port), "reviewqueue.asgi:application"],
            cwd=ROOT, env=self.env(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        self.starts += 1
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(f"daphne exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/accounts/login/", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.15)
        self.stop()
        raise ServerError(f"daphne did not answer on {self.url} within {timeout:.0f} s:\n{self.log_tail()}")

    def stop(self, *, timeout: float = 10.0) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)

    def close(self) -> None:
        """Stop the server and the dbtool process."""
        self.stop()
        self.tool_close()

    def restart(self) -> None:
        self.stop()
        self.start()

    async def astart(self) -> None:
        await asyncio.to_thread(self.start)

    async def astop(self) -> None:
        await asyncio.to_thread(self.stop)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no server log)"
