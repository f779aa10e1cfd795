"""Scenario 7: the server process restarts under open pages."""

from __future__ import annotations

import asyncio
import re

import pytest
from playwright.async_api import expect

from e2e.pages import item_path, item_ready, live_wait, page_mark, page_same

pytestmark = pytest.mark.asyncio(loop_scope="module")

# live.js retries with capped exponential backoff (0.5 s doubling, jittered); a restart
# taking several seconds can leave a page waiting one long backoff step before it is back.
BACK_LIVE_MS = 40_000


async def test_reconnect_after_server_restart(server, crowd):
    decided_meanwhile, still_pending = await server.items_create(2, "Reconnect")
    alice_queue = await crowd.login("alice")
    bob_item = await crowd.login("bob")
    await bob_item.goto(item_path(decided_meanwhile["id"]))
    await asyncio.gather(live_wait(alice_queue), item_ready(bob_item))
    for item in (decided_meanwhile, still_pending):
        await expect(alice_queue.locator(f"tr[data-item='{item['id']}']")).to_have_count(1)
    pending_before = int(await alice_queue.locator("#count-pending").inner_text())
    tokens = [await page_mark(page) for page in (alice_queue, bob_item)]

    await server.astop()
    for page in (alice_queue, bob_item):
        await expect(page.locator("#live-status")).to_have_attribute("data-state", "reconnecting")
        # Said in words, not only by the dot's colour.
        await expect(page.get_by_role("status").filter(has_text="Reconnecting")).to_have_text(
            "Reconnecting… — what you see may be out of date"
        )
    # While the server is down, carol decides through the guard itself (as another
    # server process would): no live event can reach these pages, they must catch up.
    outcome = await server.atool("decide", decided_meanwhile["id"], "--user", "carol", "--decision", "reject")
    assert outcome["won"], outcome
    await server.astart()

    for page in (alice_queue, bob_item):
        await live_wait(page, timeout=BACK_LIVE_MS)
        await expect(page.locator("#live-status")).to_have_text("Live")
    await expect(bob_item.locator("#decided-banner")).to_have_text(re.compile(r"^carol rejected this item \d+ (s|min) ago$"))
    for decision in ("approve", "reject"):
        await expect(bob_item.locator(f"#decide-form button[value={decision}]")).to_be_disabled()
    await expect(alice_queue.locator(f"tr[data-item='{decided_meanwhile['id']}']")).to_have_count(0)
    await expect(alice_queue.locator(f"tr[data-item='{still_pending['id']}']")).to_have_count(1)
    await expect(alice_queue.locator("#count-pending")).to_have_text(str(pending_before - 1))
    for page, token in zip((alice_queue, bob_item), tokens, strict=False):
        assert await page_same(page, token), f"{page.url} was reloaded; it must catch up live"

    # And the restarted server is fully usable from the same, never reloaded, pages.
    await alice_queue.locator(f"tr[data-item='{still_pending['id']}'] a").click()
    await item_ready(alice_queue)
    async with alice_queue.expect_navigation():
        await alice_queue.click("#decide-form button[value=approve]")
    await expect(alice_queue.locator(".notice-success")).to_have_text(f"You approved “{still_pending['title']}”.")
