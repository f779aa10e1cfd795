"""Shared pieces: progress on stderr, percentiles, metrics, daphne servers, sessions."""

from __future__ import annotations

import math
import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
_T0 = time.monotonic()


def log(message: str) -> None:
    """Progress goes to stderr, so stdout holds only the table."""
    print(f"[bench {time.monotonic() - _T0:6.1f}s] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (nan for no values)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def median(values: list[float]) -> float:
    return percentile(values, 50)


@dataclass
class Metric:
    """One line of the table: a measured value next to the baseline it is compared to.

    ``ratio`` is value / baseline. ``target`` is checked against ``check`` ("ratio" or
    "value") with ``op`` (">=" or "<="); no target means the line is information only.
    """

    key: str
    name: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_name: str = ""
    target: float | None = None
    check: str = "ratio"
    op: str = ">="
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.baseline in (None, 0) or self.value is None or math.isnan(self.value):
            return None
        return self.value / self.baseline

    @property
    def passed(self) -> bool | None:
        if self.target is None:
            return None
        measured = self.ratio if self.check == "ratio" else self.value
        if measured is None or math.isnan(measured):
            return False
        return measured >= self.target if self.op == ">=" else measured <= self.target

    def target_text(self) -> str:
        if self.target is None:
            return "-"
        what = "ratio" if self.check == "ratio" else self.unit
        return f"{what} {self.op} {self.target:g}"

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(ratio=self.ratio, passed=self.passed, target_text=self.target_text())
        return data


# --- daphne ---------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rss_kib(pid: int) -> int:
    """Resident set size of a process, from /proc (KiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


class Servers:
    """``count`` daphne processes serving one database (several need the Redis layer)."""

    def __init__(self, *, count: int, env: dict[str, str], logdir: Path) -> None:
        self.procs: list[subprocess.Popen] = []
        self.hosts: list[str] = []
        for n in range(count):
            port = free_port()
            with (logdir / f"daphne-{n}.log").open("ab") as out:
                proc = subprocess.Popen(
                    # -v 0: no access log (a proxy keeps it in production); the floor pays the same.
                    [str(BIN / "daphne"), "-v", "0", "-b", "127.0.0.1", "-p", str(port), "reviewqueue.asgi:application"],
                    cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                )
            self.procs.append(proc)
            self.hosts.append(f"127.0.0.1:{port}")
        deadline = time.monotonic() + 60
        for proc, host in zip(self.procs, self.hosts):
            port = int(host.rsplit(":", 1)[1])
            while True:
                if proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"daphne exited with {proc.returncode}; see {logdir}")
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        self.stop()
                        raise RuntimeError(f"daphne did not listen within 60 s; see {logdir}") from None
                    time.sleep(0.1)

    def host(self, n: int) -> str:
        return self.hosts[n % len(self.hosts)]

    def rss_kib(self) -> list[int]:
        return [rss_kib(p.pid) for p in self.procs]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# --- users and sessions (Django must be set up) --------------------------------------


@dataclass(frozen=True)
class Login:
    username: str
    user_id: int
    sessionid: str
    csrftoken: str

    def cookies(self) -> dict[str, str]:
        return {"sessionid": self.sessionid, "csrftoken": self.csrftoken}

    def cookie_header(self) -> str:
        return f"sessionid={self.sessionid}; csrftoken={self.csrftoken}"


def moderators_make(count: int, *, prefix: str = "bench-mod") -> list:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from moderation.permissions import MODERATORS_GROUP

    group = Group.objects.get(name=MODERATORS_GROUP)
    users = []
    for n in range(count):
        user, _ = get_user_model().objects.get_or_create(username=f"{prefix}-{n}")
        user.set_unusable_password()
        user.save()
        user.groups.add(group)
        users.append(get_user_model().objects.get(pk=user.pk))
    return users


def login_make(user) -> Login:
    """A logged-in session stored the way ``django.contrib.auth.login`` stores it, plus a CSRF secret.

    The CSRF cookie holds the unmasked secret and the header repeats it, which Django accepts.
    """
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY

    store = import_module(settings.SESSION_ENGINE).SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    csrf = "".join(secrets.choice(alphabet) for _ in range(32))
    return Login(username=user.get_username(), user_id=user.pk, sessionid=store.session_key, csrftoken=csrf)


def machine_info() -> dict[str, Any]:
    import platform

    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {
        "cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "python": platform.python_version(), "platform": platform.platform(),
        "load_at_start": list(os.getloadavg()),
    }
