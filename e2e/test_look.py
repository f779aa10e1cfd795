"""Issue 15, "Look": the queue at phone width, words instead of symbols."""

from __future__ import annotations

import asyncio

import pytest
from playwright.async_api import expect

from e2e.pages import item_path, item_ready, live_wait

pytestmark = pytest.mark.asyncio(loop_scope="module")

PHONE = {"width": 390, "height": 844}


async def test_the_queue_fits_a_phone_without_sideways_scrolling(server, crowd):
    items = await server.items_create(3, "A rather long title that would not fit beside four other columns")
    alice = await crowd.login("alice")
    await alice.set_viewport_size(PHONE)
    await alice.reload()
    await live_wait(alice)
    assert await alice.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    # Stacked, each row still says what its values are and stays usable.
    row = alice.locator(f"tr[data-item='{items[0]['id']}']")
    # (The column names are CSS-generated: in the cells' accessible names, not their text.)
    await expect(row.get_by_role("cell", name="Risk: 0 low")).to_be_visible()
    await expect(row.get_by_role("cell", name="Source: e2e")).to_be_visible()
    await row.get_by_role("link", name=items[0]["title"]).click()
    await item_ready(alice)
    assert await alice.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]


async def test_markers_are_words_and_risk_has_a_legend(server, crowd):
    [item] = await server.items_create(1, "Looked at")
    alice, bob = await crowd.login("alice"), await crowd.login("bob")
    await bob.goto(item_path(item["id"]))
    await asyncio.gather(live_wait(alice), item_ready(bob))
    row = alice.locator(f"tr[data-item='{item['id']}']")
    await expect(row.locator(".viewing")).to_have_text("viewing: bob")
    await expect(alice.get_by_role("columnheader", name="Review requested")).to_be_visible()
    await expect(alice.locator("#risk-legend")).to_have_text(
        "Risk is the pre-screen's score from 0 to 100: low under 20, medium 20–49, high 50 and over."
    )
