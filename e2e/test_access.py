"""Scenario 6: who may see and who may decide."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from playwright.async_api import expect

from e2e.pages import item_path

pytestmark = pytest.mark.asyncio(loop_scope="module")

FORGE_FORM_JS = """async (decision) => {
    const token = document.querySelector('input[name=csrfmiddlewaretoken]').value;
    const body = new URLSearchParams({csrfmiddlewaretoken: token, decision});
    const res = await fetch(location.pathname, {method: 'POST', body, redirect: 'manual'});
    return res.status;
}"""
FORGE_API_JS = """async ([id, decision]) => {
    const token = document.querySelector('input[name=csrfmiddlewaretoken]').value;
    const res = await fetch(`/api/items/${id}/decision`, {
        method: 'POST', headers: {'Content-Type': 'application/json', 'X-CSRFToken': token},
        body: JSON.stringify({decision}),
    });
    return res.status;
}"""


async def _untouched(server, item_id: str) -> None:
    state = (await server.state([item_id]))[item_id]
    assert state["status"] == "pending" and state["winner"] is None, state
    assert state["graph_paused"] and state["resume_count"] == 0, state
    assert state["won_attempts"] == [] and state["lost_attempts"] == [], state


async def test_anonymous_visitor_is_sent_to_login(server, crowd):
    [item] = await server.items_create(1, "Anonymous")
    page = await crowd.anonymous()
    for path in ("/", item_path(item["id"])):
        await page.goto(path)
        await expect(page).to_have_url(re.compile(rf"/accounts/login/\?next={re.escape(quote(path))}$"))
        await expect(page.locator("input[name=username]")).to_be_visible()
        await expect(page.locator("#decide-form")).to_have_count(0)
    # A POST without a session (the login form's CSRF token borrowed) decides nothing either.
    response = await page.request.post(
        f"{server.url}/api/items/{item['id']}/decision",
        data={"decision": "approve"},
        headers={"Content-Type": "application/json"},
        fail_on_status_code=False,
    )
    assert response.status in (401, 403), response.status
    await _untouched(server, item["id"])


async def test_viewer_cannot_decide(server, crowd):
    [item] = await server.items_create(1, "View only")
    dave = await crowd.login("dave")
    await expect(dave.locator("header .who")).to_contain_text("view only")
    await dave.goto(item_path(item["id"]))
    await expect(dave.locator("body")).to_have_attribute("data-item", item["id"])
    await expect(dave.locator("h1")).to_have_text(item["title"])
    await expect(dave.locator("#decide-form")).to_have_count(0)
    await expect(dave.locator("button[value=approve], button[value=reject]")).to_have_count(0)
    await expect(dave.locator("#review")).to_contain_text("you are not a moderator")

    # Forged from dave's own logged-in page, with a valid CSRF token: refused.
    assert await dave.evaluate(FORGE_FORM_JS, "approve") == 403
    assert await dave.evaluate(FORGE_API_JS, [item["id"], "reject"]) == 403
    await _untouched(server, item["id"])
    await dave.reload()
    await expect(dave.locator("#review")).to_be_visible()
    await expect(dave.locator("#decision")).to_have_count(0)
