"""The TypeScript client (clients/typescript) for the tests: its node_modules, its Node processes, a PostgreSQL database.

``node_modules_ready`` runs ``npm ci`` when the installed tree is older than the lock file
(what ``make ts-client`` does), one process at a time; ``node_run`` runs a Node command
there in a process group the reaper adopts (e2e/children.py), so a test that dies leaves
none behind; ``postgres_database`` makes a database of the test's own for LangGraph.js's
PostgresSaver (the suite's PostgreSQL, else the machine's; missing: a skip, or a failure in CI).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import signal
import subprocess
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager

from e2e.children import children_adopt, children_forget
from e2e.server import ROOT
from moderation.tests.real_server import service_missing

CLIENT = ROOT / "clients" / "typescript"
DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/postgres"


def node_modules_ready() -> None:
    """The package's node_modules as its package-lock.json says (``npm ci`` when missing or older)."""
    (ROOT / "var").mkdir(exist_ok=True)
    with open(ROOT / "var" / "ts-client-npm.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # the two passes' workers may both get here
        installed = CLIENT / "node_modules" / ".package-lock.json"
        if installed.exists() and installed.stat().st_mtime >= (CLIENT / "package-lock.json").stat().st_mtime:
            return
        done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=CLIENT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"npm ci failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


def node_run(args: list[str], *, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``args`` (``npx``, ``node``...) in clients/typescript, its output captured; killed with its group on a timeout."""
    process = subprocess.Popen(
        args,
        cwd=CLIENT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    children_adopt(process)
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        raise AssertionError(f"{' '.join(args)} ran over {timeout} s:\n{out[-6000:]}") from None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # anything the command left running in its group
        children_forget(process)
    return subprocess.CompletedProcess(args, process.returncode, out, "")


def _admin_url() -> str:
    suite = os.environ.get("DATABASE_URL", "")
    if suite.startswith(("postgres://", "postgresql://")):
        return suite
    return os.environ.get("CLIENT_POSTGRES_URL") or DEFAULT_POSTGRES_URL


@contextmanager
def postgres_database() -> Iterator[str]:
    """The URL of a fresh database, dropped afterwards (its sessions ended first)."""
    import psycopg
    from psycopg import sql

    admin = _admin_url()
    try:
        psycopg.connect(admin, connect_timeout=3).close()
    except psycopg.Error as exc:
        service_missing(f"PostgreSQL not reachable at {urllib.parse.urlsplit(admin).hostname}: {str(exc).strip()}")
    name = f"rq_ts_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urllib.parse.urlunsplit(urllib.parse.urlsplit(admin)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


def ts_agent(
    *,
    server,
    workdir,
    port: int,
    token: str,
    secret: str,
    postgres_url: str,
    thread: str = "support-thread-1",
    flags: tuple[str, ...] = (),
):
    """The TypeScript client's agent service (clients/typescript/test/agent-service.ts) in its own Node process."""
    from e2e.agents import AgentProcess

    return AgentProcess(
        server=server,
        workdir=workdir,
        port=port,
        token=token,
        secret=secret,
        thread=thread,
        flags=flags,
        command=("node", "--import", "tsx", "test/agent-service.ts"),
        cwd=CLIENT,
        env={"RQ_POSTGRES_URL": postgres_url},
    )
