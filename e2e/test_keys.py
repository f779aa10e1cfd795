"""Remappable keys (static/moderation/keys.js), in a real browser.

The `?` overlay lists every action's key with a "change" button; the next key pressed
becomes the action's key, kept in this browser for this user. A key another action
holds, or one that cannot be used, is refused with the reason and changes nothing;
"Reset keys to defaults" restores them. Everything is done from the keyboard.

The server requires a reason for a reject (REJECT_REASON_REQUIRED, as in production), so
that `r` first takes the moderator to the reason.
"""

from __future__ import annotations

import pytest
import pytest_asyncio
from playwright.async_api import Page, expect

from e2e.conftest import e2e_server_running
from e2e.duplicates import press_and_land
from e2e.pages import item_path, item_ready

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(e2e_template, tmp_path_factory):
    async with e2e_server_running(e2e_template, tmp_path_factory.mktemp("e2e-keys"), env={"REJECT_REASON_REQUIRED": "1"}) as live:
        yield live


APPROVE = "Change the key for approve"


def _help(page: Page):
    return page.get_by_role("dialog", name="Keyboard shortcuts")


def _key_shown(page: Page, button: str):
    """The key the open overlay shows on the row of ``button``."""
    return _help(page).get_by_role("row").filter(has=page.get_by_role("button", name=button, exact=True)).locator("kbd")


async def _remap(page: Page, button: str, key: str) -> None:
    """Open the overlay, activate ``button`` by keyboard, and press ``key``."""
    await page.keyboard.press("?")
    await expect(_help(page)).to_be_visible()
    await _help(page).get_by_role("button", name=button, exact=True).focus()
    await page.keyboard.press("Enter")
    await expect(_help(page).get_by_role("status")).to_contain_text("Press the new key for “approve”")
    await page.keyboard.press(key)


async def _still_pending(page: Page, server, item_id: str, key: str) -> None:
    assert not await press_and_land(page, key, timeout=1_500), f"{key} decided {page.url}"
    assert (await server.arows([item_id]))[item_id].status == "pending"


async def test_approve_remapped_decides_with_the_new_key_on_every_page(server, crowd):
    first, second = await server.items_create(2, "Remap")
    alice = await crowd.login("alice", next_path=item_path(first["id"]))

    await _remap(alice, APPROVE, "p")
    await expect(_help(alice).get_by_role("status")).to_have_text("Saved: “approve” is now p.")
    await expect(_key_shown(alice, APPROVE)).to_have_text("p")
    await expect(_help(alice).get_by_role("button", name=APPROVE, exact=True)).to_be_focused()
    await alice.keyboard.press("Escape")
    await expect(_help(alice)).to_be_hidden()

    await _still_pending(alice, server, first["id"], "a")
    assert await press_and_land(alice, "p")
    await expect(alice.locator(".notice-success")).to_contain_text("You approved")

    # Kept in the browser: another page, later, uses it too.
    await alice.goto(item_path(second["id"]))
    await alice.keyboard.press("?")
    await expect(_key_shown(alice, APPROVE)).to_have_text("p")
    await alice.keyboard.press("Escape")
    assert await press_and_land(alice, "p")
    await expect(alice.locator(".notice-success")).to_contain_text("You approved")
    rows = await server.arows([first["id"], second["id"]])
    assert {(r.status, r.winner) for r in rows.values()} == {("approved", "alice")}


async def test_a_taken_or_unusable_key_is_refused_and_changes_nothing(server, crowd):
    (item,) = await server.items_create(1, "Conflict")
    bob = await crowd.login("bob", next_path=item_path(item["id"]))
    status = _help(bob).get_by_role("status")

    await _remap(bob, APPROVE, "r")
    await expect(status).to_have_text(
        "Refused: r is already the key for “reject (first the reason, when one is required)”. "
        "Give that action another key first. Nothing changed."
    )
    await expect(_key_shown(bob, APPROVE)).to_have_text("a")
    await bob.keyboard.press("Escape")

    await _remap(bob, APPROVE, "Tab")
    await expect(status).to_have_text("Refused: Tab cannot be used: it moves between links, fields and buttons. Nothing changed.")
    await bob.keyboard.press("Escape")

    await _remap(bob, APPROVE, "Escape")
    await expect(status).to_have_text("Nothing changed: “approve” stays on a.")
    await expect(_key_shown(bob, APPROVE)).to_have_text("a")
    await bob.keyboard.press("Escape")
    await expect(_help(bob)).to_be_hidden()

    assert await bob.evaluate("() => Object.keys(localStorage).filter((k) => k.startsWith('reviewqueue.keys'))") == []
    assert await press_and_land(bob, "a")
    await expect(bob.locator(".notice-success")).to_contain_text("You approved")


async def test_reset_restores_the_default_keys(server, crowd):
    (item,) = await server.items_create(1, "Reset")
    carol = await crowd.login("carol", next_path=item_path(item["id"]))

    await _remap(carol, APPROVE, "p")
    await expect(_key_shown(carol, APPROVE)).to_have_text("p")
    await _help(carol).get_by_role("button", name="Reset keys to defaults").focus()
    await carol.keyboard.press("Enter")
    await expect(_help(carol).get_by_role("status")).to_have_text("Every key is back to its default.")
    await expect(_key_shown(carol, APPROVE)).to_have_text("a")
    await carol.keyboard.press("Escape")

    await carol.reload()
    await _still_pending(carol, server, item["id"], "p")
    assert await press_and_land(carol, "a")
    await expect(carol.locator(".notice-success")).to_contain_text("You approved")


async def test_r_first_takes_the_moderator_to_the_required_reason_then_rejects(server, crowd):
    (item,) = await server.items_create(1, "Reason first")
    alice = await crowd.login("alice", next_path=item_path(item["id"]))
    await item_ready(alice)
    reason = alice.get_by_label("Reason, if you reject (required to reject)")

    # Nothing is posted: the reason the reject cannot go without takes the focus.
    assert not await press_and_land(alice, "r", timeout=1_500), f"r posted from {alice.url}"
    await expect(reason).to_be_focused()
    await expect(alice.locator("#error-notice")).to_have_count(0)
    assert (await server.arows([item["id"]]))[item["id"]].status == "pending"

    await reason.select_option("spam")
    await alice.keyboard.press("Escape")  # out of the field, back to the keys
    assert await press_and_land(alice, "r")
    await expect(alice.locator(".notice-success")).to_contain_text("You rejected")
    row = (await server.arows([item["id"]]))[item["id"]]
    assert (row.status, row.winner) == ("rejected", "alice")
    history = await alice.goto(f"{item_path(item['id'])}history")
    assert history.ok
    await expect(alice.locator(".reason code")).to_have_text("spam")
