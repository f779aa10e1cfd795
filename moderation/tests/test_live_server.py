"""The live dashboard end to end: real daphne processes, real logins, real websockets.

In-memory layer: one process. Redis layer: two processes on one database, and every
event crosses between them (each user's socket is on the process the other user posts
to), which is the set-up presence and the layer have to survive in production.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from websockets.asyncio.client import ClientConnection, connect

from moderation.tests.form_session import FormSession

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TIMEOUT = 5
PASSWORD = "live-test-pw-1"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
_SEED = f"""
import json
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from moderation.items import item_create
from moderation.permissions import MODERATORS_GROUP
call_command("migrate", verbosity=0, interactive=False)
for name in ("alice", "bob"):
    get_user_model().objects.create_user(name, password={PASSWORD!r}).groups.add(Group.objects.get(name=MODERATORS_GROUP))
print(json.dumps([str(item_create(title=f"Live {{n}}", body="Nothing to see.", source="live").public_id) for n in range(6)]))
"""

pytestmark = [pytest.mark.timeout(180)]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _reachable(url: str) -> bool:
    parsed = urllib.parse.urlsplit(url)
    try:
        socket.create_connection((parsed.hostname, parsed.port or 6379), timeout=2).close()
    except OSError:
        return False
    return True


@dataclass
class Site:
    """One database and the daphne processes serving it (two when the layer is Redis)."""

    urls: list[str]
    items: list[str]
    procs: list[subprocess.Popen] = field(default_factory=list)

    def item(self) -> str:
        return self.items.pop()

    def url(self, n: int) -> str:
        return self.urls[n % len(self.urls)]


def _daphne(env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "reviewqueue.asgi:application"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"daphne exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    pytest.fail(f"daphne did not listen within 60 s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module", params=["memory", pytest.param("redis", marks=pytest.mark.postgres_variant)])
def site(request, tmp_path_factory):
    workdir = tmp_path_factory.mktemp(f"live-{request.param}")
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL", "REVIEWQUEUE_BACKEND_PASS")}
    env.update(
        DATABASE_URL=f"sqlite:///{workdir / 'live.sqlite3'}", REVIEWQUEUE_VAR_DIR=str(workdir),
        DJANGO_SETTINGS_MODULE="reviewqueue.settings", DEBUG="true", PYTHONUNBUFFERED="1",
        # A race under a loaded machine must end in a winner and a loser, not "busy, try again".
        DECISION_LOCK_TIMEOUT="30", SQLITE_BUSY_TIMEOUT="30",
    )
    processes = 1
    if request.param == "redis":
        redis_url = os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
        if not _reachable(redis_url):
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"Redis is required in CI but not reachable at {redis_url}")
            pytest.skip(f"Redis not reachable at {redis_url}")
        env["REDIS_URL"] = redis_url
        processes = 2
    seeded = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", _SEED], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert seeded.returncode == 0, seeded.stderr
    site = Site(urls=[], items=json.loads(seeded.stdout.strip().splitlines()[-1]))
    try:
        for n in range(processes):
            proc, url = _daphne(env, workdir / f"daphne-{n}.log")
            site.procs.append(proc)
            site.urls.append(url)
        yield site
    finally:
        for proc in site.procs:
            proc.terminate()
        for proc in site.procs:
            try:
                # With the Redis layer daphne can take 10 s to stop; nothing here needs it graceful.
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class Browser(FormSession):
    """A moderator's cookies, got by logging in through the real form."""

    def __init__(self, site: Site, username: str) -> None:
        super().__init__(site.url(0), username, PASSWORD)

    async def watch(self, host: str, item: str) -> Tab:
        """An item page's socket, past its state frame; no client pings, so it really idles."""
        tab = Tab(await connect(
            f"ws://{host}/ws/items/{item}/", origin=f"http://{host}", ping_interval=None, open_timeout=30,
            additional_headers={"Cookie": f"sessionid={self.cookie('sessionid')}"},
        ))
        assert (await tab.frame("state", item))["item"]["status"] == "pending"
        return tab


class Tab:
    """An open socket and the frames it has received but no test has looked at yet."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.unread: list[dict] = []

    async def frame(self, kind: str, item: str, *, timeout: float = TIMEOUT, where=lambda frame: True) -> dict:
        """The first frame of this type about this item (a shared Redis may carry other sites' events)."""
        deadline = time.monotonic() + timeout
        while True:
            for frame in self.unread:
                about = frame.get("item")
                if frame["type"] == kind and (about.get("item") if isinstance(about, dict) else about) == item and where(frame):
                    self.unread.remove(frame)
                    return frame
            self.unread.append(json.loads(await asyncio.wait_for(self.ws.recv(), max(0.01, deadline - time.monotonic()))))

    async def no_frame(self, kind: str, item: str, *, within: float = 1.0) -> None:
        with pytest.raises(TimeoutError):
            await self.frame(kind, item, timeout=within)

    async def viewers_become(self, item: str, viewers: list[str]) -> None:
        """Presence frames arrive for every join and leave; wait for the one that says this."""
        await self.frame("presence.changed", item, where=lambda frame: frame["viewers"] == viewers)


@pytest.fixture(scope="module")
def people(site):
    return {name: Browser(site, name) for name in ("alice", "bob")}


@pytest.mark.asyncio
async def test_bob_sees_alices_decision_and_presence_live(site, people):
    alice, bob = people["alice"], people["bob"]
    item = site.item()
    bob_tab = await bob.watch(site.url(0), item)
    alice_tab = await alice.watch(site.url(1), item)
    await bob_tab.viewers_become(item, ["alice", "bob"])

    status, body = await asyncio.to_thread(alice.decide, site.url(0), item, "approve")
    assert status == 200 and body["outcome"] == "won"

    decided = await bob_tab.frame("item.decided", item)
    assert (decided["winner"], decided["status"]) == ("alice", "approved")
    await alice_tab.ws.close()
    await bob_tab.viewers_become(item, ["bob"])
    await bob_tab.ws.close()


@pytest.mark.asyncio
async def test_the_loser_of_a_simultaneous_race_is_told_live(site, people):
    alice, bob = people["alice"], people["bob"]
    item = site.item()
    tabs = {"alice": await alice.watch(site.url(1), item), "bob": await bob.watch(site.url(0), item)}
    start = threading.Barrier(2)

    def post(browser, host, decision):
        start.wait(timeout=10)
        return browser.decide(host, item, decision)

    (a_status, a_body), (b_status, b_body) = await asyncio.gather(
        asyncio.to_thread(post, alice, site.url(0), "approve"), asyncio.to_thread(post, bob, site.url(1), "reject")
    )
    assert sorted([a_status, b_status]) == [200, 409], (a_body, b_body)
    winner, loser = ("alice", "bob") if a_status == 200 else ("bob", "alice")
    won_as = "approved" if winner == "alice" else "rejected"
    noun = "rejection" if loser == "bob" else "approval"

    notice = await tabs[loser].frame("decision.lost", item)
    assert notice["winner"] == winner
    assert notice["message"] == f"your {noun} of item {notice['title']} was not applied: {winner} {won_as} it first"
    for tab in tabs.values():
        assert (await tab.frame("item.decided", item))["winner"] == winner
    await tabs[winner].no_frame("decision.lost", item)
    for tab in tabs.values():
        await tab.ws.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("site", [pytest.param("redis", marks=pytest.mark.postgres_variant)], indirect=True)
async def test_idle_socket_through_redis_survives_20_seconds(site, people):
    alice, bob = people["alice"], people["bob"]
    item = site.item()
    bob_tab = await bob.watch(site.url(1), item)
    await asyncio.sleep(20)
    status, _ = await asyncio.to_thread(alice.decide, site.url(0), item, "reject")
    assert status == 200
    assert (await bob_tab.frame("item.decided", item))["winner"] == "alice"
    await bob_tab.ws.close()
