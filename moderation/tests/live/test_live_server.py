"""The live dashboard end to end: real daphne processes, real logins, real websockets.

In-memory layer: one process. Redis layer: two processes on one database, and every
event crosses between them (each user's socket is on the process the other user posts
to), which is the set-up presence and the layer have to survive in production.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass

import pytest
from websockets.asyncio.client import ClientConnection, connect

from e2e.server import LiveServer
from moderation.tests.form_session import FormSession
from moderation.tests.real_server import redis_env

TIMEOUT = 30  # for one frame that comes unless something is broken: only a failure waits it out
PASSWORD = "live-test-pw-1"

pytestmark = [pytest.mark.timeout(180)]


@dataclass
class Site:
    """One database and the daphne processes serving it (two when the layer is Redis)."""

    servers: list[LiveServer]
    items: list[str]

    def item(self) -> str:
        return self.items.pop()

    def url(self, n: int) -> str:
        return self.servers[n % len(self.servers)].netloc


# The servers run on a SQLite file of their own in either pass, so the Redis layer's
# tests run once, in the SQLite pass (as test_rights.py and e2e/test_live_trust.py do).
@pytest.fixture(scope="module", params=["memory", "redis"])
def site(request, tmp_path_factory):
    # A race under a loaded machine must end in a winner and a loser, not "busy, try again".
    env = {"DECISION_LOCK_TIMEOUT": "30", "SQLITE_BUSY_TIMEOUT": "30"}
    processes = 1
    if request.param == "redis":
        env.update(redis_env("live"))
        processes = 2
    first = LiveServer(tmp_path_factory.mktemp(f"live-{request.param}"), db_name="live", extra_env=env)
    servers = [first] + [
        LiveServer(tmp_path_factory.mktemp(f"live-{request.param}"), database_url=first.database_url, extra_env=env)
        for _ in range(processes - 1)
    ]
    site = Site(
        servers=servers, items=first.seed(users=["alice", "bob"], password=PASSWORD, sessions=False, items=6, prefix="Live").items
    )
    try:
        for server in servers:
            server.start()
        yield site
    finally:
        for server in servers:
            server.close()


class Browser(FormSession):
    """A moderator's cookies, got by logging in through the real form."""

    def __init__(self, site: Site, username: str) -> None:
        super().__init__(site.url(0), username, PASSWORD)

    async def watch(self, host: str, item: str) -> Tab:
        """An item page's socket, past its state frame; no client pings, so it really idles."""
        tab = Tab(
            await connect(
                f"ws://{host}/ws/items/{item}/",
                origin=f"http://{host}",
                ping_interval=None,
                open_timeout=30,
                additional_headers={"Cookie": f"sessionid={self.cookie('sessionid')}"},
            )
        )
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
@pytest.mark.parametrize("site", ["redis"], indirect=True)
async def test_idle_socket_through_redis_survives_12_seconds(site, people):
    # Idle for over twice the ~5 s after which redis-py 8 drops channels_redis's connections. It is
    # not the pin's guard: with redis-py 8.1.0 installed it passes too (checked 2026-12-01).
    alice, bob = people["alice"], people["bob"]
    item = site.item()
    bob_tab = await bob.watch(site.url(1), item)
    await asyncio.sleep(12)
    status, _ = await asyncio.to_thread(alice.decide, site.url(0), item, "reject")
    assert status == 200
    assert (await bob_tab.frame("item.decided", item))["winner"] == "alice"
    await bob_tab.ws.close()
