"""One remote ask (an agent's, run by the pass-through graph), four competitors at once: two
moderators (approve, reject), the agent's API cancel (a withdrawal by its client's account)
and the ask's deadline (fired through the product's deadline path, as the worker's sweep
fires it). Every racer waits for the deadline and acts at that instant (the race lab's
``race_threads`` with ``at_deadline``); exactly one wins, its graph resumed once, every
loser told who won: judged by the history checker. The negative control runs the same race
with the seed's naive check-then-act for the three people (the deadline keeps the product's
path), and the checker must see several winners. Over HTTP against a real server and its
worker's own deadline sweep: e2e/test_agent_side.py.
"""

from __future__ import annotations

import pytest

from moderation.api.clients import apiclient_create
from moderation.items.models import QueueItem
from moderation.lab.harness import race_threads
from moderation.review.deadlines import deadline_account
from moderation.review.submissions import Submission, item_submit

pytestmark = [pytest.mark.postgres_variant, pytest.mark.django_db(transaction=True)]

ROUNDS = 6
COMPETITORS = ["withdraw", "approve", "reject", "deadline"]
ASK = {
    "action_requests": [{"name": "delete_customer", "args": {"customer_id": "C-7"}, "description": ""}],
    "review_configs": [{"action_name": "delete_customer", "allowed_decisions": ["approve", "edit", "reject"]}],
}


def _remote_asks(count: int, *, label: str) -> tuple[list[str], str]:
    """``count`` asks an agent submitted over the API, due in a second; their ids and the agent's account."""
    client, _ = apiclient_create(name=f"agent-{label}", scopes=["items:write", "items:read"])
    items = [
        str(
            item_submit(
                client=client,
                submission=Submission(
                    title=f"Approve delete_customer {n}",
                    body="An agent asks.",
                    source="support-agent",
                    ask=ASK,
                    external={"thread_id": f"{label}-{n}", "interrupt_id": "i-1"},
                    policy={"deadline_seconds": 1, "on_deadline": "reject"},
                ),
            ).item.public_id
        )
        for n in range(count)
    ]
    return items, client.user.username


def _race(strategy: str, make_moderator, *, label: str):
    items, agent = _remote_asks(ROUNDS, label=label)
    usernames = [agent, make_moderator().username, make_moderator().username, deadline_account().username]
    return items, race_threads(
        strategy=strategy,
        items=items,
        usernames=usernames,
        delay=0.05 if strategy == "naive" else 0.0,
        decisions=COMPETITORS,
        at_deadline=True,
    )


def test_two_moderators_the_agents_cancel_and_the_deadline_on_one_remote_ask_one_wins(make_moderator):
    items, report = _race("guarded", make_moderator, label="guarded")
    assert report.errors == [] and [str(a) for a in report.anomalies] == []
    for verdict in report.verdicts:
        assert len(verdict.acknowledged) == 1 and verdict.winner == verdict.acknowledged[0], verdict
        assert verdict.resumes == 1 and not verdict.still_paused
    # Every attempt that reached the guard was told the one winner.
    winners = {v.item: v.winner for v in report.verdicts}
    assert all(a.told_winner == winners[a.item] for a in report.attempts if a.told_winner is not None)
    assert set(QueueItem.objects.filter(public_id__in=items).values_list("graph", flat=True)) == {"ask"}


def test_negative_control_naive_decisions_on_a_remote_ask_are_caught(make_moderator):
    _, report = _race("naive", make_moderator, label="naive")
    assert {"multiple_winners", "lost_decision"} <= {a.kind for a in report.anomalies}, report.anomalies
