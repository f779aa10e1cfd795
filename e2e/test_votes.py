"""Approval policies in the browser (issue 16): three moderators voting on a quorum-2 item at the
same instant, who may see a team's item, and the deadline counting down."""

from __future__ import annotations

import asyncio
import re

import pytest
from playwright.async_api import expect

from e2e.pages import LIVE_TIMEOUT_MS, Submission, item_path, live_wait, race
from moderation.lab.history import FinalItem, HistoryRecorder, history_check

pytestmark = pytest.mark.asyncio(loop_scope="module")

VOTERS = ("alice", "bob", "carol")
TOLD_WINNER = re.compile(r"already reviewed by (\S+) \(")
COUNTED = re.compile(r"Your (approve|reject) vote on .* is counted")


async def _team(server) -> None:
    await asyncio.to_thread(
        server.manage,
        "team",
        "payments",
        "--approvals",
        "2",
        "--veto",
        "on",
        "--deadline",
        "600",
        "--on-deadline",
        "reject",
        *(arg for name in VOTERS for arg in ("--add", name)),
    )


async def _item(server, prefix: str) -> str:
    [item] = await server.atool("items", "--count", "1", "--prefix", prefix, "--team", "payments")
    return item["id"]


def _record(history: HistoryRecorder, item: str, sub: Submission) -> None:
    """What the answer page told each voter, as the history checker reads it."""
    op = history.invoke(reviewer=sub.user, item=item, decision=sub.requested)
    if sub.kind == "won" and sub.text.startswith("Resolved:"):
        history.complete(op, completion="ok", told_winner=sub.user)
    elif sub.kind == "won" and COUNTED.search(sub.text):
        op.voted = True
        history.complete(op, completion="ok")
    elif sub.kind == "lost" and (told := TOLD_WINNER.search(sub.text)):
        history.complete(op, completion="fail", told_winner=told.group(1))
    else:
        history.complete(op, completion="unknown", error=f"{sub.kind}: {sub.text[:120]}")


@pytest.mark.parametrize(
    "votes",
    [("approve", "approve", "approve"), ("approve", "approve", "reject")],
    ids=["three-approvals", "approvals-and-a-veto"],
)
async def test_three_voters_at_the_same_instant_one_resolution_everyone_told(server, crowd, votes):
    await _team(server)
    item = await _item(server, f"Quorum {'-'.join(votes)}")
    pages = [await crowd.login(name, next_path=item_path(item)) for name in VOTERS]
    for page in pages:
        await expect(page.get_by_role("button", name="Vote approve")).to_be_visible()
        await expect(page.locator("#vote-tally")).to_have_text("0 of 2 approvals")
    subs = await race([(page, name, vote) for page, name, vote in zip(pages, VOTERS, votes, strict=False)])
    described = [(s.user, s.kind, s.text[:160]) for s in subs]
    resolved = [s for s in subs if s.text.startswith("Resolved:")]
    assert len(resolved) == 1, described
    history = HistoryRecorder()
    for sub in subs:
        _record(history, item, sub)
    state = (await server.state([item]))[item]
    final = state["final"]
    assert [
        str(a)
        for a in history_check(
            ops=history.ops,
            final={
                item: FinalItem(
                    winner=final["winner"],
                    winning_attempts=final["winning_attempts"],
                    resumes=final["resumes"],
                    decision=final["decision"],
                    votes=final["votes"],
                    tally=final["tally"],
                    ineligible=tuple(final["ineligible"]),
                )
            },
        )
    ] == [], described
    summary = state["tally"]["summary"]
    assert re.fullmatch(r"2 of 2 approvals: \w+, \w+ — approved", summary) or summary.endswith("— vetoed"), summary
    assert state["winner"] == resolved[0].user and len(state["won_attempts"]) == 1
    # Every browser is told the outcome, and whether its vote was one of those the item resolved with.
    counted = set(final["tally"])
    for page, name in zip(pages, VOTERS, strict=False):
        words = "your vote counted" if name in counted else "your vote was not counted: the item was already resolved"
        await expect(page.locator("#vote-outcome")).to_have_text(
            f"Resolved: {state['status']} — {words}", timeout=LIVE_TIMEOUT_MS
        )
        await expect(page.locator("#vote-tally")).to_have_text(summary)


async def test_a_non_member_gets_404_and_a_member_sees_the_deadline_count_down(server, crowd):
    await _team(server)
    item = await _item(server, "Deadline")
    viewer = await crowd.login("dave")
    response = await viewer.goto(item_path(item))
    assert response.status == 404
    await viewer.goto("/")
    await expect(viewer.get_by_text("Deadline 1")).to_have_count(0)
    page = await crowd.login("alice", next_path=item_path(item))
    await live_wait(page)
    deadline = page.locator("#vote-deadline")
    await expect(deadline).to_contain_text(re.compile(r"Deadline: 9 min \d+ s left · then: rejected by deadline"))
    first = await deadline.inner_text()
    await expect(deadline).not_to_have_text(first)  # it counts down, in words
    await page.goto("/")
    await expect(page.get_by_role("link", name="Deadline 1")).to_be_visible()
    await expect(page.get_by_text("Vote: 0 of 2 approvals")).to_be_visible()
