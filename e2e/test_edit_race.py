"""An agent's proposed refund: alice edits it (by keyboard only) while bob approves it, at the same instant."""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from playwright.async_api import Page, expect
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from e2e.conftest import e2e_server_running
from e2e.pages import LIVE_TIMEOUT_MS, Submission, decide_click, decide_prepare, item_path, item_ready, submission_read
from moderation.tests.graphs_support import REFUND_GRAPH, TEST_GRAPHS_ENV

pytestmark = pytest.mark.asyncio(loop_scope="module")

ROUNDS = 4
AMOUNT = "decide-form-action-0-arg-amount"
MAX_TABS = 30


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(e2e_template, tmp_path_factory):
    """The usual server, which also runs the test graphs (its dbtool too)."""
    async with e2e_server_running(e2e_template, tmp_path_factory.mktemp("e2e-edit-race"), env=TEST_GRAPHS_ENV) as live:
        yield live


async def _tab_to_amount(page: Page) -> list[str]:
    """Tab from the top of the page to the amount input; returns the labels of the inputs passed on the way."""
    await page.locator("body").focus()
    passed = []
    for _ in range(MAX_TABS):
        await page.keyboard.press("Tab")
        focused = await page.evaluate(
            "() => { const el = document.activeElement;"
            " return {id: el.id, label: el.labels && el.labels.length ? el.labels[0].textContent.trim() : '',"
            " outline: getComputedStyle(el).outlineStyle}; }"
        )
        if focused["id"].startswith("decide-form-action-0-arg-"):
            assert focused["label"], f"{focused['id']} has no label"
            assert focused["outline"] != "none", f"{focused['id']} shows no focus"
            passed.append(focused["label"])
        if focused["id"] == AMOUNT:
            return passed
    raise AssertionError(f"{MAX_TABS} Tabs never reached the amount input; passed {passed}")


async def _press_enter(page: Page, user: str) -> Submission:
    try:
        async with page.expect_response(lambda r: r.request.method == "POST", timeout=LIVE_TIMEOUT_MS) as info:
            await page.keyboard.press("Enter")
        response = await info.value
    except PlaywrightTimeoutError:
        return Submission(user=user, requested="edit", kind="blocked", text="Enter sent nothing")
    return await submission_read(page, Submission(user=user, requested="edit", http_status=response.status))


async def test_alice_edits_bob_approves_same_instant(server, crowd):
    items = await server.atool("items", "--count", str(ROUNDS), "--prefix", "Refund", "--graph", REFUND_GRAPH)
    alice, bob = await asyncio.gather(crowd.login("alice"), crowd.login("bob"))
    outcomes = []
    for item in items:
        await asyncio.gather(alice.goto(item_path(item["id"])), bob.goto(item_path(item["id"])))
        await asyncio.gather(item_ready(alice, ["bob"]), item_ready(bob, ["alice"]))

        assert await _tab_to_amount(alice) == ["Order *", "Amount *"]  # focus follows the form; * marks required
        await alice.keyboard.press("Control+A")
        await alice.keyboard.type("80")
        await expect(alice.locator(f"#{AMOUNT}")).to_have_value("80")
        await decide_prepare(bob, "approve")
        edit, approve = await asyncio.gather(_press_enter(alice, "alice"), decide_click(bob, "bob", "approve"))

        subs = f"alice: {edit}; bob: {approve}"
        assert sorted((edit.kind, approve.kind)) == ["lost", "won"], subs
        state = (await server.state([item["id"]]))[item["id"]]
        assert state["won_attempts"] == [state["winner"]] and len(state["lost_attempts"]) == 1, state
        assert state["resume_count"] == 1 and not state["forks"], state
        winner, loser = (edit, approve) if edit.won else (approve, edit)
        assert winner.user == state["winner"] and loser.http_status == 409, subs
        if edit.won:
            assert state["status"] == "edited", state
            assert winner.text == f"You edited “{item['title']}”.", subs
            assert "alice edited refund (amount 120 → 80) first" in loser.text, subs
            assert state["applied_result"]["result"]["args"] == [{"order_id": "A-1001", "amount": 80, "currency": "EUR"}], state
        else:
            assert state["status"] == "approved", state
            assert "bob approved this item first" in loser.text, subs
            # Alice's edit, not recorded, is still in her form to look at.
        outcomes.append(state["winner"])
    print(f"winners over {ROUNDS} rounds: {outcomes}")
