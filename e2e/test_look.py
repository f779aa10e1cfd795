"""Issue 15, "Look": the queue at phone width, words instead of symbols, an accessibility check."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

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


async def test_the_decision_buttons_are_on_screen_at_phone_width_without_scrolling(server, crowd):
    # The example agent's refund: its arguments, an edit form, a reason and a note come before the buttons.
    [item] = await server.atool("items", "--count", "1", "--prefix", "Refund on a phone", "--graph", "refund_agent")
    alice = await crowd.login("alice")
    await alice.set_viewport_size(PHONE)
    await alice.goto(item_path(item["id"]))
    await item_ready(alice)
    assert await alice.evaluate("document.documentElement.scrollHeight") > PHONE["height"] * 1.5
    assert await alice.evaluate("window.scrollY") == 0
    approve = alice.locator("#decide-form button[value=approve]")
    box = await approve.bounding_box()
    assert box and box["y"] >= 0 and box["y"] + box["height"] <= PHONE["height"], box
    # Nothing lies over it, and the end of the form scrolls clear of it.
    assert await approve.evaluate(
        "b => { const r = b.getBoundingClientRect();"
        " return b.contains(document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2)); }"
    )
    await alice.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
    note = await alice.locator("#decide-form textarea[name=note]").bounding_box()
    bar = await alice.locator("#decide-form .buttons").bounding_box()
    assert note["y"] + note["height"] <= bar["y"], (note, bar)
    assert await alice.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    if AXE_JS.exists():
        assert await _serious_violations(alice) == []
    await alice.evaluate("window.scrollTo(0, 0)")
    await approve.click()
    await expect(alice.locator(".notice-success")).to_contain_text("You approved")


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


# Each chart label's size as drawn: its font size in the SVG's units times the SVG's scale on screen.
LABEL_SIZES_JS = """() => [...document.querySelectorAll('.chart-tick, .chart-label')].map((t) => {
    const svg = t.ownerSVGElement;
    return parseFloat(getComputedStyle(t).fontSize) * svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
})"""


async def test_the_team_page_reads_at_a_glance(server, crowd):
    """Issue 40.9: no key (colour only), labels of about 7 px, charts half the page wide."""
    await asyncio.to_thread(server.manage, "team", "charted", "--add", "alice", "--add", "bob")
    await asyncio.to_thread(server.manage, "team_lead", "alice")
    [item] = await server.atool("items", "--count", "1", "--prefix", "Charted", "--team", "charted")
    assert (await server.atool("decide", item["id"], "--user", "bob", "--decision", "approve"))["won"]
    alice = await crowd.login("alice", next_path="/team/")
    await expect(alice.locator("#f-days")).to_have_value("7")  # a week by default: every day labelled
    keys = alice.locator(".chart-legend")
    await expect(keys).to_have_count(4)
    await expect(keys.nth(0)).to_have_text(re.compile(r"p50\s*p90"))
    await expect(keys.nth(2)).to_have_text(re.compile(r"lost races\s*deadline misses\s*escalations"))
    await expect(keys.nth(3)).to_have_text(re.compile(r"decisions\s*lost races"))
    await expect(alice.locator(".chart").nth(3).locator(".chart-label")).to_have_text(["bob"])
    assert min(await alice.evaluate(LABEL_SIZES_JS)) >= 12
    # Full width: each chart spans the page's content, one a row.
    content = await alice.evaluate(
        "(() => { const m = document.querySelector('main'), s = getComputedStyle(m);"
        " return m.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight); })()"
    )
    for n in range(4):
        box = await alice.locator(".chart-svg").nth(n).bounding_box()
        assert box["width"] >= content - 1, (n, box, content)
    # On a phone the labels stay readable: a chart scrolls in its own box, never the page.
    await alice.set_viewport_size(PHONE)
    await alice.reload()
    assert min(await alice.evaluate(LABEL_SIZES_JS)) >= 12
    assert await alice.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]


# axe-core from npm (`make e2e-axe`); the pages must have no serious or critical violation.
AXE_JS = Path(__file__).resolve().parent.parent / "var" / "npm" / "node_modules" / "axe-core" / "axe.min.js"
AXE_RUN_JS = """async () => (await axe.run(document)).violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.impact} ${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(" ")).join(", ")})`)"""


def _axe_or_skip() -> Path:
    if not AXE_JS.exists():
        message = f"axe-core is not installed ({AXE_JS}); run `make e2e-axe`"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return AXE_JS


async def _serious_violations(page: Page) -> list[str]:
    # Evaluated, not added as a <script>: the page's Content-Security-Policy (script-src
    # 'self') rightly refuses an inline script, and the check must see the page as served.
    await page.evaluate(_axe_or_skip().read_text())
    return await page.evaluate(AXE_RUN_JS)


async def test_the_pages_pass_an_accessibility_check(server, crowd):
    _axe_or_skip()
    decided, pending = await server.items_create(2, "Checked for accessibility")
    assert (await server.atool("decide", decided["id"], "--user", "carol", "--decision", "reject"))["won"]
    login_page = await crowd.anonymous()
    await login_page.goto("/accounts/login/")
    found = {"login": await _serious_violations(login_page)}

    for user in ("alice", "dave"):  # a moderator's pages and a viewer's differ (forms, notes)
        page = await crowd.login(user)
        await live_wait(page)
        found[f"{user} queue"] = await _serious_violations(page)
        for name, path in (
            ("item", item_path(pending["id"])),
            ("decided item", item_path(decided["id"])),
            ("decided", "/decided/"),
        ):
            await page.goto(path)
            await live_wait(page)
            found[f"{user} {name}"] = await _serious_violations(page)
    assert {name: problems for name, problems in found.items() if problems} == {}

    # The check itself works: an image without a text alternative is caught.
    await page.evaluate("document.querySelector('main').append(document.createElement('img'))")
    assert any(problem.startswith("critical image-alt") for problem in await _serious_violations(page))
