"""Which Chromium to drive, how to launch it, and how a user logs in.

Playwright's own Chromium is used where it is installed; otherwise Debian's
(/usr/bin/chromium). E2E_CHROMIUM names a browser binary explicitly and wins over both.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from playwright.async_api import Browser, BrowserContext, Page, Playwright

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DEBIAN_CHROMIUM = "/usr/bin/chromium"
PASSWORD = "review-demo-2026"  # settings.DEMO_PASSWORD; dbtool sets it for every test user
TIMEOUT_MS = 10_000


def chromium_find(playwright: Playwright) -> tuple[str | None, str]:
    """(executable_path or None for Playwright's own, description); raises if there is none."""
    explicit = os.environ.get("E2E_CHROMIUM", "").strip()
    if explicit:
        if not Path(explicit).exists():
            raise FileNotFoundError(f"E2E_CHROMIUM={explicit} does not exist")
        return explicit, f"E2E_CHROMIUM ({explicit})"
    try:
        own = playwright.chromium.executable_path
    except Exception:  # noqa: BLE001 - Playwright raises when it has no build for this platform
        own = ""
    if own and Path(own).exists():
        return None, f"Playwright's Chromium ({own})"
    for candidate in (DEBIAN_CHROMIUM, shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate, f"system Chromium ({candidate})"
    raise FileNotFoundError(
        "no Chromium: install Debian's (apt-get install -y chromium), Playwright's "
        "(python -m playwright install chromium), or set E2E_CHROMIUM"
    )


async def chromium_launch(playwright: Playwright) -> Browser:
    executable, _ = chromium_find(playwright)
    return await playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)


async def context_new(browser: Browser, base_url: str, *, viewport: dict | None = None) -> BrowserContext:
    context = await browser.new_context(base_url=base_url, viewport=viewport or {"width": 1100, "height": 760})
    context.set_default_timeout(TIMEOUT_MS)
    context.set_default_navigation_timeout(TIMEOUT_MS * 2)
    return context


async def login(context: BrowserContext, username: str, password: str = PASSWORD, *, next_path: str = "") -> Page:
    """Log in through the real login form; return the page, left on the queue (or on ``next_path``)."""
    page = await context.new_page()
    await page.goto(f"/accounts/login/?next={next_path}" if next_path else "/accounts/login/")
    await page.fill("input[name=username]", username)
    await page.fill("input[name=password]", password)
    async with page.expect_navigation():
        await page.click("form[action$='/accounts/login/'] button[type=submit]")
    if "/accounts/login/" in page.url:
        raise AssertionError(f"{username} could not log in: still on {page.url}")
    return page


def _check() -> int:
    """`python e2e/browser.py`: say which Chromium the e2e tests will use; exit 1 if none."""
    import asyncio
    import sys

    from playwright.async_api import async_playwright

    async def find() -> str:
        async with async_playwright() as playwright:
            return chromium_find(playwright)[1]

    try:
        print(f"e2e browser: {asyncio.run(find())}")
    except FileNotFoundError as exc:
        print(f"e2e browser: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(_check())
