"""`make demo`: two headless browsers, alice and bob, race for the same items, live.

Starts a server on a fresh demo database (var/demo/), logs alice and bob in through
the login form, each in their own Chromium, and for each round opens one item in both
and clicks at the same instant: alice approves, bob rejects (swapped every round). It
prints who clicked what, who won (as the database records it), what the loser was told
and how long that took, and after the first round writes a side-by-side screenshot of
both browsers to var/demo/race.png.

Meanwhile anyone can log in as carol at the printed URL and watch the queue: each
item is marked "approved by alice" (or whoever won) and leaves the table live.

    python e2e/demo.py [--host 127.0.0.1] [--port 8001] [--rounds 5] [--wait 10] [--pause 3] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import html
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from playwright.async_api import Page, async_playwright  # noqa: E402

from e2e.browser import PASSWORD, chromium_find, chromium_launch, context_new, login  # noqa: E402
from e2e.pages import RECORDER_JS, Submission, item_path, item_ready, live_wait, race  # noqa: E402
from e2e.server import LiveServer  # noqa: E402

RACERS = ("alice", "bob")
WATCHER = "carol"


def say(text: str = "") -> None:
    print(text, flush=True)


async def racer_open(playwright, server: LiveServer, username: str):
    """One browser (its own Chromium process) logged in as ``username``, with two tabs:
    the one that clicks, and another open on the same item that is only told live."""
    browser = await chromium_launch(playwright)
    context = await context_new(browser, server.url, viewport={"width": 760, "height": 600})
    await context.add_init_script(RECORDER_JS)
    page = await login(context, username)
    return browser, page, await context.new_page()


async def side_by_side(browser, shots: list[tuple[str, str, bytes]], target: Path) -> None:
    """Compose [(name, caption, png)] into one image, left to right, with captions."""
    cells = "".join(
        f"<figure><figcaption><b>{html.escape(name)}</b> · {html.escape(caption)}</figcaption>"
        f"<img src='data:image/png;base64,{base64.b64encode(png).decode()}'></figure>"
        for name, caption, png in shots
    )
    page = await browser.new_page(viewport={"width": 24 + len(shots) * 772, "height": 660})
    await page.set_content(
        "<style>body{margin:0;padding:12px;background:#2b303b;font:15px system-ui,sans-serif;color:#eee;display:flex;gap:12px}"
        "figure{margin:0}figcaption{padding:4px 2px 8px}img{display:block;border:1px solid #555;border-radius:4px;width:760px}</style>"
        + cells
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(target), full_page=True)
    await page.close()


def round_report(n: int, title: str, subs: list[Submission], status: str, winner: str, pushed: dict) -> list[str]:
    first, second = sorted(subs, key=lambda s: s.clicked_at or float("inf"))
    gap = abs(second.clicked_at - first.clicked_at) if first.clicked_at and second.clicked_at else float("nan")
    lines = [
        f"round {n} · “{title}”",
        f"  {first.user} clicked {first.requested}, {second.user} clicked {second.requested} {gap:.1f} ms later",
        f"  winner: {winner} — the database says {status} by {winner}",
    ]
    for sub in subs:
        if sub.won:
            continue
        took = f"{sub.shown_at - sub.clicked_at:.0f} ms after the click" if sub.shown_at and sub.clicked_at else "timing unknown"
        lines.append(f"  {sub.user} was told (HTTP {sub.http_status}, {took}): “{sub.headline}”")
        if pushed.get("text"):
            took = (
                f"{pushed['at'] - sub.clicked_at:.0f} ms after the click"
                if pushed.get("at") and sub.clicked_at
                else "timing unknown"
            )
            lines.append(f"  {sub.user}'s other tab on the item was told live ({took}): “{pushed['text']}”")
        else:
            lines.append(f"  {sub.user}'s other tab on the item was NOT told within 10 s")
    return lines


async def pushed_notice(tab: Page) -> dict:
    """The live loser notice in a tab that did not click: its text and when it appeared."""
    notice = tab.locator("#lost-live-notice")
    try:
        await notice.wait_for(state="visible", timeout=10_000)
    except Exception:  # noqa: BLE001 - reported as not told
        return {}
    return {
        "text": " ".join((await notice.inner_text()).split()),
        "at": await tab.evaluate("() => window.__e2e.lostLiveAt || 0"),
    }


async def main(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    server = LiveServer(out, host=args.host, port=args.port, db_name="demo")
    problems = 0
    say(f"Preparing a fresh demo database in {out} ...")
    server.prepare()
    items = server.tool("items", "--count", str(args.rounds), "--prefix", "Race round", "--source", "the make demo race")
    server.start()
    try:
        say("")
        say(f"  Server: {server.url}/")
        say(f"  Watch live: log in as {WATCHER} / {PASSWORD} and keep the queue page open.")
        say("")
        for left in range(int(args.wait), 0, -1):
            print(f"\r  starting the race in {left:2d} s (Ctrl-C to stop) ", end="", flush=True)
            await asyncio.sleep(1)
        if args.wait:
            print("\r" + " " * 50 + "\r", end="", flush=True)
        async with async_playwright() as playwright:
            say(f"Browsers: two headless {chromium_find(playwright)[1]}")
            (alice_browser, alice, alice_tab), (bob_browser, bob, bob_tab) = await asyncio.gather(
                racer_open(playwright, server, "alice"), racer_open(playwright, server, "bob")
            )
            pages: dict[str, Page] = {"alice": alice, "bob": bob}
            other_tabs: dict[str, Page] = {"alice": alice_tab, "bob": bob_tab}
            wins = {name: 0 for name in RACERS}
            try:
                for n, item in enumerate(items, start=1):
                    path = item_path(item["id"])
                    await asyncio.gather(*(page.goto(path) for page in [*pages.values(), *other_tabs.values()]))
                    await asyncio.gather(*(item_ready(tab) for tab in other_tabs.values()))
                    wants = ("approve", "reject") if n % 2 else ("reject", "approve")
                    subs = await race([(pages[name], name, want) for name, want in zip(RACERS, wants, strict=False)])
                    row = server.rows([item["id"]])[item["id"]]
                    losers = [sub.user for sub in subs if sub.kind == "lost"]
                    pushed = await pushed_notice(other_tabs[losers[0]]) if losers else {}
                    for line in round_report(n, item["title"], subs, row.status, row.winner or "nobody", pushed):
                        say(line)
                    if row.winner in wins:
                        wins[row.winner] += 1
                    won = [sub.user for sub in subs if sub.won]
                    if won != [row.winner] or len(losers) != len(subs) - 1 or not pushed:
                        say(f"  UNEXPECTED: pages say {won} won, the database says {row.winner}")
                        problems += 1
                    if n == 1:
                        await asyncio.gather(*(live_wait(page) for page in pages.values()))
                        shots = []
                        for sub in subs:
                            caption = f"won: {row.status}" if sub.won else f"lost: HTTP {sub.http_status}, told who won"
                            shots.append((sub.user, caption, await pages[sub.user].screenshot()))
                        for name in losers:
                            shots.append((name, "another tab on the item, told live", await other_tabs[name].screenshot()))
                        await side_by_side(alice_browser, shots, out / "race.png")
                        say(f"  side-by-side screenshot: {out / 'race.png'}")
                    say("")
                    if n < len(items):
                        await asyncio.sleep(args.pause)
            finally:
                await asyncio.gather(alice_browser.close(), bob_browser.close())
        say(f"{len(items)} rounds: " + ", ".join(f"{name} won {count}" for name, count in wins.items()))
        if problems:
            say(f"{problems} round(s) did not end with exactly one winner and the loser told; see {server.log_path}")
        if args.keep:
            say(f"Server still running at {server.url}/ — Ctrl-C to stop.")
            while True:
                await asyncio.sleep(3600)
    finally:
        server.close()
    return 1 if problems else 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--wait", type=float, default=0, help="seconds to wait before the first round (time to log in as carol)")
    parser.add_argument("--pause", type=float, default=3, help="seconds between rounds, so a watcher sees each item go")
    parser.add_argument("--out", default=str(ROOT / "var" / "demo"), help="database, server log and race.png go here")
    parser.add_argument("--keep", action="store_true", help="keep the server running after the last round")
    return parser.parse_args(argv)


if __name__ == "__main__":
    try:
        code = asyncio.run(main(parse()))
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)
