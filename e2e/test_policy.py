"""The browser policy: every page works under the strict Content-Security-Policy.

The ``crowd`` fixture fails any test whose pages report a CSP violation; this module
visits every kind of page (login, queue, item, decided item, 409 page, viewer, race
lab, admin) and first shows that the watch does catch a violation.
"""

from __future__ import annotations

import asyncio

import pytest
from playwright.async_api import expect

from e2e.pages import LIVE_TIMEOUT_MS, item_path, item_ready, live_wait, race

pytestmark = pytest.mark.asyncio(loop_scope="module")

INLINE_SCRIPT_JS = """() => {
    const script = document.createElement('script');
    script.textContent = 'window.inlineRan = true';
    document.head.append(script);
    return !!window.inlineRan;
}"""


async def _violations(crowd, count: int) -> list[str]:
    for _ in range(50):
        if len(crowd.csp_violations) >= count:
            break
        await asyncio.sleep(0.1)
    return list(crowd.csp_violations)


async def test_the_watch_sees_a_blocked_inline_script(server, crowd):
    page = await crowd.anonymous()
    await page.goto("/accounts/login/")
    assert await page.evaluate(INLINE_SCRIPT_JS) is False  # the policy blocked it
    [violation] = await _violations(crowd, 1)
    assert "script-src" in violation
    crowd.csp_violations.clear()  # seen on purpose; the test passes


async def test_moderator_pages_work_under_the_policy(server, crowd):
    first, second = await server.items_create(2, "Policy")
    alice, bob = await asyncio.gather(crowd.login("alice"), crowd.login("bob"))
    await live_wait(alice)  # the queue's socket: connect-src 'self' covers ws://
    await asyncio.gather(alice.goto(item_path(first["id"])), bob.goto(item_path(first["id"])))
    await alice.fill("textarea[name=note]", "looked at it")
    subs = await race([(alice, "alice", "approve"), (bob, "bob", "reject")])
    assert sorted(s.kind for s in subs) == ["lost", "won"], subs  # the success page and the 409 page
    await bob.goto(item_path(second["id"]))
    await item_ready(bob)
    await expect(bob.locator("#presence")).to_be_hidden()
    assert crowd.csp_violations == []


async def test_viewer_staff_lab_and_admin_pages_work_under_the_policy(server, crowd):
    [item] = await server.items_create(1, "Policy staff")
    dave = await crowd.login("dave")
    await dave.goto(item_path(item["id"]))
    await expect(dave.locator("#review")).to_contain_text("not a moderator")
    erin = await crowd.login("erin", next_path="/lab/")
    await expect(erin.locator("#lab-run-button")).to_be_enabled()
    await live_wait(erin)
    for path in ("/admin/", "/admin/moderation/queueitem/", "/admin/moderation/decisionattempt/", "/admin/axes/accessattempt/"):
        response = await erin.goto(path)
        assert response.status == 200, path
    await erin.goto("/admin/moderation/queueitem/")
    await erin.locator("#changelist a").first.click()  # an item's change form, with the admin's own scripts
    await expect(erin.locator("#content h1, #content h2").first).to_be_visible(timeout=LIVE_TIMEOUT_MS)
    assert crowd.csp_violations == []
