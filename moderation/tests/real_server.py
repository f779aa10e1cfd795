"""Real daphne processes for crash and outage tests, without the ORM in the test process.

Built on ``e2e.server.LiveServer`` (restartable daphne on its own SQLite file, dbtool
for reads). Adds: fault points for the server process only (``faults``), extra
environment (a Redis of the test's own), a one-process seed that migrates, creates
moderators, items and pre-made decisions and hands out ready sessions (no login form,
so no password hashing), a reviewer that POSTs decisions with that session, and a
task worker (``worker_start``) on the same database.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e.server import ROOT, LiveServer
from moderation.tests.cluster_support import DEFAULT_REDIS_URL, channel_prefix

# Any 32 alphanumerics form a valid CSRF secret: the header only has to match the cookie.
CSRF = "crashtestcrashtestcrashtestcrash"

_SEED = """
import json
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.auth.models import Group
from django.contrib.sessions.backends.db import SessionStore
from django.core.management import call_command
from moderation.decisions import item_decide
from moderation.items import item_create
from moderation.permissions import MODERATORS_GROUP

spec = json.loads({spec!r})
call_command("migrate", verbosity=0, interactive=False)
moderators = Group.objects.get(name=MODERATORS_GROUP)
users, sessions = {{}}, {{}}
for name in spec["users"]:
    user = users[name] = get_user_model().objects.create_user(name, is_staff=name in spec["staff"])
    user.groups.add(moderators)
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    sessions[name] = session.session_key
items = [
    str(item_create(title=f"{{spec['prefix']}} {{n}}", body="Nothing to see here.", source="crash").public_id)
    for n in range(spec["items"])
]
decided = []
for index, name, decision in spec["decisions"]:
    outcome = item_decide(item_public_id=items[index], reviewer=users[name], decision=decision)
    decided.append({{"item": items[index], "reviewer": name, "decision": decision, "won": outcome.won, "winner": outcome.winner}})
print("SEED " + json.dumps({{"items": items, "sessions": sessions, "decided": decided}}))
"""


def service_missing(message: str) -> None:
    """A missing service fails the run in CI and skips elsewhere."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message} (required in CI)")
    pytest.skip(message)


def redis_env(label: str) -> dict[str, str]:
    """REDIS_URL (the suite's, or the machine's) and a channel prefix of this test's own, for a server."""
    import redis

    url = os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
    try:
        redis.Redis.from_url(url, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        service_missing(f"Redis not reachable at {url}: {exc}")
    return {"REDIS_URL": url, "CHANNEL_LAYER_PREFIX": channel_prefix(label)}


@dataclass(frozen=True)
class Seeded:
    items: list[str]
    sessions: dict[str, str]
    decided: list[dict]


class SiteServer(LiveServer):
    """A LiveServer whose process (only) gets fault points and extra environment."""

    def __init__(self, workdir: Path, *, extra_env: dict[str, str] | None = None, db_name: str = "site") -> None:
        super().__init__(workdir, db_name=db_name, extra_env=extra_env)
        self.faults = ""

    def env(self) -> dict[str, str]:
        env = super().env()
        if "REVIEWQUEUE_FAULTS" not in self.extra_env:
            env.pop("REVIEWQUEUE_FAULTS", None)
        if self.faults:
            env["REVIEWQUEUE_FAULTS"] = self.faults
        return env

    def start(self, *, faults: str = "", timeout: float = 60.0) -> None:
        """Start the server; ``faults`` (a REVIEWQUEUE_FAULTS spec) reaches this process only."""
        self.faults = faults
        try:
            super().start(timeout=timeout)
        finally:
            self.faults = ""

    def seed(
        self, *, users: list[str], items: int, decisions: list[tuple[int, str, str]] = (), prefix: str = "Item",
        staff: list[str] = (),
    ) -> Seeded:
        """Moderators (``staff`` among them also staff), items, pre-made decisions, ready sessions."""
        spec = json.dumps(
            {"users": users, "items": items, "decisions": list(decisions), "prefix": prefix, "staff": list(staff)}
        )
        out = self.manage("shell", "-c", _SEED.format(spec=spec))
        line = next(line for line in out.stdout.splitlines() if line.startswith("SEED "))
        return Seeded(**json.loads(line.removeprefix("SEED ")))

    def manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=self.env(),
            capture_output=True, text=True, timeout=timeout,
        )
        assert done.returncode == 0, f"manage.py {args[0]} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        return done

    def wait_dead(self, timeout: float = 15.0) -> int:
        """The process's exit code once it has died by itself (a fault kill); stop() is then a no-op."""
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout)
        finally:
            self.stop()


def worker_start(server: LiveServer, *, interval: float = 0.05, faults: str = "") -> subprocess.Popen:
    """A real ``manage.py db_worker`` on ``server``'s database and environment; its log is worker.log beside the server's.

    ``faults`` (a REVIEWQUEUE_FAULTS spec) reaches this worker only. Stop it with
    ``kill()`` (SIGKILL, a crash) or ``terminate()`` and ``wait()``.
    """
    env = server.env()
    env.pop("REVIEWQUEUE_FAULTS", None)
    if faults:
        env["REVIEWQUEUE_FAULTS"] = faults
    with open(server.workdir / "worker.log", "a") as log:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "db_worker", "--no-reload", "--no-startup-delay",
             "--interval", str(interval)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


class Dropped(Exception):
    """The server closed or reset the connection without an HTTP response."""


class Reviewer:
    """One moderator's session against one server (cookie-authenticated JSON API)."""

    def __init__(self, server: LiveServer, username: str, session_key: str) -> None:
        self.server = server
        self.username = username
        self.cookie = f"sessionid={session_key}; csrftoken={CSRF}"

    def decide(self, item: str, decision: str, *, timeout: float = 15.0) -> tuple[int, dict]:
        """(status, JSON body); raises Dropped if the connection ends without a response."""
        conn = http.client.HTTPConnection(self.server.host, self.server.port, timeout=timeout)
        try:
            conn.request(
                "POST", f"/api/items/{item}/decision", body=json.dumps({"decision": decision}),
                headers={"Content-Type": "application/json", "X-CSRFToken": CSRF, "Cookie": self.cookie},
            )
            response = conn.getresponse()
            return response.status, json.loads(response.read() or b"{}")
        except (ConnectionError, http.client.HTTPException) as exc:
            raise Dropped(f"{type(exc).__name__}: {exc}") from exc
        finally:
            conn.close()

    def ws_headers(self) -> dict[str, str]:
        return {"Cookie": self.cookie}


def port_wait(port: int, *, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port} after {timeout} s")


@contextmanager
def black_hole() -> Iterator[int]:
    """A port that accepts connections (the kernel completes the handshake) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield sock.getsockname()[1]
