"""Claims, "next item" and the keyboard, in real browsers.

- One moderator, keyboard only, through 10 items: the queue with j and Enter, each item
  approved with ``a``, landing on the next one each time, until the queue says so.
- The duplicate-reading rate (issue 15, the scenario in ``e2e/duplicates.py``, which
  ``make bench`` runs as measure 17 on 30 items): three moderators work through 15 items
  with "next item", once with claims and once without. Printed, and the rate with claims
  must be the lower one. Without claims all three land on the first item at once, so
  that rate is never zero.
"""

from __future__ import annotations

import asyncio
import re

import pytest
import pytest_asyncio
from playwright.async_api import expect

from e2e.conftest import Crowd, e2e_server_running
from e2e.duplicates import NOTHING_LEFT, duplicate_reading_run, item_on, press_and_land

pytestmark = pytest.mark.asyncio(loop_scope="module")

MODERATORS = ("alice", "bob", "carol")
ITEMS = 15
NEXT_ON = {"NEXT_ITEM_AFTER_DECISION": "true"}  # off by default in e2e/settings.py


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(e2e_template, tmp_path_factory):
    async with e2e_server_running(e2e_template, tmp_path_factory.mktemp("e2e-claims"), env=NEXT_ON) as live:
        yield live


async def test_keyboard_only_through_ten_items(server, crowd):
    items = await server.items_create(10, "Keys")
    alice = await crowd.login("alice")
    await expect(alice.locator("#queue-table tbody tr")).to_have_count(10)

    await alice.keyboard.press("?")
    help_ = alice.get_by_role("dialog", name="Keyboard shortcuts")
    await expect(help_).to_be_visible()
    await expect(help_).to_contain_text("select the next item")
    await alice.keyboard.press("?")
    await expect(help_).to_be_hidden()

    await alice.keyboard.press("j")
    await alice.keyboard.press("j")
    await alice.keyboard.press("k")
    first = alice.locator("#queue-table tbody tr").first
    await expect(first).to_have_class(re.compile(r"\bselected\b"))
    await expect(first.get_by_role("link")).to_be_focused()
    outline = await alice.evaluate("() => getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none", "the selected row's link shows no focus"
    assert await press_and_land(alice, "Enter")

    # Typing in a field is typing, not a shortcut.
    await alice.locator("textarea[name=note]").first.focus()
    await alice.keyboard.type("a note")
    await expect(alice.locator("textarea[name=note]").first).to_have_value("a note")
    await alice.keyboard.press("Escape")

    seen = []
    for _ in range(10):
        item_id = item_on(alice)
        assert item_id, alice.url
        await expect(alice.locator("#claim")).to_have_text("claimed by you · 5 min left")
        seen.append(item_id)
        assert await press_and_land(alice, "a"), f"a on {alice.url} went nowhere"
        await expect(alice.locator(".notice-success")).to_contain_text("You approved")
    assert sorted(seen) == sorted(i["id"] for i in items)
    assert alice.url.rstrip("/") == server.url.rstrip("/"), alice.url
    await expect(alice.get_by_text(NOTHING_LEFT)).to_be_visible()
    rows = await server.arows(seen)
    assert {(r.status, r.winner) for r in rows.values()} == {("approved", "alice")}


async def test_duplicate_reading_rate_with_and_without_claims(e2e_template, tmp_path_factory, browser):
    readings = {}
    for label, env in (("claims", NEXT_ON), ("no-claims", {**NEXT_ON, "CLAIMS_ENABLED": "false"})):
        async with e2e_server_running(e2e_template, tmp_path_factory.mktemp(f"e2e-{label}"), env=env) as live:
            people = Crowd(browser, live)
            try:
                items = await live.items_create(ITEMS, label)
                pages = await asyncio.gather(*(people.login(user, label=f"{user}-{label}") for user in MODERATORS))
                readings[label] = await duplicate_reading_run(
                    list(zip(MODERATORS, pages, strict=False)), start_path="/", items=ITEMS
                )
                rows = await live.arows([i["id"] for i in items])
                assert {r.status for r in rows.values()} == {"approved"}, "every item was decided"
            finally:
                await people.close()
            assert not people.csp_violations, people.csp_violations
    for label, reading in readings.items():
        print(f"duplicate reading, {len(MODERATORS)} moderators, {ITEMS} items, {label}: {reading}")
    assert readings["claims"].rate < readings["no-claims"].rate, readings
