"""Scenarios 3, 4 and 5: what an open page is told without reloading."""

from __future__ import annotations

import asyncio
import re

import pytest
from playwright.async_api import expect

from e2e.pages import (
    LIVE_TIMEOUT_MS,
    item_path,
    item_ready,
    live_wait,
    page_mark,
    page_same,
    race,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Longer than the server needs to push anything after a commit on an idle machine;
# used only to show that something does NOT happen.
QUIET_MS = 1_500


async def test_heads_up_before_clicking(server, crowd):
    [item] = await server.items_create(1, "Heads-up")
    path = item_path(item["id"])
    bob = await crowd.login("bob")
    await bob.goto(path)
    await item_ready(bob)
    token = await page_mark(bob)
    alice = await crowd.login("alice")
    await alice.goto(path)
    await item_ready(alice, ["bob"])
    await item_ready(bob, ["alice"])
    await expect(bob.locator("#decided-banner")).to_have_count(0)

    [sub] = await race([(alice, "alice", "approve")])
    assert sub.won, sub

    banner = bob.locator("#decided-banner")
    await expect(banner).to_contain_text("alice approved this item", timeout=LIVE_TIMEOUT_MS)
    await expect(banner).to_have_text(re.compile(r"^alice approved this item \d+ (s|min) ago$"))
    for decision in ("approve", "reject"):
        await expect(bob.locator(f"#decide-form button[value={decision}]")).to_be_disabled()
    assert await page_same(bob, token), "bob's page was reloaded; the banner must arrive live"
    row = (await server.arows([item["id"]]))[item["id"]]
    assert (row.status, row.winner) == ("approved", "alice")


async def test_loser_other_tab_is_told(server, crowd):
    """The pushed loser notice: the losing reviewer's other tab on the item is told too."""
    [item] = await server.items_create(1, "Other tab")
    path = item_path(item["id"])
    alice, bob = await asyncio.gather(crowd.login("alice"), crowd.login("bob"))
    await asyncio.gather(alice.goto(path), bob.goto(path))
    # Each keeps a second tab on the item; we cannot know beforehand who will lose.
    second = dict(zip(("alice", "bob"), await asyncio.gather(crowd.page("alice", path), crowd.page("bob", path)), strict=False))
    await asyncio.gather(*(item_ready(tab, [other]) for tab, other in ((second["alice"], "bob"), (second["bob"], "alice"))))

    subs = await race([(alice, "alice", "approve"), (bob, "bob", "reject")])
    row = (await server.arows([item["id"]]))[item["id"]]
    [loser] = [s for s in subs if s.kind == "lost"]
    notice = second[loser.user].locator("#lost-live-notice")
    await expect(notice).to_contain_text(f"{row.winner} {row.status} it first", timeout=LIVE_TIMEOUT_MS)
    await expect(notice).to_contain_text("was not applied")
    await expect(second[row.winner].locator("#decided-banner")).to_be_visible()
    await expect(second[row.winner].locator("#lost-live-notice")).to_have_count(0)


async def test_a_race_costs_each_other_tab_one_read_and_the_racing_pages_none(server, crowd):
    """The loser's other tab is sent item.decided and decision.lost (in either order: they come from
    the winner's request and the loser's): one read of the item's state confirms both. The pages
    that sent the decisions are being replaced by their answers and read nothing. (Each event read
    it, on every page, so a race's six reads competed with its decisions and answer pages, and the
    loser's notice waited for the last of them.) Reads are counted until the page moves on: the
    racing pages to their answers, the other tabs to the apply's own item.applied, which first
    re-renders the page (a fetch of it marked ``X-Live-Refresh``) and then reads the item again.
    That fetch, not the item.applied frame, ends the count: the browser may report a frame after
    the reads it caused."""
    [item] = await server.items_create(1, "Read once")
    path = item_path(item["id"])
    users = ("alice", "bob")
    racing = dict(zip(users, await asyncio.gather(*(crowd.login(user) for user in users)), strict=False))
    second = dict(zip(users, await asyncio.gather(*(crowd.page(user) for user in users)), strict=False))
    reads = {(user, kind): 0 for user in users for kind in ("racing", "second")}
    counting = dict.fromkeys(reads, True)
    lost_sent = asyncio.Event()

    def lost_seen(payload) -> None:
        if '"decision.lost"' in str(payload):
            lost_sent.set()

    def refreshed(user: str):
        async def fetched(route) -> None:
            if route.request.headers.get("x-live-refresh"):
                counting[user, "second"] = False
            await route.continue_()

        return fetched

    def counter(user: str, kind: str):
        async def read(route) -> None:
            reads[user, kind] += counting[user, kind]
            # Held until decision.lost has reached a tab, so the read item.decided started is still
            # under way when it does: the case where one read must serve both.
            await asyncio.wait_for(lost_sent.wait(), LIVE_TIMEOUT_MS / 1000)
            await route.continue_()

        return read

    for user in users:
        second[user].on("websocket", lambda ws: ws.on("framereceived", lost_seen))
        await second[user].route(f"**{path}", refreshed(user))
        await second[user].route("**/api/items/*/state", counter(user, "second"))
        await racing[user].route("**/api/items/*/state", counter(user, "racing"))
    await asyncio.gather(*(page.goto(path) for page in [*racing.values(), *second.values()]))
    await asyncio.gather(*(item_ready(tab, [other]) for tab, other in zip(second.values(), reversed(users), strict=False)))
    for user in users:  # from here on, a navigation is the answer to the click
        racing[user].on(
            "framenavigated", lambda frame, user=user: frame.parent_frame or counting.update({(user, "racing"): False})
        )

    subs = await race([(racing["alice"], "alice", "approve"), (racing["bob"], "bob", "reject")])
    [loser] = [s for s in subs if s.kind == "lost"]
    [winner] = [s for s in subs if s.won]
    await expect(second[loser.user].locator("#lost-live-notice")).to_contain_text("was not applied")
    await expect(second[winner.user].locator("#decided-banner")).to_be_visible()
    assert reads == {
        (loser.user, "second"): 1,
        (winner.user, "second"): 1,
        (loser.user, "racing"): 0,
        (winner.user, "racing"): 0,
    }, reads


async def test_slow_reviewer_holds_nothing(server, crowd):
    a, b, c = await server.items_create(3, "Slow reviewer")
    carol = await crowd.login("carol")
    await carol.goto(item_path(b["id"]))
    await item_ready(carol)
    token = await page_mark(carol)

    alice, bob = await asyncio.gather(crowd.login("alice"), crowd.login("bob"))
    await asyncio.gather(alice.goto(item_path(a["id"])), bob.goto(item_path(c["id"])))
    # Both decided while carol sits on B: nothing of hers holds them (B itself is checked below).
    sub_a, sub_c = await asyncio.gather(race([(alice, "alice", "approve")]), race([(bob, "bob", "reject")]))
    assert sub_a[0].won and sub_c[0].won, (sub_a, sub_c)

    rows = await server.arows([a["id"], b["id"], c["id"]])
    assert (rows[a["id"]].status, rows[a["id"]].winner) == ("approved", "alice")
    assert (rows[c["id"]].status, rows[c["id"]].winner) == ("rejected", "bob")
    assert (rows[b["id"]].status, rows[b["id"]].winner) == ("pending", None)
    state = (await server.state([b["id"]]))[b["id"]]
    assert state["graph_paused"] and state["resume_count"] == 0, f"B's graph moved: {state}"
    assert state["won_attempts"] == [] and state["lost_attempts"] == [], state

    # Carol's page, never reloaded, shows nothing wrong.
    await carol.wait_for_timeout(QUIET_MS)
    assert await page_same(carol, token)
    await live_wait(carol)
    for unwanted in ("#decided-banner", "#lost-live-notice", "#lost-notice", "#error-notice"):
        await expect(carol.locator(unwanted)).to_have_count(0)
    for decision in ("approve", "reject"):
        await expect(carol.locator(f"#decide-form button[value={decision}]")).to_be_enabled()

    [sub_b] = await race([(carol, "carol", "approve")])
    assert sub_b.won and sub_b.text == f"You approved “{b['title']}”.", sub_b
    state = (await server.state([b["id"]]))[b["id"]]
    assert (state["status"], state["winner"], state["resume_count"]) == ("approved", "carol", 1), state


async def test_presence(server, crowd):
    [item] = await server.items_create(1, "Presence")
    path = item_path(item["id"])
    bob_queue = await crowd.login("bob")
    await live_wait(bob_queue)
    bob_item = await crowd.page("bob", path)
    await item_ready(bob_item)
    await expect(bob_item.locator("#presence")).to_be_hidden()
    marker = bob_queue.locator(f"tr[data-item='{item['id']}'] .viewing")
    await expect(marker).to_have_count(0)

    alice = await crowd.login("alice")
    alice_item = await crowd.page("alice", path)
    await live_wait(alice_item)
    await expect(bob_item.locator("#presence")).to_have_text("alice is also viewing", timeout=LIVE_TIMEOUT_MS)
    await expect(marker).to_contain_text("alice", timeout=LIVE_TIMEOUT_MS)
    await expect(alice.locator(f"tr[data-item='{item['id']}'] .viewing")).to_contain_text("bob")

    await alice_item.close()
    await expect(bob_item.locator("#presence")).to_be_hidden(timeout=LIVE_TIMEOUT_MS)
    await expect(marker).to_have_count(0, timeout=LIVE_TIMEOUT_MS)
