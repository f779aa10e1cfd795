"""Real races: threads and OS processes released together onto the same items.

Each test creates fresh items, releases N reviewers onto each with a barrier, then
judges from the final rows and the graphs' checkpoint history. Runs on SQLite (file
database) and, in the PostgreSQL pass, on PostgreSQL.
"""

import threading

import pytest
from django.db import connection

from moderation.core.faults import fault_inject
from moderation.items.models import ItemStatus, QueueItem
from moderation.lab.harness import race_processes, race_threads
from moderation.review.decisions import item_decide
from moderation.tests.graphs_support import item_forks, item_resumes, item_waiting_on
from moderation.tests.races import guard_held_assert

pytestmark = [pytest.mark.postgres_variant, pytest.mark.django_db(transaction=True)]


def _items(make_item, n):
    return [str(make_item(title=f"race {i}").public_id) for i in range(n)]


# Each item is a race of its own (the reviewers meet at a barrier per item): 16 to 40 of them
# per run give the guard as many chances to fail as the naive control needs to show its 10.
@pytest.mark.parametrize(("reviewers", "n_items"), [(2, 40), (4, 24), (8, 16)])
def test_threads_exactly_one_winner_per_item(make_moderator, make_item, reviewers, n_items):
    users = [make_moderator().username for _ in range(reviewers)]
    items = _items(make_item, n_items)
    report = race_threads(strategy="guarded", items=items, usernames=users, delay=0.0)
    guard_held_assert(report, items=items, reviewers=reviewers)
    assert sum(item_forks(item) for item in QueueItem.objects.filter(public_id__in=items)) == 0


def test_processes_exactly_one_winner_per_item(make_moderator, make_item):
    users = [make_moderator().username for _ in range(2)]
    items = _items(make_item, 20)
    report = race_processes(strategy="guarded", items=items, usernames=users, delay=0.0)
    guard_held_assert(report, items=items, reviewers=2)


def test_negative_control_naive_check_then_act_loses_decisions(make_moderator, make_item):
    """The same harness sees the seed's bug: both told success, one decision overwritten."""
    users = [make_moderator().username for _ in range(2)]
    items = _items(make_item, 10)
    report = race_threads(strategy="naive", items=items, usernames=users, delay=0.05)
    assert report.errors == []
    assert {"lost_decision", "multiple_winners", "double_resume"} <= {a.kind for a in report.anomalies}
    assert report.lost_decisions >= 1
    assert report.false_successes >= 1
    assert report.double_resumes >= 1
    assert sum(item_forks(item) for item in QueueItem.objects.filter(public_id__in=items)) >= 1


def test_negative_control_naive_across_processes(make_moderator, make_item):
    users = [make_moderator().username for _ in range(2)]
    items = _items(make_item, 6)
    report = race_processes(strategy="naive", items=items, usernames=users, delay=0.05)
    assert report.lost_decisions >= 1 and report.double_resumes >= 1


class _Held:
    """A fault action that holds one item where it fires until the test releases it.

    The hold ends on its own after ``HOLD_LIMIT`` seconds, so a decision that wrongly waits
    for it still ends; ``released_by_test`` then tells the two apart without timing anything.
    """

    HOLD_LIMIT = 60.0

    def __init__(self, key: str) -> None:
        self.key = key
        self.inside, self.release = threading.Event(), threading.Event()
        self.released_by_test: bool | None = None

    def hold(self, key: str) -> None:
        if key == self.key:
            self.inside.set()
            self.released_by_test = self.release.wait(self.HOLD_LIMIT)


@pytest.mark.parametrize("point", ["after_item_lock", "after_row_lock"])
def test_slow_reviewer_on_one_item_does_not_delay_other_items(make_moderator, make_item, point):
    if point == "after_row_lock" and connection.vendor == "sqlite":
        pytest.skip(
            "SQLite has one writer per database: a stall inside the write transaction holds every item, "
            "which is why the graph runs after the commit, outside it (PostgreSQL locks one row)"
        )
    slow_user, fast_user = make_moderator(), make_moderator()
    slow_item = make_item(title="X")
    others = [make_item(title=f"other {i}") for i in range(4)]
    slow = _Held(str(slow_item.public_id))

    with fault_inject(point, slow.hold):
        reviewer = threading.Thread(
            target=lambda: (
                item_decide(item_public_id=slow_item.public_id, reviewer=slow_user, decision="approve"),
                connection.close(),
            )
        )
        reviewer.start()
        try:
            assert slow.inside.wait(30)
            for item in others:
                assert item_decide(item_public_id=item.public_id, reviewer=fast_user, decision="reject").won
        finally:
            slow.release.set()
            reviewer.join()
    # X is held until the others are decided: had they queued behind it, the hold would have
    # run out on its own first (and a lock wait would have answered "busy", failing above).
    assert slow.released_by_test, "the others were decided only after the slow reviewer's hold ran out"
    assert QueueItem.objects.get(pk=slow_item.pk).status == ItemStatus.APPROVED


def test_a_slow_graph_after_a_decision_holds_no_reviewer(make_moderator, make_item):
    """The graph runs after the commit, under the thread's resume lock only: while one item's
    graph is stuck in its apply node, every other item, and a late reviewer of the same
    item, gets an answer at once (on SQLite too: no write transaction is open)."""
    slow_user, late_user, fast_user = make_moderator(), make_moderator(), make_moderator()
    slow_item = make_item(title="X")
    others = [make_item(title=f"other {i}") for i in range(4)]
    slow = _Held(str(slow_item.public_id))

    with fault_inject("in_apply_node", slow.hold):
        reviewer = threading.Thread(
            target=lambda: (
                item_decide(item_public_id=slow_item.public_id, reviewer=slow_user, decision="approve"),
                connection.close(),
            )
        )
        reviewer.start()
        try:
            assert slow.inside.wait(30)
            late = item_decide(item_public_id=slow_item.public_id, reviewer=late_user, decision="reject")
            for item in others:
                assert item_decide(item_public_id=item.public_id, reviewer=fast_user, decision="reject").won
        finally:
            slow.release.set()
            reviewer.join()
    assert not late.won and late.winner == slow_user.username and late.applying
    assert slow.released_by_test, "the others were decided only after the slow graph's hold ran out"
    slow_item.refresh_from_db()
    assert slow_item.status == ItemStatus.APPROVED and slow_item.applied_result["state"] == "finished"
    assert item_resumes(slow_item) == 1


def test_undecided_item_stays_paused_and_blocks_nothing(alice, make_item):
    a, b, c = make_item(title="A"), make_item(title="B"), make_item(title="C")
    assert item_decide(item_public_id=a.public_id, reviewer=alice, decision="approve").won
    assert item_decide(item_public_id=c.public_id, reviewer=alice, decision="reject").won
    b.refresh_from_db()
    assert b.status == ItemStatus.PENDING
    assert item_waiting_on(b) == [b.asks.get().interrupt_id]
    assert b.asks.get().payload["action_requests"][0]["args"]["title"] == "B"
    assert item_resumes(b) == 0
    assert item_resumes(a) == item_resumes(c) == 1
    assert item_decide(item_public_id=b.public_id, reviewer=alice, decision="approve").won


def test_eight_writer_processes_one_winner_per_item_and_no_writer_starved(make_moderator, make_item):
    """Under contention SQLite's busy handler can starve a writer past its busy timeout (an
    error, which guard_held_assert refuses); the IMMEDIATE mode plus short transactions keep
    every writer in. How long the worst one waits is measure 20 of ``make bench``."""
    users = [make_moderator().username for _ in range(8)]
    items = _items(make_item, 20)
    report = race_processes(strategy="guarded", items=items, usernames=users, delay=0.0)
    guard_held_assert(report, items=items, reviewers=8)
