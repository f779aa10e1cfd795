"""`make screenshots`: the documentation's pictures, taken by a browser from a seeded server.

Starts a server and a task worker on a fresh database under var/screenshots/, gives it
the demo data `make run` gives (``manage.py seed_demo``), logs the demo users in through
the login form in headless Chromium and writes each picture into docs/img/. Nothing in
docs/img/ is taken by hand; run this after changing what a page looks like, and commit
the images with the change.

    .venv/bin/python e2e/screenshots.py [--out docs/img]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from playwright.async_api import Page, async_playwright  # noqa: E402

from e2e.browser import chromium_launch, context_new, login  # noqa: E402
from e2e.pages import live_wait  # noqa: E402
from e2e.server import LiveServer  # noqa: E402

DESKTOP = {"width": 1100, "height": 760}
PHONE = {"width": 390, "height": 844}


async def item_open(page: Page, title: str) -> None:
    """Open the queue's item titled ``title`` and wait until its page is live."""
    await page.goto("/")
    await page.get_by_role("link", name=title).first.click()
    await live_wait(page)


async def shoot(server: LiveServer, out: Path) -> list[Path]:
    taken: list[Path] = []

    async def save(page: Page, name: str, *, full_page: bool = False) -> None:
        path = out / name
        await page.screenshot(path=str(path), full_page=full_page)
        taken.append(path)

    async with async_playwright() as playwright:
        browser = await chromium_launch(playwright)
        try:
            alice = await login(await context_new(browser, server.url, viewport=DESKTOP), "alice")
            await live_wait(alice)
            await save(alice, "queue.png")

            await item_open(alice, "Weekend hiking photos")
            await save(alice, "item.png")

            await item_open(alice, "Refund: broken mug (A-17)")
            await save(alice, "agent-item.png", full_page=True)

            await alice.goto("/")
            await live_wait(alice)
            await alice.keyboard.press("?")
            await alice.wait_for_timeout(300)  # the overlay's fade-in, so the picture is not half-drawn
            await save(alice, "keys.png")

            phone = await login(await context_new(browser, server.url, viewport=PHONE), "bob")
            await live_wait(phone)
            await save(phone, "queue-phone.png")
        finally:
            await browser.close()
    return taken


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args()
    workdir = ROOT / "var" / "screenshots"
    shutil.rmtree(workdir, ignore_errors=True)
    server = LiveServer(workdir)
    try:
        server.manage("migrate", "--no-input", timeout=900)  # minutes on a busy machine
        server.manage("seed_demo", timeout=900)
        server.start(timeout=300)
        server.worker_start()
        args.out.mkdir(parents=True, exist_ok=True)
        for path in asyncio.run(shoot(server, args.out)):
            print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
