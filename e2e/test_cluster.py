"""The race with real browsers on two servers: two daphne processes, one PostgreSQL, one Redis.

alice's browser talks to server 1 and bob's to server 2; each also keeps a second tab
on the item open on the *other* server. They click on the same item at the same
instant (the presence line that ``race`` waits for has itself crossed servers). The
loser's answer page names the winner, and the loser's other tab, served by the other
process, is told live through Redis.

The database is a fresh PostgreSQL database for the module (dropped after) and the
channel-layer prefix is the run's own; a missing PostgreSQL or Redis fails in CI and
skips elsewhere (``moderation.tests.cluster_support``).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import statistics
import time

import pytest
import pytest_asyncio
from playwright.async_api import expect

from e2e.conftest import ARTIFACTS, Crowd
from e2e.pages import LIVE_TIMEOUT_MS, Submission, item_path, item_ready, race
from e2e.server import LiveServer
from moderation.tests.cluster_support import channel_prefix, cluster_env, fresh_database, services_require

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.cluster, pytest.mark.timeout(300)]

ROUNDS = 10
WANTS = ({"alice": "approve", "bob": "reject"}, {"alice": "reject", "bob": "approve"})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory):
    admin_url, redis_url = services_require()
    with fresh_database(admin_url, "e2e") as database_url:
        env = cluster_env(redis_url=redis_url, prefix=channel_prefix("e2e"))
        one, two = (
            LiveServer(tmp_path_factory.mktemp(f"e2e-cluster-{n}"), database_url=database_url, extra_env=env) for n in (1, 2)
        )
        try:
            began = time.monotonic()
            await asyncio.to_thread(one.prepare)  # migrate (checkpointer set-up included) + users, once
            await asyncio.gather(one.astart(), two.astart(), one.atool("ping"))
            print(f"\ne2e cluster: fresh database migrated and two servers up in {time.monotonic() - began:.1f} s")
            yield one, two
        finally:
            await asyncio.gather(one.aclose(), two.aclose())


@pytest.fixture(scope="module")
def server(cluster):
    """Server 1; e2e.conftest's ``crowd`` logs its users in here."""
    return cluster[0]


@pytest_asyncio.fixture(loop_scope="module")
async def crowd2(browser, cluster, request):
    """Users whose browser talks to server 2; screenshots on failure like ``crowd``."""
    people = Crowd(browser, cluster[1])
    try:
        yield people
    finally:
        if any(getattr(getattr(request.node, f"rep_{w}", None), "failed", False) for w in ("setup", "call")):
            target = ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name) / "server2"
            shutil.rmtree(target, ignore_errors=True)
            shots = await people.screenshots(target)
            (target / "server2.log").write_text(cluster[1].log_tail(400) + "\n")
            print(f"\ne2e: server 2: {len(shots)} screenshot(s) and its log in {target}/")
        await people.close()


def _describe(subs: list[Submission]) -> str:
    return "; ".join(f"{s.user} asked {s.requested} -> HTTP {s.http_status} {s.kind}: {s.text!r}" for s in subs)


async def test_two_servers_race_in_browsers(cluster, crowd, crowd2):
    one, two = cluster
    items = await one.items_create(ROUNDS, "Cluster race")
    alice_main, bob_main = await asyncio.gather(crowd.login("alice"), crowd2.login("bob"))
    # The same logins (sessions live in the database) on the other server.
    alice_watch, bob_watch = await asyncio.gather(crowd.page("alice"), crowd2.page("bob"))
    decide_on = {"alice": one.url, "bob": two.url}
    watch_on = {"alice": two.url, "bob": one.url}
    watch = {"alice": alice_watch, "bob": bob_watch}

    began = time.monotonic()
    winners: dict[str, tuple[str, str]] = {}
    told_after: list[float] = []
    for n, item in enumerate(items):
        path = item_path(item["id"])
        await asyncio.gather(
            alice_main.goto(decide_on["alice"] + path),
            bob_main.goto(decide_on["bob"] + path),
            alice_watch.goto(watch_on["alice"] + path),
            bob_watch.goto(watch_on["bob"] + path),
        )
        await asyncio.gather(item_ready(alice_watch, ["bob"]), item_ready(bob_watch, ["alice"]))
        subs = await race([(alice_main, "alice", WANTS[n % 2]["alice"]), (bob_main, "bob", WANTS[n % 2]["bob"])])

        row = (await one.arows([item["id"]]))[item["id"]]
        assert row.status in ("approved", "rejected"), f"round {n}: item still {row.status}; {_describe(subs)}"
        won = [s for s in subs if s.won]
        lost = [s for s in subs if s.kind == "lost"]
        assert len(won) == 1 and len(lost) == 1, f"round {n}: {_describe(subs)}"
        assert won[0].user == row.winner, f"round {n}: database says {row.winner}; {_describe(subs)}"
        assert won[0].text == f"You {row.status} “{item['title']}”.", _describe(subs)
        assert lost[0].http_status == 409, _describe(subs)
        assert f"Already reviewed by {row.winner} ({row.status}, " in lost[0].text, _describe(subs)

        # The loser's other tab is on the other server: told live, through Redis.
        loser = lost[0].user
        notice = watch[loser].locator("#lost-live-notice")
        await expect(notice).to_contain_text(f"was not applied: {row.winner} {row.status} it first", timeout=LIVE_TIMEOUT_MS)
        told_at = await watch[loser].evaluate("() => window.__e2e.lostLiveAt || 0")
        if told_at and lost[0].clicked_at:
            told_after.append(told_at - lost[0].clicked_at)
        winner_tab = watch[row.winner]
        await expect(winner_tab.locator("#decided-banner")).to_contain_text(f"{row.winner} {row.status} this item")
        await expect(winner_tab.locator("#lost-live-notice")).to_have_count(0)
        winners[item["id"]] = (row.status, row.winner)

    state = await one.state(list(winners))
    for item_id, (status, winner) in winners.items():
        item = state[item_id]
        assert (item["status"], item["winner"]) == (status, winner), item
        assert item["won_attempts"] == [winner], f"{item['title']}: {item}"
        assert [lost["told_winner"] for lost in item["lost_attempts"]] == [winner], item
        assert item["resume_count"] == 1 and not item["graph_paused"], item
    tally = {name: sum(1 for _, w in winners.values() if w == name) for name in ("alice", "bob")}
    print(
        f"\nbrowser cluster race: {ROUNDS} items, wins {tally}; loser's other-server tab told "
        + (
            f"median {statistics.median(told_after):.0f} ms, max {max(told_after):.0f} ms after the loser's click"
            if told_after
            else "(no timings)"
        )
        + f"; {(time.monotonic() - began) / ROUNDS:.1f} s per round"
    )
