"""The one way tests, the demo and the bench run the real thing: ``LiveServer``.

A daphne process (restartable, on a free port or a given one) against a given
database (its own SQLite file by default, or any DATABASE_URL: several servers may
share one) and a given channel layer (in-memory, or Redis when ``extra_env`` names a
REDIS_URL and a CHANNEL_LAYER_PREFIX), optionally task workers (``manage.py
db_worker``) on the same database and environment. Start-up waits until the server
answers ``health_path`` with 200, and a failure to start says why with the tail of its
log. Every process gets its own process group and is stopped as a group.

The test process never imports the project's models: the database is seeded with
``seed`` (``e2e.seed.site_seed`` in a child process) and inspected through
``e2e/dbtool.py`` in a child process with the server's DATABASE_URL; quick reads of
items' rows go straight to the database (read-only; SQLite's WAL lets them run beside
the server's writes).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from e2e.children import children_adopt, children_forget
from e2e.forked import ForkedProcess, forked_run

ROOT = Path(__file__).resolve().parent.parent
DBTOOL = Path(__file__).resolve().parent / "dbtool.py"
# Environment the server must not inherit from whoever runs the tests.
_SCRUBBED_ENV = (
    "DATABASE_URL",
    "REDIS_URL",
    "CHANNEL_LAYER_PREFIX",
    "DJANGO_ALLOW_ASYNC_UNSAFE",
    "REVIEWQUEUE_BACKEND_PASS",
    "REVIEWQUEUE_FAULTS",
    "REVIEWQUEUE_LAB",
    "SECRET_KEY",
    "ALLOWED_HOSTS",
)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


_ROWS_SELECT = (
    "SELECT q.public_id, q.title, q.status, u.username, q.apply_state FROM moderation_queueitem q "
    "LEFT JOIN auth_user u ON u.id = q.decided_by_id"
)


@dataclass(frozen=True)
class ItemRow:
    id: str
    title: str
    status: str
    winner: str | None
    apply_state: str


@dataclass(frozen=True)
class Seeded:
    items: list[str]
    titles: list[str]
    sessions: dict[str, str]
    decided: list[dict]


class ServerError(RuntimeError):
    pass


# Migrated, empty SQLite databases, one per settings module, made once per process: copying
# one takes milliseconds where migrating a fresh file costs seconds of CPU per server. The
# migrations read nothing else from the environment that an empty database would keep.
_MIGRATED: dict[str, LiveServer] = {}
_MIGRATED_LOCK = threading.Lock()


def _group_stop(proc: ForkedProcess, timeout: float) -> None:
    """SIGTERM to the process's group, SIGKILL to it after ``timeout``."""
    children_forget(proc)
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)
    except ProcessLookupError:
        proc.wait(timeout=timeout)


class LiveServer:
    """One server process (restartable), its workers, and the database they serve."""

    def __init__(
        self,
        workdir: Path,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        db_name: str = "e2e",
        database_url: str | None = None,
        settings: str = "reviewqueue.settings",
        extra_env: dict[str, str] | None = None,
        health_path: str = "/accounts/login/",
        daphne_args: tuple[str, ...] = (),
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.port = port or free_port(host)
        self.database_url = database_url or f"sqlite:///{self.workdir / f'{db_name}.sqlite3'}"
        self.settings = settings
        self.extra_env = dict(extra_env or {})  # this server's processes only (REDIS_URL, limits, ...)
        self.health_path = health_path
        self.daphne_args = daphne_args  # e.g. ("-v", "0"), ("--proxy-headers",)
        self.log_path = self.workdir / "server.log"
        self.worker_log_path = self.workdir / "worker.log"
        self.process: ForkedProcess | None = None
        self.workers: list[ForkedProcess] = []
        self.starts = 0
        self.faults = ""
        self._tool: ForkedProcess | None = None
        self._tool_io: TextIO | None = None
        self._tool_lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://{self.netloc}"

    @property
    def netloc(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def db_path(self) -> Path:
        """The SQLite file (the checkpoints live beside it, in <name>-checkpoints.sqlite3)."""
        if not self.database_url.startswith("sqlite:///"):
            raise ServerError(f"not a SQLite database: {self.database_url}")
        return Path(self.database_url.removeprefix("sqlite:///"))

    @property
    def checkpoints_path(self) -> Path:
        return self.db_path.with_name(f"{self.db_path.stem}-checkpoints.sqlite3")

    def env(self) -> dict[str, str]:
        """The environment of every process of this server; ``faults`` reach the server process only."""
        env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
        env.update(
            DATABASE_URL=self.database_url,
            DEBUG="true",
            REVIEWQUEUE_VAR_DIR=str(self.workdir),
            DJANGO_SETTINGS_MODULE=self.settings,
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        if self.faults:
            env["REVIEWQUEUE_FAULTS"] = self.faults
        return env

    # --- database ------------------------------------------------------------------

    def prepare(self) -> None:
        """Migrate a fresh database and create alice, bob, carol (moderators), dave (viewer) and erin (superuser)."""
        if self.database_url.startswith("sqlite:///"):
            for path in (self.db_path, self.checkpoints_path):
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{path}{suffix}").unlink(missing_ok=True)
        self._run([str(DBTOOL), "users", "--migrate"])

    def seed(
        self,
        *,
        users: list[str] = (),
        items: int = 0,
        decisions: list[tuple[int, str, str]] = (),
        prefix: str = "Item",
        staff: list[str] = (),
        password: str | None = None,
        sessions: bool = True,
    ) -> Seeded:
        """Migrate, then moderators (``staff`` among them also staff), items, decisions made in order, and
        (unless told otherwise) one ready session per moderator: ``e2e.seed.site_seed`` in one process."""
        self._migrated_copy()
        spec = {
            "migrate": True,
            "moderators": list(users),
            "staff": list(staff),
            "password": password,
            "sessions": sessions,
            "items": items,
            "prefix": prefix,
            "decisions": [list(d) for d in decisions],
        }
        out = json.loads(self._run([str(DBTOOL), "seed", json.dumps(spec)]).strip().splitlines()[-1])
        return Seeded(
            items=[i["id"] for i in out["items"]],
            titles=[i["title"] for i in out["items"]],
            sessions=out["sessions"],
            decided=out["decided"],
        )

    def _migrated_copy(self) -> None:
        """A database not made yet starts as a copy of a migrated one (``seed`` still migrates: a no-op)."""
        env = self.env()
        if env["DATABASE_URL"] != self.database_url or not self.database_url.startswith("sqlite:///"):
            return
        if self.db_path.exists():
            return
        settings = env["DJANGO_SETTINGS_MODULE"]
        with _MIGRATED_LOCK:
            template = _MIGRATED.get(settings)
            if template is None:
                workdir = Path(tempfile.mkdtemp(prefix="liveserver-migrated-"))
                atexit.register(shutil.rmtree, workdir, ignore_errors=True)
                template = LiveServer(workdir, settings=settings, db_name="migrated")
                template._run([str(DBTOOL), "seed", json.dumps({"migrate": True})])
                _MIGRATED[settings] = template
        self.clone_from(template)

    def manage(self, *args: str, timeout: float = 300, env: dict[str, str] | None = None) -> str:
        """``manage.py`` with this server's environment (plus ``env``); its stdout. Fails loudly."""
        return self._run([str(ROOT / "manage.py"), *args], timeout=timeout, env=env)

    def clone_from(self, other: LiveServer) -> None:
        """Copy another (stopped or idle) server's SQLite databases: a fresh copy of a prepared one."""
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
                ours, its = socket.socketpair()
                self._tool = ForkedProcess(
                    [str(DBTOOL), "serve"],
                    env=self.env(),
                    cwd=ROOT,
                    stdout=self.workdir / "dbtool.log",
                    new_session=False,
                    channel=its,
                )
                self._tool_io = ours.makefile("rw", encoding="utf-8", newline="\n")
                ours.close()  # the file holds the socket open
            tool = self._tool
            self._tool_io.write(json.dumps(list(args)) + "\n")
            self._tool_io.flush()
            line = self._tool_io.readline()
        if not line:
            log = self.workdir / "dbtool.log"
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.exists() else "(no log)"
            raise ServerError(f"dbtool {args[0]} died (exit {tool.wait(timeout=10)}); {log} ends:\n{tail}")
        answer = json.loads(line)
        if "error" in answer:
            raise ServerError(f"dbtool {' '.join(args)} failed:\n{answer['error']}")
        return answer["ok"]

    def tool_close(self) -> None:
        with self._tool_lock:
            tool, self._tool = self._tool, None
            io, self._tool_io = self._tool_io, None
        if io is not None:
            io.close()  # its end-of-file: the tool's loop ends
        if tool is not None and tool.poll() is None:
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
        """Full state per item, graph included (through the dbtool process)."""
        return await self.atool("state", *ids)  # type: ignore[return-value]

    def rows(self, ids: list[str]) -> dict[str, ItemRow]:
        """Status and winner per item, read straight from the database (fast)."""
        found = self._sqlite_rows(ids) if self.database_url.startswith("sqlite:///") else self._postgres_rows(ids)
        # SQLite stores a UUID as 32 hex digits, PostgreSQL prints it with dashes: key both by the caller's form.
        asked = {uuid.UUID(i).hex: i for i in ids}
        rows = (ItemRow(asked[uuid.UUID(str(pid)).hex], *columns) for pid, *columns in found)
        return {row.id: row for row in rows}

    def _sqlite_rows(self, ids: list[str]) -> list[tuple]:
        conn = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=10)
        try:
            return conn.execute(
                f"{_ROWS_SELECT} WHERE q.public_id IN ({','.join('?' * len(ids))})",
                [uuid.UUID(i).hex for i in ids],
            ).fetchall()
        finally:
            conn.close()

    def _postgres_rows(self, ids: list[str]) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.database_url, connect_timeout=10) as conn:
            return conn.execute(
                f"{_ROWS_SELECT} WHERE q.public_id = ANY(%s::uuid[])",
                [[str(uuid.UUID(i)) for i in ids]],
            ).fetchall()

    async def arows(self, ids: list[str]) -> dict[str, ItemRow]:
        return await asyncio.to_thread(self.rows, ids)

    def _run(self, cmd: list[str], *, timeout: float = 300, env: dict[str, str] | None = None) -> str:
        """``python <cmd>`` (a script and its arguments), forked (``e2e.forked``); its stdout. Fails loudly."""
        done = forked_run(cmd, env={**self.env(), **(env or {})}, cwd=ROOT, timeout=timeout)
        if done.returncode != 0:
            raise ServerError(f"{' '.join(cmd[:2])} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
        return done.stdout

    # --- processes -----------------------------------------------------------------

    def start(self, *, faults: str = "", timeout: float = 60.0) -> None:
        """Start the server and wait until it is healthy; ``faults`` (a REVIEWQUEUE_FAULTS spec) reach
        this process only."""
        if self.process is not None and self.process.poll() is None:
            return
        with open(self.log_path, "a") as log:
            log.write(f"\n--- start #{self.starts + 1} on port {self.port} ---\n")
        self.faults = faults
        try:
            self.process = ForkedProcess(
                ["-m", "daphne", *self.daphne_args, "-b", self.host, "-p", str(self.port), "reviewqueue.asgi:application"],
                cwd=ROOT,
                env=self.env(),
                stdout=self.log_path,
            )
        finally:
            self.faults = ""
        children_adopt(self.process)
        self.starts += 1
        self._wait_healthy(timeout)

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(f"daphne exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}{self.health_path}", timeout=10) as resp:
                    if resp.status == 200:
                        return
                    last = f"{self.health_path} {resp.status}"
            except urllib.error.HTTPError as error:
                last = f"{self.health_path} {error.code}: {error.read()[:500]!r}"
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as error:
                last = str(error)
            time.sleep(0.15)
        self.stop()
        raise ServerError(
            f"daphne did not answer {self.health_path} on {self.url} with 200 within {timeout:.0f} s ({last}):\n{self.log_tail()}"
        )

    def stop(self, *, timeout: float | None = None) -> None:
        """SIGTERM, then SIGKILL after ``timeout``: 10 s, or 3 s on the Redis layer, where daphne
        can take 10 s to stop and nothing here needs it graceful."""
        proc, self.process = self.process, None
        if proc is not None:
            _group_stop(proc, timeout if timeout is not None else 3.0 if "REDIS_URL" in self.env() else 10.0)

    def wait_dead(self, timeout: float = 15.0) -> int:
        """The process's exit code once it has died by itself (a fault kill); stop() is then a no-op."""
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout)
        finally:
            self.stop()

    def restart(self) -> None:
        self.stop()
        self.start()

    def worker_start(
        self,
        *,
        interval: float = 0.2,
        faults: str = "",
        worker_id: str = "",
        delivery_lane: bool = True,
        extra_env: dict[str, str] | None = None,
    ) -> ForkedProcess:
        """A ``manage.py db_worker`` on this server's database and environment, logging to worker.log.

        ``interval``: how long it sleeps when it found no task. A worker with work takes the next
        task at once; an idle one polls, and polls cost CPU the other tests of a run share
        (measured on SQLite, idle: 0.2 s costs about 5% of a core, 0.05 s about 13%).

        ``faults`` (a REVIEWQUEUE_FAULTS spec) reaches this worker only. ``worker_id`` names it in
        the task rows it claims (``worker_ids``; random by default). ``delivery_lane=False`` runs
        it without its deliveries-only loop. ``extra_env`` reaches this worker only (e.g. ``PGAPPNAME``).
        Crash it with ``kill()``; ``close()`` stops any still running.
        """
        env = {**self.env(), **(extra_env or {})}
        if faults:
            env["REVIEWQUEUE_FAULTS"] = faults
        named = ["--worker-id", worker_id] if worker_id else []
        if not delivery_lane:
            named.append("--no-delivery-lane")
        worker = ForkedProcess(
            [str(ROOT / "manage.py"), "db_worker", "--no-reload", "--no-startup-delay", "--interval", str(interval), *named],
            cwd=ROOT,
            env=env,
            stdout=self.worker_log_path,
        )
        children_adopt(worker)
        self.workers.append(worker)
        return worker

    def worker_wait_ready(self, worker_id: str, *, timeout: float = 60) -> None:
        """Wait until the worker ``worker_id`` polls for tasks (a Django start-up takes seconds on a busy machine)."""
        deadline = time.monotonic() + timeout
        while f"worker_id={worker_id} " not in self.log_tail(200, worker=True):
            assert time.monotonic() < deadline, self.log_tail(20, worker=True)
            time.sleep(0.1)

    def workers_stop(self, *, timeout: float = 10.0) -> None:
        """SIGTERM this server's workers (each finishes its task first; SIGKILL after ``timeout`` s) and wait for them."""
        workers, self.workers = self.workers, []
        for worker in workers:
            _group_stop(worker, timeout)

    def close(self) -> None:
        """Stop the server, its workers and the dbtool process."""
        self.stop()
        self.workers_stop()
        self.tool_close()

    async def astart(self) -> None:
        await asyncio.to_thread(self.start)

    async def astop(self) -> None:
        await asyncio.to_thread(self.stop)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def log_tail(self, lines: int = 60, *, worker: bool = False) -> str:
        path = self.worker_log_path if worker else self.log_path
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return f"(no {path.name})"
