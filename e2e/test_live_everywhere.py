"""Issue 15, "Live everywhere": items from another process, "Recently decided", viewers."""

from __future__ import annotations

import asyncio

import pytest
from playwright.async_api import expect

from e2e.pages import live_wait

pytestmark = pytest.mark.asyncio(loop_scope="module")

# The command's event, relayed by the server (moderation.records.relay), then one refresh;
# well short of the queue's 15 s resync, which cannot stand in for it.
ANOTHER_PROCESS_MS = 8_000


async def test_an_item_added_by_a_command_reaches_open_queues_moderator_and_viewer(server, crowd):
    alice, dave = await crowd.login("alice"), await crowd.login("dave")
    await asyncio.gather(live_wait(alice), live_wait(dave))
    await expect(dave.locator("#live-status")).to_have_text("Live")
    await expect(dave.get_by_role("status").filter(has_text="Live")).to_have_count(1)

    # manage.py in its own process: the in-memory channel layer cannot carry its event, the relay does.
    await asyncio.to_thread(server.manage, "item_add", "--title", "Added from the shell", "--body", "hello")
    for page in (alice, dave):
        await expect(page.get_by_role("link", name="Added from the shell")).to_be_visible(timeout=ANOTHER_PROCESS_MS)


async def test_recently_decided_updates_live_for_a_viewer_who_cannot_decide(server, crowd):
    [item] = await server.items_create(1, "Decided while watched")
    alice, dave = await crowd.login("alice"), await crowd.login("dave")
    await asyncio.gather(live_wait(alice), live_wait(dave))
    recent = dave.get_by_role("region", name="Recently decided")
    await expect(recent.get_by_role("link", name=item["title"])).to_have_count(0)

    await alice.get_by_role("link", name=item["title"]).click()
    await live_wait(alice)
    async with alice.expect_navigation():
        await alice.get_by_role("button", name="Approve").first.click()

    await expect(recent.get_by_role("link", name=item["title"])).to_be_visible()
    await expect(recent).to_contain_text("approved by alice")
    await expect(dave.locator(f"tr[data-item='{item['id']}']")).to_have_count(0)
    # Read-only: the viewer's item page follows live but offers nothing to decide.
    await dave.get_by_role("link", name=item["title"]).click()
    await live_wait(dave)
    await expect(dave.get_by_role("button", name="Approve")).to_have_count(0)
