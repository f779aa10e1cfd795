"""Claims, "next item" and the keyboard, in real browsers.

- One moderator, keyboard only, through 10 items: the queue with j and Enter, each item
  approved with ``a``, landing on the next one each time, until the queue says so.
- The duplicate-reading rate (issue 15): three moderators work through 30 items with
  "next item", once with claims and once without (``CLAIMS_ENABLED=false``: next item
  takes the first pending item whoever reads it). An item is read twice when two
  moderators open it within a minute of each other. Measured, printed, and the rate with
  claims must be the lower one.
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest
import pytest_asyncio
from playwright.async_api import Page, expect
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from e2e.conftest import Crowd, e2e_server_running

pytestmark = pytest.mark.asyncio(loop_scope="module")

ITEM_URL = re.compile(r"/items/([0-9a-f-]{36})/$")
NOTHING_LEFT = "Nothing left to review."
DUPLICATE_WINDOW_S = 60
MODERATORS = ("alice", "bob", "carol")
ITEMS = 30
NEXT_ON = {"NEXT_ITEM_AFTER_DECISION": "true"}  # off by default in e2e/settings.py


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(e2e_template, tmp_path_factory):
    async with e2e_server_running(e2e_template, tmp_path_factory.mktemp("e2e-claims"), env=NEXT_ON) as live:
        yield live


def _item_on(page: Page) -> str | None:
    found = ITEM_URL.search(page.url)
    return found.group(1) if found else None


async def _press_and_land(page: Page, key: str, timeout: float = 5_000) -> bool:
    """Press ``key`` and wait for the page it leads to; False if it led nowhere."""
    try:
        async with page.expect_navigation(wait_until="domcontentloaded", timeout=timeout):
            await page.keyboard.press(key)
    except PlaywrightTimeoutError:
        return False
    return True


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
    assert await _press_and_land(alice, "Enter")

    # Typing in a field is typing, not a shortcut.
    await alice.locator("textarea[name=note]").first.focus()
    await alice.keyboard.type("a note")
    await expect(alice.locator("textarea[name=note]").first).to_have_value("a note")
    await alice.keyboard.press("Escape")

    seen = []
    for _ in range(10):
        item_id = _item_on(alice)
        assert item_id, alice.url
        await expect(alice.locator("#claim")).to_have_text("claimed by you · 5 min left")
        seen.append(item_id)
        assert await _press_and_land(alice, "a"), f"a on {alice.url} went nowhere"
        await expect(alice.locator(".notice-success")).to_contain_text("You approved")
    assert sorted(seen) == sorted(i["id"] for i in items)
    assert alice.url.rstrip("/") == server.url.rstrip("/"), alice.url
    await expect(alice.get_by_text(NOTHING_LEFT)).to_be_visible()
    rows = await server.arows(seen)
    assert {(r.status, r.winner) for r in rows.values()} == {("approved", "alice")}


async def _work_through(page: Page, user: str, opened: list[tuple[str, str, float]]) -> None:
    """Next item, approve, next item... until the queue is empty; records every item opened."""
    landed = await _press_and_land(page, "n")
    assert landed, f"{user}: n on the queue went nowhere"
    for _ in range(ITEMS * 3):
        item_id = _item_on(page)
        if item_id is None:
            await expect(page.get_by_text(NOTHING_LEFT)).to_be_visible()
            return
        opened.append((user, item_id, time.monotonic()))
        # An item someone else has just decided has its buttons disabled: a leads nowhere, n moves on.
        if not await _press_and_land(page, "a", timeout=3_000) or _item_on(page) == item_id:
            assert await _press_and_land(page, "n"), f"{user}: n on {page.url} went nowhere"
    raise AssertionError(f"{user} never reached an empty queue")


def duplicate_rate(opened: list[tuple[str, str, float]]) -> tuple[float, int, int]:
    """(share of opened items that two moderators opened within a minute, such items, items opened)."""
    by_item: dict[str, list[tuple[str, float]]] = {}
    for user, item, at in opened:
        by_item.setdefault(item, []).append((user, at))
    twice = sum(
        1 for opens in by_item.values()
        if any(u1 != u2 and abs(t1 - t2) <= DUPLICATE_WINDOW_S for u1, t1 in opens for u2, t2 in opens)
    )
    return (twice / len(by_item) if by_item else 0.0), twice, len(by_item)


async def _measure(browser_crowd, live, label: str) -> tuple[float, int, int]:
    items = await live.items_create(ITEMS, label)
    pages = await asyncio.gather(*(browser_crowd.login(user, label=f"{user}-{label}") for user in MODERATORS))
    opened: list[tuple[str, str, float]] = []
    await asyncio.gather(*(_work_through(page, user, opened) for page, user in zip(pages, MODERATORS)))
    rows = await live.arows([i["id"] for i in items])
    assert {r.status for r in rows.values()} == {"approved"}, "every item was decided"
    return duplicate_rate(opened)


async def test_duplicate_reading_rate_with_and_without_claims(e2e_template, tmp_path_factory, browser):
    rates = {}
    for label, env in (("claims", NEXT_ON), ("no-claims", {**NEXT_ON, "CLAIMS_ENABLED": "false"})):
        async with e2e_server_running(e2e_template, tmp_path_factory.mktemp(f"e2e-{label}"), env=env) as live:
            people = Crowd(browser, live)
            try:
                rates[label] = await _measure(people, live, label)
            finally:
                await people.close()
            assert not people.csp_violations, people.csp_violations
    for label, (rate, twice, total) in rates.items():
        print(f"duplicate reading, {len(MODERATORS)} moderators, {ITEMS} items, {label}: "
              f"{rate:.0%} ({twice} of {total} items opened by two moderators within {DUPLICATE_WINDOW_S} s)")
    assert rates["claims"][0] < rates["no-claims"][0], rates
