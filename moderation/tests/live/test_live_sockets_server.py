"""The live sockets' limits against a real daphne server (``moderation.live.sockets``).

- Tabs closing while events are broadcast to them (moderators deciding and moving
  straight on): no exception inside the application, and once everyone has left no
  presence row and no group membership is left in the server process.
- One moderator flooding heartbeats from three sockets: the flood is dropped before any
  database work and the sockets are closed (4429); other moderators' page and decision
  latency and the server's memory (RSS of the daphne process) are measured before,
  during and after.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import sqlite3
import statistics
import sys
import time
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from e2e.server import LiveServer
from moderation.live.sockets import CLOSE_RATE_LIMITED, CLOSE_SILENT, CLOSE_TOO_MANY_SOCKETS
from moderation.tests.real_server import Reviewer, progress_wait, redis_env

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(180)]

# The server's memory after a flood must come back to within this of its size before.
RSS_BOUND_MIB = 25


def _ws_url(server: LiveServer, item: str) -> str:
    return f"ws://127.0.0.1:{server.port}/ws/items/{item}/"


async def _tab(server: LiveServer, reviewer: Reviewer, item: str, *, rcvbuf: int | None = None):
    sock = None
    if rcvbuf is not None:
        # A small receive buffer, so a tab that stops reading soon leaves the server with unsent data.
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.port))
    ws = await connect(
        _ws_url(server, item),
        origin=f"http://127.0.0.1:{server.port}",
        additional_headers=reviewer.ws_headers(),
        open_timeout=30,
        ping_interval=None,
        max_queue=None if sock is None else 1,
        close_timeout=2,
        sock=sock,
    )
    assert json.loads(await asyncio.wait_for(ws.recv(), 30))["type"] == "state"
    return ws


def _get(server: LiveServer, path: str, cookie: str | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    try:
        conn.request("GET", path, headers={"Cookie": cookie} if cookie else {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _live(server: LiveServer, staff: Reviewer) -> dict:
    status, body = _get(server, "/healthz", staff.cookie)
    assert status == 200, body
    return json.loads(body)["live"]


def _presence_rows(server: LiveServer) -> int:
    conn = sqlite3.connect(f"file:{server.db_path}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute("SELECT COUNT(*) FROM moderation_presence").fetchone()[0]
    finally:
        conn.close()


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


async def _churn(server: LiveServer, reviewer: Reviewer, item: str, until: float) -> int:
    """Open and close a tab on the item until ``until``: every open and close is broadcast to the item's tabs."""
    cycles = 0
    while time.monotonic() < until:
        await (await _tab(server, reviewer, item)).close()
        cycles += 1
    return cycles


async def test_tabs_closing_mid_broadcast_leave_nothing_behind(tmp_path):
    viewers = [f"viewer{n}" for n in range(10)]
    # 30 handshakes at once on a busy machine can outlast daphne's default 5 s for one; that limit is not under test.
    server = LiveServer(tmp_path / "site", daphne_args=("--websocket_connect_timeout", "60"))
    seeded = await asyncio.to_thread(server.seed, users=["alice", "churner", *viewers], items=4, prefix="Ghost", staff=["alice"])
    await server.astart()
    try:
        alice, churner = (Reviewer(server, name, seeded.sessions[name]) for name in ("alice", "churner"))
        people = [Reviewer(server, name, seeded.sessions[name]) for name in viewers]
        for item in seeded.items:
            tabs = await asyncio.gather(*(_tab(server, person, item) for person in people for _ in range(3)))
            # While presence changes are broadcast to the item's tabs many times a second and the
            # item is decided, all 30 tabs leave at once, as moderators do once an item is decided.
            churning = [asyncio.create_task(_churn(server, churner, item, time.monotonic() + 2)) for _ in range(3)]
            await asyncio.sleep(0.5)
            decided = asyncio.create_task(asyncio.to_thread(alice.decide, item, "approve"))
            await asyncio.gather(*(tab.close() for tab in tabs))
            assert (await decided)[0] == 200
            assert sum(await asyncio.gather(*churning)) > 0

        live, rows = await asyncio.to_thread(
            progress_wait,
            lambda: (_live(server, alice), _presence_rows(server)),
            done=lambda seen: seen == ({"sockets": 0, "group_memberships": 0}, 0),
            stall=30,
            poll=0.2,
        )
        log = server.log_path.read_text(errors="replace")
        assert "Exception inside application" not in log, server.log_tail(80)
        assert (live, rows) == ({"sockets": 0, "group_memberships": 0}, 0), (live, rows)
    finally:
        await server.aclose()


# A moderator's script: sockets on one item sending heartbeats as fast as they can,
# reconnecting a second after each close. Its own process, so its CPU is not the
# measuring client's, at nice 10: it stands for another machine, and on the test's two cores
# at equal priority it took a core from the server it floods (a CI run saw Bob's pages 16x
# slower during the flood, the other test pass on the same cores; frames sent: 69,750).
_FLOOD = """
import asyncio, json, os, sys, time
os.nice(10)
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

url, origin, cookie, seconds, sockets = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
frame = json.dumps({"type": "heartbeat"})
end = time.monotonic() + seconds
result = {"frames": 0, "opened": 0, "codes": [], "lifetimes": []}

async def drain(ws):
    try:
        async for _ in ws:
            pass
    except ConnectionClosed:
        pass

async def flood():
    while time.monotonic() < end:
        ws = await connect(url, origin=origin, additional_headers={"Cookie": cookie}, ping_interval=None, max_queue=None)
        result["opened"] += 1
        opened = time.monotonic()
        reader = asyncio.create_task(drain(ws))
        try:
            while time.monotonic() < end and not reader.done():
                for _ in range(50):
                    await ws.send(frame)
                result["frames"] += 50
                await asyncio.sleep(0)
        except ConnectionClosed:
            pass
        cut_off = reader.done()  # else the flood's time ran out first and this script closes it
        await ws.close()
        await reader
        if not cut_off:
            break
        result["codes"].append(ws.close_code)
        result["lifetimes"].append(round(time.monotonic() - opened, 3))
        if time.monotonic() < end:
            await asyncio.sleep(1.0)

async def main():
    await asyncio.gather(*(flood() for _ in range(sockets)))

asyncio.run(main())
print(json.dumps(result))
"""


def _p50_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 1)


def _bob_works(server: LiveServer, bob: Reviewer, items: list[str], until: float) -> tuple[list[float], list[float]]:
    """Bob reads item pages and decides items until ``until``; (page seconds, decision seconds)."""
    pages, decisions = [], []
    while time.monotonic() < until and items:
        item = items.pop()
        start = time.monotonic()
        status, _ = _get(server, f"/items/{item}/", bob.cookie)
        pages.append(time.monotonic() - start)
        assert status == 200
        start = time.monotonic()
        status, body = bob.decide(item, "reject")
        decisions.append(time.monotonic() - start)
        assert status == 200, body
        time.sleep(0.1)
    return pages, decisions


async def test_a_heartbeat_flood_is_cut_off_without_slowing_others_or_keeping_memory(tmp_path):
    # Bob decides faster than the per-reviewer decision limit allows; that limit is not under test.
    server = LiveServer(tmp_path / "site", extra_env={"DECISION_RATE_LIMIT": "0"})
    seeded = await asyncio.to_thread(server.seed, users=["alice", "bob"], items=150, prefix="Flood", staff=["alice"])
    items = list(seeded.items)
    flooded = items.pop()
    await server.astart()
    try:
        alice, bob = (Reviewer(server, name, seeded.sessions[name]) for name in ("alice", "bob"))
        pid = server.process.pid
        await asyncio.to_thread(_bob_works, server, bob, items, time.monotonic() + 2)  # warm-up
        before_pages, before_decisions = await asyncio.to_thread(_bob_works, server, bob, items, time.monotonic() + 3)
        rss_before = _rss_mib(pid)

        flood_seconds = 6.0
        flood = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _FLOOD,
            _ws_url(server, flooded),
            f"http://127.0.0.1:{server.port}",
            alice.cookie,
            str(flood_seconds),
            "3",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        await asyncio.sleep(0.5)  # the flood is under way
        rss_during = [_rss_mib(pid)]
        working = asyncio.create_task(asyncio.to_thread(_bob_works, server, bob, items, time.monotonic() + flood_seconds - 1))
        while not working.done():
            await asyncio.sleep(0.25)
            rss_during.append(_rss_mib(pid))
        during_pages, during_decisions = await working
        out, err = await asyncio.wait_for(flood.communicate(), 60)
        assert flood.returncode == 0, err.decode()
        flooding = json.loads(out.decode().strip().splitlines()[-1])

        await asyncio.sleep(2)
        after_pages, after_decisions = await asyncio.to_thread(_bob_works, server, bob, items, time.monotonic() + 3)
        rss_after = _rss_mib(pid)
        live = await asyncio.to_thread(_live, server, alice)

        report = {
            "flood": {k: flooding[k] for k in ("frames", "opened")},
            "close codes": sorted(set(flooding["codes"])),
            "longest socket life s": max(flooding["lifetimes"]),
            "page p50 ms before/during/after": [_p50_ms(s) for s in (before_pages, during_pages, after_pages)],
            "decision p50 ms before/during/after": [_p50_ms(s) for s in (before_decisions, during_decisions, after_decisions)],
            "rss MiB before/max during/after": [round(rss_before, 1), round(max(rss_during), 1), round(rss_after, 1)],
        }
        print("\nflood:", json.dumps(report))
        # Every flooding socket was closed by the server for its rate, in the flood's first half
        # (typically within 0.1 s; 1006: the script was still writing when the server dropped the
        # connection, so it missed the close frame).
        assert flooding["frames"] > 3000 and flooding["opened"] >= 6, report
        assert CLOSE_RATE_LIMITED in flooding["codes"] and set(flooding["codes"]) <= {CLOSE_RATE_LIMITED, 1006}, report
        assert max(flooding["lifetimes"]) < flood_seconds / 2, report
        # Others are not starved, against their own times before the flood. The other test pass
        # shares the machine: on a quiet machine the medians barely move (21.6 ms beside 21.7), fresh
        # clones' CI runs with an un-niced flooder saw 8x and 16x. With the limit off
        # (LIVE_FRAME_RATE=0) Bob got one page in the whole flood, a median of seconds.
        for before, during in ((before_pages, during_pages), (before_decisions, during_decisions)):
            assert _p50_ms(during) <= 10 * _p50_ms(before) + 100, report
        assert rss_after <= rss_before + RSS_BOUND_MIB, report
        assert live == {"sockets": 0, "group_memberships": 0}, live
        assert _presence_rows(server) == 0
    finally:
        await server.aclose()


async def test_the_socket_cap_holds_across_two_server_processes(tmp_path):
    env = {**redis_env("cap"), "LIVE_SOCKETS_PER_SESSION": "2"}
    # Two processes on one database (the same file) and one Redis, as in a deployment.
    first, second = LiveServer(tmp_path / "site", extra_env=env), LiveServer(tmp_path / "site", extra_env=env)
    seeded = await asyncio.to_thread(first.seed, users=["alice"], items=1, prefix="Cap")
    await asyncio.gather(first.astart(), second.astart())
    try:
        alice = Reviewer(first, "alice", seeded.sessions["alice"])
        item = seeded.items[0]
        tabs = [await _tab(first, alice, item), await _tab(first, alice, item)]
        refused = await connect(
            _ws_url(second, item),
            origin=f"http://127.0.0.1:{second.port}",
            additional_headers=alice.ws_headers(),
            open_timeout=30,
            ping_interval=None,
        )
        reply = json.loads(await asyncio.wait_for(refused.recv(), 30))
        assert (reply["type"], reply["error"]) == ("error", "too_many_sockets"), reply
        await asyncio.wait_for(refused.wait_closed(), 30)
        assert refused.close_code == CLOSE_TOO_MANY_SOCKETS

        await tabs.pop().close()
        deadline = time.monotonic() + 10  # the release runs after the server has seen the close
        while True:
            try:
                tabs.append(await _tab(second, alice, item))
                break
            except AssertionError:
                assert time.monotonic() < deadline, "the freed place was never given to the other process"
                await asyncio.sleep(0.2)
        for tab in tabs:
            await tab.close()
    finally:
        await asyncio.gather(first.aclose(), second.aclose())


async def _frame_of(ws, kind: str) -> dict:
    """The next frame of this type, past presence and claim chatter."""
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), 60))
        if frame["type"] == kind:
            return frame


async def _refused(server: LiveServer, reviewer: Reviewer, item: str) -> bool:
    ws = await connect(
        _ws_url(server, item),
        origin=f"http://127.0.0.1:{server.port}",
        additional_headers=reviewer.ws_headers(),
        open_timeout=30,
        ping_interval=None,
    )
    frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
    await asyncio.wait_for(ws.wait_closed(), 30)
    return (frame.get("error"), ws.close_code) == ("too_many_sockets", CLOSE_TOO_MANY_SOCKETS)


async def test_silent_sockets_are_closed_and_the_cap_counts_only_open_ones(tmp_path):
    """A login's sockets that stay open but never heartbeat are told and closed by the server (4408);
    their places go with them, and sockets that heartbeat stay open past the same silence."""
    env = {"LIVE_SOCKETS_PER_SESSION": "2", "LIVE_HEARTBEAT_SECONDS": "0.5", "LIVE_SILENT_SECONDS": "2"}
    server = LiveServer(tmp_path / "site", extra_env=env)
    seeded = await asyncio.to_thread(server.seed, users=["alice"], items=1, prefix="Silent")
    await server.astart()
    try:
        alice, item = Reviewer(server, "alice", seeded.sessions["alice"]), seeded.items[0]
        silent = [await _tab(server, alice, item) for _ in range(2)]
        assert await _refused(server, alice, item)
        for ws in silent:  # they never send a frame; the client library still answers the server's pings
            frame = await _frame_of(ws, "error")
            assert frame["error"] == "silent", frame
            await asyncio.wait_for(ws.wait_closed(), 30)
            assert ws.close_code == CLOSE_SILENT

        deadline = time.monotonic() + 30  # the places are released once the server has seen the closes
        talking = []
        while len(talking) < 2:
            try:
                talking.append(await _tab(server, alice, item))
            except AssertionError:
                assert time.monotonic() < deadline, "the silent sockets' places were never freed"
                await asyncio.sleep(0.2)
        assert await _refused(server, alice, item)
        for _ in range(10):  # 5 s of heartbeats, more than twice the silence: still open, still answered
            for ws in talking:
                await ws.send(json.dumps({"type": "heartbeat"}))
                assert (await _frame_of(ws, "state"))["heartbeat_seconds"] == 0.5
            await asyncio.sleep(0.5)
        for ws in talking:
            await ws.close()
    finally:
        await server.aclose()
