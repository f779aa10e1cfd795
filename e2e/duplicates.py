"""The duplicate-reading scenario (issue 15), shared by ``e2e/test_claims.py`` and ``make bench`` (measure 17).

Moderators, each in their own browser page, work through the queue with "next item"
(``n``) and approve each item with ``a``, landing on the next one, until the queue
says "Nothing left to review." An item is read twice when two moderators opened it
within a minute of each other; the rate is over the items opened. Run it once with
claims and once without (``CLAIMS_ENABLED=false``: next item takes the first pending
item whoever reads it) to see what claims spare.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from playwright.async_api import Page, expect
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

ITEM_URL = re.compile(r"/items/([0-9a-f-]{36})/$")
NOTHING_LEFT = "Nothing left to review."
DUPLICATE_WINDOW_S = 60


@dataclass(frozen=True)
class DuplicateReading:
    twice: int  # items two moderators opened within DUPLICATE_WINDOW_S of each other
    opened: int  # distinct items opened

    @property
    def rate(self) -> float:
        return self.twice / self.opened if self.opened else 0.0

    def __str__(self) -> str:
        return f"{self.rate:.0%} ({self.twice} of {self.opened} items opened by two moderators within {DUPLICATE_WINDOW_S} s)"


def item_on(page: Page) -> str | None:
    found = ITEM_URL.search(page.url)
    return found.group(1) if found else None


async def press_and_land(page: Page, key: str, timeout: float = 5_000) -> bool:
    """Press ``key`` and wait for the page it leads to; False if it led nowhere."""
    try:
        async with page.expect_navigation(wait_until="domcontentloaded", timeout=timeout):
            await page.keyboard.press(key)
    except PlaywrightTimeoutError:
        return False
    return True


def duplicate_reading(opened: Sequence[tuple[str, str, float]]) -> DuplicateReading:
    """From (moderator, item, monotonic time opened) records."""
    by_item: dict[str, list[tuple[str, float]]] = {}
    for user, item, at in opened:
        by_item.setdefault(item, []).append((user, at))
    twice = sum(
        1
        for opens in by_item.values()
        if any(u1 != u2 and abs(t1 - t2) <= DUPLICATE_WINDOW_S for u1, t1 in opens for u2, t2 in opens)
    )
    return DuplicateReading(twice=twice, opened=len(by_item))


async def _work_through(page: Page, user: str, opened: list[tuple[str, str, float]], *, most: int) -> None:
    assert await press_and_land(page, "n", timeout=15_000), f"{user}: n on the queue went nowhere"
    for _ in range(most):
        item_id = item_on(page)
        if item_id is None:
            # The queue, empty: its flash says so, unless a live refresh of the queue (another
            # moderator's decision landing) has already replaced the page, which shows no flash.
            await expect(page.get_by_text(NOTHING_LEFT).or_(page.locator("#queue-empty")).first).to_be_visible()
            return
        opened.append((user, item_id, time.monotonic()))
        # An item someone else has just decided has its buttons disabled: a leads nowhere, n moves on.
        # Asked of the page rather than guessed from a short wait: on a loaded machine a decision
        # can take longer than that wait, and its page then landed under the n pressed after it.
        can_approve = await page.locator('.decide-form button[value="approve"]:enabled').count() > 0
        if not can_approve or not await press_and_land(page, "a", timeout=15_000) or item_on(page) == item_id:
            assert await press_and_land(page, "n", timeout=15_000), f"{user}: n on {page.url} went nowhere"
    raise AssertionError(f"{user} never reached an empty queue")


async def duplicate_reading_run(moderators: Sequence[tuple[str, Page]], *, start_path: str, items: int) -> DuplicateReading:
    """Every moderator's page opens ``start_path`` (a queue URL: its filter is the one next item follows),
    then all work through the ``items`` pending there at once, by keyboard."""
    await asyncio.gather(*(page.goto(start_path) for _, page in moderators))
    opened: list[tuple[str, str, float]] = []
    # Each visit to an item either decides it or moves past one someone else decided: 3 per item is ample.
    await asyncio.gather(*(_work_through(page, user, opened, most=items * 3) for user, page in moderators))
    return duplicate_reading(opened)
