"""17. The duplicate-reading rate with and without claims, in real browsers on the bench's servers.

The scenario is the e2e test's (``e2e/duplicates.py``): three moderators, each in their
own Chromium context (spread over the servers when there are several, so claims cross
processes), work through the same fresh items with "next item", once on servers with
claims and once on servers started with ``CLAIMS_ENABLED=false``. Each run's items
carry their own source, and the moderators start from the queue filtered on it, since
next item follows the moderator's queue filter and the bench's other pending items must
not be read.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from playwright.async_api import async_playwright

from bench.common import Login, Metric, Servers, browser_launch, browsers_env, log
from e2e.browser import context_new
from e2e.duplicates import DUPLICATE_WINDOW_S, DuplicateReading, duplicate_reading_run

MODERATORS = 3
TARGET_RATIO = 0.5  # claims must at least halve duplicate reading


async def _browsers_run(servers: Servers, logins: list[Login], *, start_path: str, items: int) -> DuplicateReading | None:
    async with async_playwright() as playwright:
        browser = await browser_launch(playwright, "17")
        if browser is None:
            return None
        try:
            moderators = []
            for n, login in enumerate(logins):
                server = servers.live[n % len(servers.live)]
                context = await context_new(browser, server.url)
                await context.add_cookies([{"name": "sessionid", "value": login.sessionid, "url": server.url}])
                moderators.append((login.username, await context.new_page()))
            return await duplicate_reading_run(moderators, start_path=start_path, items=items)
        finally:
            await browser.close()


def _items_decided(ids: list[str]) -> None:
    from moderation.items.models import ItemStatus, QueueItem

    statuses = set(QueueItem.objects.filter(public_id__in=ids).values_list("status", flat=True))
    if statuses != {ItemStatus.APPROVED}:
        raise RuntimeError(f"17. the moderators left items undecided: statuses {statuses}")


def bench_duplicate_reading(
    *, env: dict[str, str], logdir: Path, count: int, logins: list[Login], items: int, process_note: str
) -> list[Metric]:
    from django.db import connections

    from e2e.seed import site_seed

    env = browsers_env(env)
    readings: dict[str, DuplicateReading] = {}
    for label, extra in (("claims", {}), ("no-claims", {"CLAIMS_ENABLED": "false"})):
        source = f"bench-dup-{label}"
        ids = [i["id"] for i in site_seed(items=items, prefix=f"Duplicate {label}", source=source).items]
        connections.close_all()
        log(f"17. {MODERATORS} moderators, {items} items, {label}")
        servers = Servers(count=count, env={**env, **extra}, logdir=logdir / f"duplicates-{label}")
        try:
            reading = asyncio.run(_browsers_run(servers, logins[:MODERATORS], start_path=f"/?source={source}", items=items))
        finally:
            servers.stop()
        if reading is None:
            return []
        _items_decided(ids)
        log(f"17. {label}: {reading}")
        readings[label] = reading
    with_, without = readings["claims"], readings["no-claims"]
    return [
        Metric(
            "duplicate_reading",
            f"17. duplicate reading: items two of {MODERATORS} moderators opened within {DUPLICATE_WINDOW_S} s, "
            f"{items} items by next item, with claims ({process_note})",
            100 * with_.rate,
            "%",
            100 * without.rate,
            "same without claims",
            target=TARGET_RATIO,
            op="<=",
            detail={label: {"twice": r.twice, "opened": r.opened} for label, r in readings.items()},
        )
    ]
