"""Shared pieces: progress on stderr, percentiles, metrics, daphne servers, sessions."""

from __future__ import annotations

import math
import os
import secrets
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from e2e.server import LiveServer

ROOT = Path(__file__).resolve().parents[1]
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


def rss_kib(pid: int) -> int:
    """Resident set size of a process, from /proc (KiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


class Servers:
    """``count`` servers (``e2e.server.LiveServer``) on the bench's database, layer and settings
    (several need the Redis layer), and the task worker the API bench uses."""

    def __init__(
        self, *, count: int, env: dict[str, str], logdir: Path, name: str = "server", health_path: str = "/accounts/login/"
    ) -> None:
        self.live = [
            # -v 0: no access log (a proxy keeps it in production); the floor pays the same.
            LiveServer(
                logdir / f"{name}-{n}",
                database_url=env["DATABASE_URL"],
                settings=env["DJANGO_SETTINGS_MODULE"],
                extra_env=env,
                daphne_args=("-v", "0"),
                health_path=health_path,
            )
            for n in range(count)
        ]
        try:
            with ThreadPoolExecutor(count) as pool:
                list(pool.map(LiveServer.start, self.live))
        except BaseException:
            self.stop()
            raise

    @property
    def hosts(self) -> list[str]:
        return [server.netloc for server in self.live]

    def host(self, n: int) -> str:
        return self.hosts[n % len(self.hosts)]

    def rss_kib(self) -> list[int]:
        return [rss_kib(server.process.pid) for server in self.live]

    def stop(self) -> None:
        with ThreadPoolExecutor(len(self.live)) as pool:
            list(pool.map(LiveServer.close, self.live))


# --- real browsers (measures 17 and 18) -----------------------------------------------


def browsers_env(env: dict[str, str]) -> dict[str, str]:
    """The servers' environment for real browsers, whose pages need their scripts (production
    serves them collected, as `make run` does) and, on the bench's plain HTTP, cookies without
    the Secure flag (README, production settings locally). Django must be set up."""
    from django.core.management import call_command

    call_command("collectstatic", interactive=False, verbosity=0)
    return {**env, "SECURE_COOKIES": "false"}


async def browser_launch(playwright: Any, measure: str) -> Any:
    """A headless Chromium, or None (logged: the measure is skipped) where there is none; required when CI=true."""
    from e2e.browser import chromium_find, chromium_launch

    try:
        chromium_find(playwright)
    except FileNotFoundError as exc:
        if os.environ.get("CI", "").lower() == "true":
            raise
        log(f"{measure}. SKIPPED, no browser: {exc}")
        return None
    return await chromium_launch(playwright)


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


def moderators_login(count: int, *, prefix: str = "bench-mod", staff: bool = False) -> tuple[list, list[Login]]:
    """``count`` moderators (``e2e.seed.site_seed``; staff too if ``staff``) and a logged-in session for each,
    plus a CSRF secret.

    The CSRF cookie holds the unmasked secret and the header repeats it, which Django accepts.
    """
    from e2e.seed import site_seed

    names = [f"{prefix}-{n}" for n in range(count)]
    seeded = site_seed(moderators=names, staff=names if staff else (), sessions=True)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    logins = [
        Login(
            username=name,
            user_id=user.pk,
            sessionid=seeded.sessions[name],
            csrftoken="".join(secrets.choice(alphabet) for _ in range(32)),
        )
        for name, user in seeded.users.items()
    ]
    return list(seeded.users.values()), logins


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
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_at_start": list(os.getloadavg()),
    }
