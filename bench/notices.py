"""19. The loser's other tab: from the winner's click to the notice there, in real browsers.

Two moderators race one item from its page, as ``e2e/test_live.py`` does (``e2e.pages.race``:
both buttons pressed, then released together); each keeps a second tab on the item, on
the other server when there are two (the notice then crosses processes through Redis).
The loser's second tab is told by ``decision.lost``, which ``static/moderation/live.js``
shows only once a read of the item's state confirms the winner it names. Timed in the
browser, from the winner's click to the notice appearing in the loser's second tab: what
a moderator waits, in their other tab, to learn that their decision was not applied. The
servers run as measured elsewhere, with a task worker applying the decisions.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from playwright.async_api import Page, async_playwright

from bench.common import Login, Metric, Servers, browser_launch, browsers_env, log, median, percentile
from e2e.browser import context_new
from e2e.pages import LIVE_TIMEOUT_MS, RECORDER_JS, item_path, item_ready, race

TARGET_MS = 1000
WARM_UP = 1  # the first round pays the pages' first loads


async def _race_round(pages: dict[str, Page], tabs: dict[str, Page], item: str, n: int) -> float | None:
    """One race; the winner's click to the loser's other-tab notice (ms), or None when nobody lost."""
    path = item_path(item)
    await asyncio.gather(*(page.goto(path) for page in [*pages.values(), *tabs.values()]))
    await asyncio.gather(*(item_ready(tab) for tab in tabs.values()))
    users = list(pages)
    wants = ("approve", "reject") if n % 2 else ("reject", "approve")
    subs = await race([(pages[user], user, want) for user, want in zip(users, wants, strict=False)])
    winners = [sub for sub in subs if sub.won]
    losers = [sub for sub in subs if sub.kind == "lost"]
    if len(winners) != 1 or len(losers) != 1 or not winners[0].clicked_at:
        log(f"19. round {n}: no race to time ({[(sub.user, sub.kind) for sub in subs]})")
        return None
    tab = tabs[losers[0].user]
    await tab.locator("#lost-live-notice").wait_for(state="visible", timeout=LIVE_TIMEOUT_MS)
    return await tab.evaluate("() => window.__e2e.lostLiveAt") - winners[0].clicked_at


async def _browsers_run(servers: Servers, logins: list[Login], items: list[str]) -> list[float] | None:
    async with async_playwright() as playwright:
        browser = await browser_launch(playwright, "19")
        if browser is None:
            return None
        try:
            pages, tabs = {}, {}
            for login in logins:
                for where, server in ((pages, servers.live[0]), (tabs, servers.live[-1])):
                    context = await context_new(browser, server.url)
                    await context.add_init_script(RECORDER_JS)
                    await context.add_cookies([{"name": "sessionid", "value": login.sessionid, "url": server.url}])
                    where[login.username] = await context.new_page()
            took = []
            for n, item in enumerate(items):
                ms = await _race_round(pages, tabs, item, n)
                if ms is not None and n >= WARM_UP:
                    took.append(ms)
            return took
        finally:
            await browser.close()


def bench_loser_other_tab(
    *, env: dict[str, str], logdir: Path, count: int, logins: list[Login], rounds: int, process_note: str
) -> list[Metric]:
    from django.db import connections

    from e2e.seed import site_seed

    env = browsers_env(env)
    items = [i["id"] for i in site_seed(items=rounds + WARM_UP, prefix="Other tab", source="bench-other-tab").items]
    connections.close_all()
    log(f"19. 2 moderators race {rounds} items, each with a second tab on the item")
    servers = Servers(count=count, env=env, logdir=logdir / "other-tab")
    try:
        servers.live[0].worker_start(interval=0.05)
        took = asyncio.run(_browsers_run(servers, logins[:2], items))
    finally:
        servers.stop()
    if took is None:
        return []
    log(f"19. the loser's other tab told: p50 {median(took):.0f} ms, p99 {percentile(took, 99):.0f} ms over {len(took)} races")
    return [
        Metric(
            "loser_other_tab_p99",
            f"19. the loser's other tab told, winner's click → notice shown, real browsers, worker mode ({process_note}), p99",
            percentile(took, 99),
            "ms",
            median(took),
            "p50 of the same run",
            target=TARGET_MS,
            check="value",
            op="<=",
            detail={"races": len(took), "max_ms": max(took, default=float("nan"))},
        )
    ]
