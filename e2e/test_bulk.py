"""Bulk decisions in real browsers: alice ticks five items (keyboard and mouse) and rejects
them in one action while bob approves one of them on its own page at the same moment;
alice's result page says, per item, rejected or lost to bob, and agrees with the database."""

from __future__ import annotations

import asyncio

import pytest
from playwright.async_api import expect

from e2e.pages import decide_click, decide_prepare, item_path, item_ready, page_open
from moderation.lab.history import FinalItem, HistoryRecorder, history_check

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_bulk_reject_with_bob_approving_one_of_them_at_the_same_moment(server, crowd):
    items = await server.items_create(5, "Bulk")
    ids = {item["id"] for item in items}
    alice = await crowd.login("alice")
    bob = await crowd.login("bob")
    rows = alice.locator("#queue-table tbody tr")
    await expect(rows).to_have_count(5)
    order = [await rows.nth(n).get_attribute("data-item") for n in range(5)]
    assert set(order) == ids

    # Three ticked from the keyboard (j moves, x ticks), two with the mouse.
    for _ in range(3):
        await alice.keyboard.press("j")
        await alice.keyboard.press("x")
    for n in (3, 4):
        await rows.nth(n).get_by_role("checkbox").check()
    for n in range(5):
        await expect(rows.nth(n).get_by_role("checkbox")).to_be_checked()

    # Bob's item is the last alice sends: her bulk decides four items before it, his one decision wins.
    contested = order[-1]
    await page_open(bob, item_path(contested))
    await item_ready(bob)
    await decide_prepare(bob, "approve")
    bar = alice.get_by_role("form", name="Decide the selected items")
    await bar.get_by_label("Reason, if you reject").select_option("spam")
    await bar.get_by_role("button", name="Reject selected").hover()
    await alice.mouse.down()

    async def alice_sends():
        async with alice.expect_navigation():
            await alice.mouse.up()

    bob_sub, _ = await asyncio.gather(decide_click(bob, "bob", "approve"), alice_sends())

    await expect(alice.get_by_role("heading", name="Bulk decision")).to_be_visible()
    results = alice.locator("#bulk-results tbody tr")
    await expect(results).to_have_count(5)
    told = {await row.get_attribute("data-item"): " ".join((await row.text_content()).split()) for row in await results.all()}
    titles = {item["id"]: item["title"] for item in items}
    assert told[contested] == f"{titles[contested]} lost to bob (approved)", told
    assert bob_sub.won, bob_sub
    for item in ids - {contested}:
        assert told[item] == f"{titles[item]} rejected"
    await expect(alice.get_by_role("link", name="Back to the queue")).to_be_visible()

    # What each moderator was shown agrees with the database: one winner per item.
    history = HistoryRecorder()
    op = history.invoke(reviewer="bob", item=contested, decision="approve")
    history.complete(op, completion="ok", told_winner="bob")
    for item, text in told.items():
        op = history.invoke(reviewer="alice", item=item, decision="reject")
        if text.endswith(" rejected"):
            history.complete(op, completion="ok", told_winner="alice")
        else:
            history.complete(op, completion="fail", told_winner=text.rsplit("lost to ", 1)[1].split()[0])
    state = await server.state(list(ids))
    final = {
        i: FinalItem(winner=state[i]["winner"], winning_attempts=len(state[i]["won_attempts"]), resumes=state[i]["resume_count"])
        for i in ids
    }
    assert [str(a) for a in history_check(ops=history.ops, final=final)] == []
    assert state[contested]["lost_attempts"] == [{"reviewer": "alice", "requested": "reject", "told_winner": "bob"}]

    await alice.get_by_role("link", name="Back to the queue").click()
    await expect(alice.locator("#queue-empty")).to_contain_text("Nothing is waiting")
