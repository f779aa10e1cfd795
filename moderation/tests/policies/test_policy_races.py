"""The races of approval policies, each judged by the history checker.

1. the Nth approval and a veto at once: one resolution, the first committed;
2. the last two approvals of a quorum of 3 at once: one resume, with every vote;
3. the deadline firing while a moderator clicks: one decides, the other is told;
4. a moderator removed from the team while voting: refused or counted, as the removal's commit says;
5. one moderator voting from two tabs at once: one vote;
6. with ``CLAIMS_REQUIRED``, a vote racing the claim holder's vote: refused while the claim is live.

Real threads released by a barrier (``races.race_rounds``), on SQLite and in the PostgreSQL
pass; judged by ``history_check``. Negative controls: the textbook quorum without the guard,
and a removal that waits before the membership's lock, which must show double resolutions
and ineligible votes.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from moderation.graphs.asks import AskSpec, ask_resume_value
from moderation.graphs.runtime import graph_asks_pending, graph_resume, graph_values
from moderation.items.models import STATUS_FOR_DECISION, AskStatus, QueueItem, ReviewAsk
from moderation.lab.history import HistoryRecorder, history_check, history_final_read, history_wait_applied
from moderation.policies.models import Team, TeamMembership, Vote
from moderation.policies.rules import policy_parse, tally_resolve
from moderation.policies.teams import eligible_count, team_member_add, team_member_remove
from moderation.records.claims import claim_take
from moderation.records.models import AttemptOutcome, DecisionAttempt
from moderation.review.deadlines import ask_deadline_fire
from moderation.review.decisions import ItemClaimed, NotAllowed, item_decide
from moderation.review.items import item_create
from moderation.tests.graphs_support import item_resumes
from moderation.tests.races import meetings, race_rounds

pytestmark = [pytest.mark.postgres_variant, pytest.mark.django_db(transaction=True)]

ROUNDS = 8
NAIVE_DELAY = 0.05  # the window between counting and resolving that real latency opens


@pytest.fixture
def mods(make_moderator):
    return {name: make_moderator(name) for name in ("alice", "bob", "carol", "dan")}


@pytest.fixture
def team(mods):
    team = Team.objects.create(slug="payments", name="Payments")
    for user in mods.values():
        team_member_add(team=team, user=user)
    return team


def _items(n: int, policy: dict, *, first: tuple[AbstractBaseUser, str] | None = None) -> list[QueueItem]:
    """``n`` items of the team under ``policy``, each with ``first`` (voter, vote) already counted."""
    items = [
        item_create(title=f"policy race {i}", body="Refund order 7.", source="shop", team="payments", policy=policy)
        for i in range(n)
    ]
    if first:
        for item in items:
            assert item_decide(item_public_id=item.public_id, reviewer=first[0], decision=first[1]).counted
    return items


def _recorded(history: HistoryRecorder, item: QueueItem, user: AbstractBaseUser, decision: str, decide=item_decide):
    """One attempt as an op: won, voted (counted), lost naming the winner, or refused (403, 409 claimed: nothing counted)."""
    op = history.invoke(reviewer=user.username, item=str(item.public_id), decision=decision)
    try:
        outcome = decide(item_public_id=item.public_id, reviewer=user, decision=decision)
    except (NotAllowed, ItemClaimed):
        history.complete(op, completion="fail", told_winner=None)
        return op
    op.voted = outcome.counted and not outcome.won
    history.complete(op, completion="ok" if outcome.accepted else "fail", told_winner=outcome.winner)
    return op


def _judged(history: HistoryRecorder, items: list[QueueItem]) -> list[str]:
    keys = [str(item.public_id) for item in items]
    history_wait_applied(items=keys)
    return [str(a) for a in history_check(ops=history.ops, final=history_final_read(items=keys))]


def _won(item: QueueItem) -> list[DecisionAttempt]:
    return list(DecisionAttempt.objects.filter(item=item, outcome=AttemptOutcome.WON).select_related("reviewer"))


def _votes(item: QueueItem) -> dict[str, str]:
    return dict(Vote.objects.filter(ask__item=item).values_list("voter__username", "vote"))


# --- 1. the Nth approval and a veto at the same instant -------------------------------------


def test_nth_approval_and_veto_at_once_resolve_once_and_the_first_committed_wins(team, mods):
    items = _items(ROUNDS, {"approvals": 2, "veto": True}, first=(mods["alice"], "approve"))
    history = HistoryRecorder()
    race_rounds(
        ROUNDS,
        lambda n: _recorded(history, items[n], mods["bob"], "approve"),
        lambda n: _recorded(history, items[n], mods["carol"], "reject"),
    )
    assert _judged(history, items) == []
    winners = []
    for item in items:
        [won] = _won(item)
        winner = won.reviewer.username
        [lost] = DecisionAttempt.objects.filter(item=item, outcome=AttemptOutcome.LOST).select_related("winner")
        # The first committed resolved; the second was judged after it and told by whom.
        assert lost.seq > won.seq and lost.winner.username == winner
        loser_op = next(op for op in history.ops if op.item == str(item.public_id) and op.reviewer != winner)
        assert (loser_op.completion, loser_op.told_winner) == ("fail", winner)
        # Every moderator's vote is accounted: alice's and the winner's counted, the loser's never cast.
        assert _votes(item) == {"alice": "approve", winner: won.requested}
        item.refresh_from_db()
        assert item.status == ("approved" if winner == "bob" else "rejected") and item_resumes(item) == 1
        winners.append(winner)
    print(f"\nrace 1: {ROUNDS} rounds, resolved by bob's approval {winners.count('bob')}, carol's veto {winners.count('carol')}")


# --- 2. the last two approvals of a quorum of 3 at once ----------------------------------


def test_last_two_approvals_at_once_resume_the_graph_once_with_both_votes(team, mods):
    items = _items(ROUNDS, {"approvals": 3}, first=(mods["alice"], "approve"))
    history = HistoryRecorder()
    race_rounds(
        ROUNDS,
        lambda n: _recorded(history, items[n], mods["bob"], "approve"),
        lambda n: _recorded(history, items[n], mods["carol"], "approve"),
    )
    assert _judged(history, items) == []
    for item in items:
        ops = sorted((op for op in history.ops if op.item == str(item.public_id)), key=lambda op: op.voted)
        assert [(op.completion, op.voted) for op in ops] == [("ok", False), ("ok", True)]  # one resolved, one counted
        assert len(_won(item)) == 1 and item_resumes(item) == 1
        resumed = graph_values(name=item.graph, thread_id=item.thread_id)["decision"]["tally"]
        assert sorted(v["voter"] for v in resumed["votes"]) == ["alice", "bob", "carol"]


# --- 3. the deadline firing while a moderator clicks -----------------------------------------


def _deadline_recorded(history: HistoryRecorder, item: QueueItem) -> str:
    op = history.invoke(reviewer="deadline", item=str(item.public_id), decision="reject")
    fired = ask_deadline_fire(ask_pk=item.asks.get().pk)
    if fired.outcome is not None and fired.outcome.won:
        history.complete(op, completion="ok", told_winner="deadline")
    else:  # lost in the guard, or found it decided before trying: either way told who decided
        winner = ReviewAsk.objects.filter(item=item).values_list("decided_by__username", flat=True).get()
        history.complete(op, completion="fail", told_winner=fired.outcome.winner if fired.outcome else winner)
    return fired.said


def test_deadline_firing_while_a_moderator_clicks_has_one_winner_and_the_other_is_told(team, mods):
    items = _items(ROUNDS, {"approvals": 2, "deadline_seconds": 60, "on_deadline": "reject"}, first=(mods["alice"], "approve"))
    ReviewAsk.objects.filter(item__in=items).update(deadline_at=timezone.now() - timedelta(seconds=1))
    history, said = HistoryRecorder(), {}
    race_rounds(
        ROUNDS,
        lambda n: said.__setitem__(n, _deadline_recorded(history, items[n])),
        lambda n: _recorded(history, items[n], mods["bob"], "approve"),
    )
    assert _judged(history, items) == []
    tally = {"deadline": 0, "bob": 0}
    for n, item in enumerate(items):
        [won] = _won(item)
        winner = won.reviewer.username
        tally[winner] += 1
        bob = next(op for op in history.ops if op.item == str(item.public_id) and op.reviewer == "bob")
        if winner == "deadline":
            assert (bob.completion, bob.told_winner) == ("fail", "deadline")
            assert DecisionAttempt.objects.get(item=item, reviewer=mods["bob"]).outcome == AttemptOutcome.LOST
            # The graph is resumed with the votes cast before the deadline (alice's), bob's never cast.
            resumed = graph_values(name=item.graph, thread_id=item.thread_id)["decision"]["tally"]
            assert [(v["voter"], v["vote"]) for v in resumed["votes"]] == [("alice", "approve")]
            assert resumed["summary"] == "1 of 2 approvals: alice — rejected by the deadline"
        elif said[n].startswith("lost to"):  # the deadline reached the guard after bob: recorded lost
            assert DecisionAttempt.objects.get(item=item, reviewer__username="deadline").winner.username == "bob"
        assert item_resumes(item) == 1
    print(f"\nrace 3: {ROUNDS} rounds, won by the deadline {tally['deadline']}, by bob {tally['bob']}")


# --- 4. a moderator removed from the team while voting -------------------------------------


def _removal_race(team, mods, items, remove, *, stagger: float = 0.0) -> HistoryRecorder:
    """bob votes on each item while he is removed from the team (re-added before each round);
    the removal starts ``stagger`` × (0 to 3) seconds after the vote, so both orders of commit come up."""
    history = HistoryRecorder()
    race_rounds(
        len(items),
        lambda n: (time.sleep(n % 4 * stagger), remove(team=team, user=mods["bob"])),
        lambda n: _recorded(history, items[n], mods["bob"], "approve"),
        before=lambda n: team_member_add(team=team, user=mods["bob"]),
    )
    return history


def test_a_removal_while_voting_refuses_or_counts_the_vote_as_its_commit_says(team, mods):
    rounds = 2 * ROUNDS
    items = _items(rounds, {"approvals": 2})
    history = _removal_race(team, mods, items, team_member_remove, stagger=0.005)
    assert _judged(history, items) == []  # ineligible_vote among them
    counted = 0
    op_of = {op.item: op for op in history.ops}
    for item in items:
        op = op_of[str(item.public_id)]
        votes = list(Vote.objects.filter(ask__item=item))
        if op.completion == "ok":  # counted: cast while the membership was live, removed only after
            [vote] = votes
            membership = TeamMembership.objects.get(
                team=team, user=mods["bob"], added_at__lte=vote.cast_at, removed_at__isnull=False, removed_at__gt=vote.cast_at
            )
            assert membership.removed_at > vote.cast_at
            counted += 1
        else:  # refused: nothing half-applied
            assert votes == [] and not DecisionAttempt.objects.filter(item=item).exists()
    assert not TeamMembership.objects.filter(team=team, user=mods["bob"], removed_at__isnull=True).exists()
    print(f"\nrace 4: {rounds} rounds, vote counted before the removal {counted}, refused after it {rounds - counted}")


def _naive_member_remove(*, team: Team, user: AbstractBaseUser) -> None:
    """The removal with its time taken before anything is locked (read the clock, then write)."""
    at = timezone.now()
    time.sleep(NAIVE_DELAY)
    TeamMembership.objects.filter(team=team, user=user, removed_at__isnull=True).update(removed_at=at)


def test_negative_control_a_removal_stamped_before_the_lock_admits_an_ineligible_vote(team, mods):
    # 12 rounds: the window is the naive removal's sleep, and on a loaded machine a round can miss it.
    items = _items(12, {"approvals": 2})
    history = _removal_race(team, mods, items, _naive_member_remove)
    anomalies = _judged(history, items)
    print(f"\nnegative control, removal: {len(anomalies)} anomalies in 12 rounds")
    assert anomalies and all(a.startswith("ineligible_vote") for a in anomalies), anomalies


# --- 5. one moderator voting from two tabs at once -----------------------------------------


def test_two_tabs_of_one_moderator_cast_one_vote(team, mods):
    # Odd rounds: bob's approval is in, so alice's first tab resolves and the other is told she did.
    items = _items(ROUNDS, {"approvals": 2}) + _items(ROUNDS, {"approvals": 2}, first=(mods["bob"], "approve"))
    history = HistoryRecorder()
    tab = lambda n: _recorded(history, items[n], mods["alice"], "approve")  # noqa: E731
    race_rounds(len(items), tab, tab)
    assert _judged(history, items) == []
    for n, item in enumerate(items):
        assert Vote.objects.filter(ask__item=item, voter=mods["alice"]).count() == 1
        acks = sorted((op.completion, op.voted, op.told_winner) for op in history.ops if op.item == str(item.public_id))
        if n < ROUNDS:  # both tabs told the vote counted; one Vote row, the item still open
            assert acks == [("ok", True, ""), ("ok", True, "")] and item_resumes(item) == 0
        else:
            assert acks == [("fail", False, "alice"), ("ok", False, "alice")] and item_resumes(item) == 1


# --- 6. with claims required, a vote racing the claim holder's vote -------------------------


def test_a_vote_is_refused_while_the_holder_reads_and_counted_only_after_the_holders_vote(settings, team, mods):
    settings.CLAIMS_REQUIRED = True
    items = _items(ROUNDS, {"approvals": 3})
    for item in items:
        claim_take(item=item, user=mods["bob"])
    history = HistoryRecorder()
    # Each thread votes as bob in one round and as alice in the next: neither starts first every time.
    voters = (mods["bob"], mods["alice"])
    race_rounds(
        ROUNDS,
        lambda n: _recorded(history, items[n], voters[n % 2], "approve"),
        lambda n: _recorded(history, items[n], voters[1 - n % 2], "approve"),
    )
    assert _judged(history, items) == []
    counted = 0
    for item in items:
        alice = next(op for op in history.ops if op.item == str(item.public_id) and op.reviewer == "alice")
        logged = dict(DecisionAttempt.objects.filter(item=item).values_list("reviewer__username", "seq"))
        if alice.voted:  # judged after bob's vote had ended his claim
            assert logged["alice"] > logged["bob"] and _votes(item) == {"bob": "approve", "alice": "approve"}
            counted += 1
        else:  # judged while bob held it: nothing of hers recorded
            assert alice.completion == "fail" and "alice" not in logged and _votes(item) == {"bob": "approve"}
    print(f"\nrace 6: {ROUNDS} rounds, alice's vote counted after bob's {counted}, refused over his claim {ROUNDS - counted}")


# --- negative control: the quorum without the guard ----------------------------------------


# An item's two naive voters meet once each has checked the ask and voted, so each count sees both votes however
# the threads are scheduled (a sleep here gave the race a window a loaded machine could miss).
_both_voted = meetings(parties=2)


def _naive_vote(*, item_public_id, reviewer: AbstractBaseUser, decision: str):
    """The textbook quorum with no row lock: check the ask is open, write my vote, count the
    votes, resolve if the count says so. Writes no attempt (two winners would break the
    log's constraint instead of being counted), resumes the graph itself."""
    from moderation.records.outcomes import DecisionOutcome

    item = QueueItem.objects.get(public_id=item_public_id)
    ask = item.asks.get()
    if ask.status != AskStatus.PENDING:
        return DecisionOutcome(
            won=False,
            item_public_id=str(item.public_id),
            item_title=item.title,
            requested=decision,
            winner=ask.decided_by.username,
            winner_status=item.status,
            decided_at=ask.decided_at,
            attempt_seq=0,
        )
    pending = graph_asks_pending(name=item.graph, thread_id=item.thread_id)
    Vote.objects.update_or_create(ask=ask, voter=reviewer, defaults={"vote": decision, "cast_at": timezone.now()})
    _both_voted(str(item_public_id))
    votes = dict(Vote.objects.filter(ask=ask).values_list("voter__username", "vote"))
    resolution = tally_resolve(
        policy=policy_parse(item.policy), votes=votes, eligible=eligible_count(team_id=item.team_id, requester_id=None)
    )
    now = timezone.now()
    if resolution is None:
        return DecisionOutcome(
            won=False,
            counted=True,
            item_public_id=str(item.public_id),
            item_title=item.title,
            requested=decision,
            winner=None,
            winner_status="",
            decided_at=None,
            attempt_seq=0,
        )
    decisions = [{"type": resolution.outcome} for _ in AskSpec.from_payload(ask.payload).actions]
    ReviewAsk.objects.filter(pk=ask.pk).update(
        status=AskStatus.DECIDED,
        decisions=decisions,
        decided_by=reviewer,
        decided_at=now,
        tally={"votes": [{"voter": v, "vote": k} for v, k in votes.items()]},
    )
    status = STATUS_FOR_DECISION[resolution.outcome]
    QueueItem.objects.filter(pk=item.pk).update(status=status, decided_by=reviewer, decided_at=now)
    spec = AskSpec.from_payload(ask.payload)
    graph_resume(
        name=item.graph,
        thread_id=item.thread_id,
        answers={
            p.interrupt_id: ask_resume_value(spec=spec, decisions=decisions, meta={"reviewer": reviewer.username})
            for p in pending
        },
    )
    return DecisionOutcome(
        won=True,
        item_public_id=str(item.public_id),
        item_title=item.title,
        requested=decision,
        winner=reviewer.username,
        winner_status=status,
        decided_at=now,
        attempt_seq=0,
    )


@pytest.mark.parametrize(
    ("race", "policy", "votes"),
    [
        (1, {"approvals": 2, "veto": True}, ("approve", "reject")),
        (2, {"approvals": 3}, ("approve", "approve")),
    ],
)
def test_negative_control_an_unguarded_tally_resolves_twice(team, mods, race, policy, votes):
    rounds = 4
    items = _items(rounds, policy, first=(mods["alice"], "approve"))
    history = HistoryRecorder()
    race_rounds(
        rounds,
        lambda n: _recorded(history, items[n], mods["bob"], votes[0], decide=_naive_vote),
        lambda n: _recorded(history, items[n], mods["carol"], votes[1], decide=_naive_vote),
    )
    anomalies = _judged(history, items)
    kinds = {a.split(" ")[0] for a in anomalies}
    print(f"\nnegative control, race {race}: {len(anomalies)} anomalies in {rounds} rounds: {sorted(kinds)}")
    assert "multiple_winners" in kinds, anomalies
