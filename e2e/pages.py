"""Page-level helpers shared by the e2e tests and the demo: the DOM contract in one place."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from playwright.async_api import Page, expect
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

LIVE_TIMEOUT_MS = 10_000

# Installed in every page before its own scripts run. Records, without relying on the
# page's code, what a person would have seen: click times (kept in sessionStorage so
# they survive the form's navigation) and, on queue pages, every row that was marked
# decided live and when it left the table.
RECORDER_JS = r"""
(() => {
  // Every Content-Security-Policy violation goes to the test (see e2e/conftest.py).
  document.addEventListener('securitypolicyviolation', (ev) => {
    if (window.__cspViolation) window.__cspViolation(
      `${ev.violatedDirective} blocked ${ev.blockedURI || 'inline'} at ${ev.sourceFile || location.href}:${ev.lineNumber}`);
  });
  const now = () => performance.timeOrigin + performance.now();
  const rec = window.__e2e = {loadedAt: now(), token: null, decided: {}, removed: {}};
  document.addEventListener('click', (ev) => {
    const button = ev.target && ev.target.closest && ev.target.closest('#decide-form button');
    if (button) sessionStorage.setItem('e2e-click', JSON.stringify({at: now(), decision: button.value}));
  }, true);
  document.addEventListener('DOMContentLoaded', () => {
    if (document.querySelector('#lost-notice, .notice-success')) rec.resultShownAt = now();
  });
  const scan = () => {
    if (!rec.lostLiveAt && document.getElementById('lost-live-notice')) rec.lostLiveAt = now();
    for (const row of document.querySelectorAll('tr[data-item].decided-live')) {
      const id = row.dataset.item;
      const seen = rec.decided[id] || (rec.decided[id] = {at: now(), text: ''});
      const text = row.textContent.replace(/\s+/g, ' ').trim();
      if (text && text !== seen.text) seen.text = seen.text ? seen.text + ' | ' + text : text;
    }
  };
  new MutationObserver((mutations) => {
    for (const m of mutations) {
      for (const node of m.removedNodes) {
        if (node.nodeType === 1) {
          const rows = node.matches('tr[data-item]') ? [node] : node.querySelectorAll('tr[data-item]');
          for (const row of rows) rec.removed[row.dataset.item] = now();
        }
      }
    }
    scan();
  }).observe(document, {subtree: true, childList: true, attributes: true, attributeFilter: ['class'], characterData: true});
})();
"""


def item_path(item_id: str) -> str:
    return f"/items/{item_id}/"


async def page_open(page: Page, path: str) -> Page:
    await page.goto(path)
    return page


async def live_wait(page: Page, state: str = "live", timeout: int = LIVE_TIMEOUT_MS) -> None:
    await expect(page.locator("#live-status")).to_have_attribute("data-state", state, timeout=timeout)


async def page_mark(page: Page) -> str:
    """Tag the current document; page_same() later proves it was never reloaded."""
    token = f"t{time.monotonic_ns()}"
    await page.evaluate("t => { window.__e2e.token = t; }", token)
    return token


async def page_same(page: Page, token: str) -> bool:
    return await page.evaluate("t => !!window.__e2e && window.__e2e.token === t", token)


async def queue_record(page: Page) -> dict:
    return await page.evaluate("() => ({decided: window.__e2e.decided, removed: window.__e2e.removed})")


@dataclass
class Submission:
    """What one reviewer saw after clicking a decision button."""

    user: str
    requested: str
    http_status: int = 0
    # "won", "lost", "error"; "blocked" (the banner disabled the button before the click),
    # "unanswered" (the click fired but no answer came in time), "silent" (an answer page
    # with none of the three notices)
    kind: str = ""
    text: str = ""
    headline: str = ""  # the notice's first, bold line
    clicked_at: float = 0.0  # epoch ms, taken in the page at the click
    shown_at: float = 0.0  # epoch ms, when the answer page was shown
    extra: dict = field(default_factory=dict)

    @property
    def won(self) -> bool:
        return self.kind == "won"


async def decide_prepare(page: Page, decision: str) -> None:
    """Everything before the click: actionability checks, the pointer on the button, pressed.

    Playwright's click() spends several round trips per page (scroll, checks, move,
    press, release); gathered over two pages those drift apart by more than the server
    needs to decide and push the heads-up banner, which would then disable the slower
    reviewer's button. So the button is pressed here, in every page, and only the
    release (which is when the browser fires the click) happens in decide_click.
    """
    await page.evaluate("() => sessionStorage.removeItem('e2e-click')")
    if decision == "reject":  # a reject names a reason wherever REJECT_REASON_REQUIRED is on (make demo)
        await page.locator("#decide-form select[name=reason]").select_option("spam")
    await page.locator(f"#decide-form button[value={decision}]").hover()
    await page.mouse.down()


async def decide_click(page: Page, user: str, decision: str) -> Submission:
    """Release the pressed decision button (a real click) and read the answer page."""
    try:
        async with page.expect_response(lambda r: r.request.method == "POST", timeout=LIVE_TIMEOUT_MS) as info:
            await page.mouse.up()  # the click: the button was pressed by decide_prepare
        response = await info.value
    except PlaywrightTimeoutError:
        banner = page.locator("#decided-banner")
        text = " ".join((await banner.inner_text()).split()) if await banner.count() else "(no banner either)"
        # The recorder notes every click that fired: if this one did, its answer is what is missing.
        fired = await page.evaluate("() => sessionStorage.getItem('e2e-click') !== null")
        return Submission(user=user, requested=decision, kind="unanswered" if fired else "blocked", text=text)
    return await submission_read(page, Submission(user=user, requested=decision, http_status=response.status))


async def submission_read(page: Page, sub: Submission) -> Submission:
    """What the answer page to a decision's POST told its reviewer: won, lost or an error."""
    answer = page.locator(".notice-success, #lost-notice, #error-notice").first
    try:
        await answer.wait_for(state="visible")
    except PlaywrightTimeoutError:
        shown = " ".join((await page.locator("main").inner_text()).split())[:300]
        return Submission(user=sub.user, requested=sub.requested, http_status=sub.http_status, kind="silent", text=shown)
    sub.text = " ".join((await answer.inner_text()).split())
    headline = answer.locator("strong")
    sub.headline = " ".join((await headline.first.inner_text()).split()) if await headline.count() else sub.text
    classes = await answer.get_attribute("class") or ""
    ident = await answer.get_attribute("id") or ""
    sub.kind = "won" if "notice-success" in classes else "lost" if ident == "lost-notice" else "error"
    timing = await page.evaluate(
        "() => ({click: JSON.parse(sessionStorage.getItem('e2e-click') || 'null'), shown: window.__e2e && window.__e2e.resultShownAt})"
    )
    if timing["click"]:
        sub.clicked_at = timing["click"]["at"]
    sub.shown_at = timing["shown"] or 0.0
    return sub


async def item_ready(page: Page, others: list[str] | tuple[str, ...] = ()) -> None:
    """The item page is live and lists ``others`` as also viewing, so its layout has settled."""
    await live_wait(page)
    for name in others:
        await expect(page.locator("#presence")).to_contain_text(name, timeout=LIVE_TIMEOUT_MS)


async def race(entries: list[tuple[Page, str, str]]) -> list[Submission]:
    """[(page, user, decision)] all on the same item page: click together, return each answer."""
    [subs] = await race_many([entries])
    return subs


async def race_many(groups: list[list[tuple[Page, str, str]]]) -> list[list[Submission]]:
    """Several races at once, one item per group: every button pressed, then all released together.

    Waits first until every page is live and shows the others as viewing: a presence
    line appearing between press and release would move the button from under the
    pointer and swallow the click. Every page of every group is pressed before any is
    released, so no page's preparation (scroll, actionability checks) runs between the
    releases and spreads them apart: a release late by more than the server takes to
    decide and push finds its button already disabled by the heads-up banner.
    """

    async def ready(entries):
        users = [user for _, user, _ in entries]
        await asyncio.gather(*(item_ready(page, [u for u in users if u != user]) for page, user, _ in entries))

    await asyncio.gather(*(ready(entries) for entries in groups))
    flat = [entry for entries in groups for entry in entries]
    await asyncio.gather(*(decide_prepare(page, decision) for page, _, decision in flat))
    subs = iter(await asyncio.gather(*(decide_click(page, user, decision) for page, user, decision in flat)))
    return [[next(subs) for _ in entries] for entries in groups]


def status_for(decision: str) -> str:
    return {"approve": "approved", "reject": "rejected"}[decision]
