"""The guard under approval policies (moderation.policies): teams, four eyes, quorum, veto, deadlines."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.utils import timezone

from moderation.graphs.runtime import graph_values
from moderation.items.models import AskStatus, ItemStatus, QueueItem, ReviewAsk
from moderation.policies.models import Team, Vote
from moderation.policies.teams import team_member_add, team_member_remove
from moderation.records.audit import audit_verify
from moderation.records.claims import claim_take
from moderation.records.models import AttemptOutcome, DecisionAttempt
from moderation.review.deadlines import deadlines_sweep
from moderation.review.decisions import InvalidDecision, ItemClaimed, NotAllowed, item_decide
from moderation.review.items import item_create
from moderation.tests.graphs_support import item_resumes

pytestmark = pytest.mark.usefixtures("reasons")


def _item(**kwargs):
    return item_create(title="Refund 120", body="Refund order 7.", source="shop", **kwargs)


def _decide(item, user, decision="approve", **kwargs):
    return item_decide(item_public_id=item.public_id, reviewer=user, decision=decision, **kwargs)


def _snapshot():
    return (
        list(QueueItem.objects.values_list("status", "decided_by", "team", "priority")),
        list(ReviewAsk.objects.values_list("status", "decided_by")),
        list(Vote.objects.values_list("voter", "vote")),
        DecisionAttempt.objects.count(),
    )


@pytest.mark.django_db
def test_quorum_resolves_on_the_nth_approval_and_resumes_the_graph_once_with_the_whole_tally(
    payments, alice, bob, django_capture_on_commit_callbacks
):
    item = _item(team="payments", policy={"approvals": 2})
    with django_capture_on_commit_callbacks(execute=True):
        first = _decide(item, alice)
    assert first.counted and not first.won and first.accepted
    assert first.tally["summary"] == "1 of 2 approvals: alice"
    item.refresh_from_db()
    assert item.status == ItemStatus.PENDING and item_resumes(item) == 0
    with django_capture_on_commit_callbacks(execute=True):
        second = _decide(item, bob)
    assert second.won and second.winner == "bob" and second.winner_status == "approved"
    assert second.tally["summary"] == "2 of 2 approvals: alice, bob — approved"
    item.refresh_from_db()
    assert item.status == ItemStatus.APPROVED and item_resumes(item) == 1
    resumed = graph_values(name="moderation", thread_id=item.thread_id)["decision"]
    assert [(v["voter"], v["vote"]) for v in resumed["tally"]["votes"]] == [("alice", "approve"), ("bob", "approve")]
    outcomes = list(DecisionAttempt.objects.filter(item=item).values_list("reviewer__username", "outcome"))
    assert outcomes == [("alice", AttemptOutcome.VOTED), ("bob", AttemptOutcome.WON)]
    assert audit_verify().problems == []  # votes are signed in the attempts log like any attempt


@pytest.mark.django_db
def test_a_veto_ends_the_vote_and_a_later_vote_is_told_it_did_not_count(payments, alice, bob, carol):
    item = _item(team="payments", policy={"approvals": 2, "veto": True})
    _decide(item, alice)
    vetoed = _decide(item, carol, "reject", note="not this one", reason="other")
    assert vetoed.won and vetoed.winner_status == "rejected" and vetoed.tally["why"] == "veto"
    ask = item.asks.get()
    assert ask.decisions == [{"type": "reject", "message": "vetoed (carol: other: not this one)"}]
    late = _decide(item, bob)
    assert not late.accepted and late.winner == "carol"
    assert late.message().startswith("Your vote was not counted: the item was already resolved — already reviewed by carol")
    assert Vote.objects.filter(ask=ask).count() == 2  # bob's late vote was never cast


@pytest.mark.django_db
def test_without_veto_the_rejection_that_makes_approval_impossible_rejects(payments, alice, bob, carol):
    item = _item(team="payments", policy={"approvals": 2})
    assert _decide(item, alice, "reject", reason="spam").counted
    resolved = _decide(item, bob, "reject", reason="spam")
    assert resolved.won and resolved.tally["why"] == "impossible"


@pytest.mark.django_db
def test_a_vote_can_be_changed_until_the_item_resolves_and_counts_once(payments, alice, bob):
    item = _item(team="payments", policy={"approvals": 2})
    assert not _decide(item, alice, "reject", reason="spam").won
    changed = _decide(item, alice, "approve")
    assert changed.tally["summary"] == "1 of 2 approvals: alice" and not changed.won
    assert list(Vote.objects.values_list("voter__username", "vote")) == [("alice", "approve")]
    assert DecisionAttempt.objects.filter(item=item, outcome=AttemptOutcome.VOTED).count() == 2


@pytest.mark.django_db
def test_with_claims_required_a_vote_honours_someone_elses_claim_like_a_decision(settings, payments, alice, bob, carol):
    """Issue 28.14: alice voted and carol resolved an item bob held a live claim on."""
    settings.CLAIMS_REQUIRED = True
    item = _item(team="payments", policy={"approvals": 2})
    claim_take(item=item, user=bob)
    before = _snapshot()
    for voter in (alice, carol):
        with pytest.raises(ItemClaimed, match="^bob has claimed this item"):
            _decide(item, voter)
    assert _snapshot() == before  # no vote, no attempt
    assert _decide(item, bob).counted  # the holder votes, and his claim passes on
    assert claim_take(item=item, user=alice).holder == "alice"
    assert _decide(item, alice).won


@pytest.mark.django_db
def test_only_votes_approve_or_reject_on_a_quorum_item(payments, alice, test_graphs):
    item = item_create(title="Refund", body="b", source="agent", graph="t_hitl", team="payments", policy={"approvals": 2})
    action = item.asks.get().payload["action_requests"][0]
    before = _snapshot()
    with pytest.raises(InvalidDecision, match="decided by vote"):
        item_decide(
            item_public_id=item.public_id,
            reviewer=alice,
            decisions=[{"type": "edit", "edited_action": {"name": action["name"], "args": {**action["args"], "amount": 50}}}],
        )
    assert _snapshot() == before


@pytest.mark.django_db
def test_only_the_teams_moderators_and_supervisors_may_decide(payments, make_moderator):
    item = _item(team="payments")
    outsider = make_moderator("dan")
    before = _snapshot()
    with pytest.raises(NotAllowed, match="not a moderator of the team Payments"):
        _decide(item, outsider)
    assert _snapshot() == before
    outsider.user_permissions.add(Permission.objects.get(codename="supervise_teams"))
    supervisor = type(outsider).objects.get(pk=outsider.pk)
    assert _decide(item, supervisor).won


@pytest.mark.django_db
def test_a_removed_member_is_refused_and_nothing_changes(payments, alice, bob):
    item = _item(team="payments", policy={"approvals": 2})
    assert team_member_remove(team=payments, user=alice) and not team_member_remove(team=payments, user=alice)
    before = _snapshot()
    with pytest.raises(NotAllowed):
        _decide(item, alice)
    assert _snapshot() == before


@pytest.mark.django_db
def test_the_requester_may_never_decide_their_own_item(payments, alice, bob):
    item = _item(team="payments", requested_by=alice)
    before = _snapshot()
    with pytest.raises(NotAllowed, match="four eyes"):
        _decide(item, alice)
    assert _snapshot() == before
    assert _decide(item, bob).won


@pytest.mark.django_db
def test_an_unsatisfiable_policy_is_refused_on_submit_and_creates_nothing(payments, alice):
    with pytest.raises(ValidationError, match="4 approvals can never be reached: team Payments has 3"):
        _item(team="payments", policy={"approvals": 4})
    # The requester does not count among the voters: three members less alice are two.
    with pytest.raises(ValidationError, match="3 approvals can never be reached"):
        _item(team="payments", policy={"approvals": 3}, requested_by=alice)
    with pytest.raises(ValidationError, match="no team 'nope'"):
        _item(team="nope")
    assert not QueueItem.objects.exists()


@pytest.mark.django_db
def test_an_item_joins_the_team_of_its_source(payments):
    payments.sources = ["shop"]
    payments.save()
    assert _item().team == payments


def _overdue(item):
    ReviewAsk.objects.filter(item=item).update(deadline_at=timezone.now() - timedelta(seconds=1))


@pytest.mark.django_db
def test_a_deadline_resolves_by_the_policys_default_as_the_deadline_account(payments, alice, django_capture_on_commit_callbacks):
    item = _item(team="payments", policy={"approvals": 2, "deadline_seconds": 60, "on_deadline": "reject"})
    ask = item.asks.get()
    assert timedelta(seconds=59) < ask.deadline_at - timezone.now() <= timedelta(seconds=60)
    _decide(item, alice)
    assert deadlines_sweep() == 0  # not due yet
    _overdue(item)
    with django_capture_on_commit_callbacks(execute=True):
        assert deadlines_sweep() == 1
    item.refresh_from_db()
    assert (item.status, item.decided_by.username) == (ItemStatus.REJECTED, "deadline") and item_resumes(item) == 1
    resumed = graph_values(name="moderation", thread_id=item.thread_id)["decision"]["tally"]
    assert resumed["summary"] == "1 of 2 approvals: alice — rejected by the deadline"
    assert deadlines_sweep() == 0  # settled: nothing more to fire
    late = _decide(item, alice)
    assert not late.accepted and late.winner == "deadline"
    assert audit_verify().problems == []


@pytest.mark.django_db
def test_a_deadline_that_loses_to_a_decision_is_recorded_as_the_loser(payments, alice):
    from moderation.review.deadlines import deadline_account
    from moderation.review.decisions import ask_deadline_settle

    payments.deadline_seconds, payments.on_deadline = 60, "approve"
    payments.save()
    item = _item(team="payments")
    assert _decide(item, alice, "reject", reason="spam").won
    lost = ask_deadline_settle(ask_pk=item.asks.get().pk, by=deadline_account(), outcome="approve")
    assert not lost.won and lost.winner == "alice"
    assert DecisionAttempt.objects.get(item=item, reviewer__username="deadline").outcome == AttemptOutcome.LOST


@pytest.mark.django_db
def test_escalation_moves_the_item_to_the_supervisors_with_a_higher_priority(payments, alice, make_moderator):
    boss = make_moderator("boss")
    supervisors = Team.objects.create(slug="leads", name="Leads")
    team_member_add(team=supervisors, user=boss)
    payments.escalate_to, payments.deadline_seconds, payments.on_deadline = supervisors, 30, "escalate"
    payments.save()
    item = _item(team="payments", policy={"approvals": 2})
    assert _decide(item, alice).counted
    _overdue(item)
    assert deadlines_sweep() == 1
    item.refresh_from_db()
    assert (item.team, item.priority) == (supervisors, 10) and item.escalated_at is not None
    # The supervisors decide by their own rules (one decision); alice's vote stays on record.
    assert item.policy["approvals"] == 1 and Vote.objects.get().team == payments
    assert item.asks.get().deadline_at is None and item.asks.get().status == AskStatus.PENDING
    assert deadlines_sweep() == 0
    with pytest.raises(NotAllowed):
        _decide(item, alice)  # no longer her team's item
    assert _decide(item, boss).won


TWO_ACTIONS = {
    "action_requests": [
        {"name": "refund_payment", "args": {"order": "A-17", "amount": 120}, "description": "Refund?"},
        {"name": "send_email", "args": {"to": "ann@home.example"}, "description": "Tell the customer."},
    ],
    "review_configs": [
        {"action_name": "refund_payment", "allowed_decisions": ["approve", "edit", "reject"]},
        {"action_name": "send_email", "allowed_decisions": ["approve", "reject"]},
    ],
}


def two_action_item(**kwargs):
    """An agent's ask of two tool calls, for a team whose policy is a vote."""
    return item_create(
        title="Refund A-17",
        body="Two tool calls.",
        source="agent",
        graph="ask",
        graph_input={"ask": TWO_ACTIONS, "external": {}},
        **kwargs,
    )


@pytest.mark.django_db
def test_a_mixed_vote_is_refused_saying_why_and_a_reject_vote_vetoes_every_action(payments, alice, bob):
    """Issue 40.4: a vote rejecting one tool call and approving the other was a 400 that did not say why."""
    item = two_action_item(team="payments", policy={"approvals": 2, "veto": True})
    before = _snapshot()
    mixed = [{"type": "reject", "message": "not this amount"}, {"type": "approve"}]
    with pytest.raises(
        InvalidDecision,
        match="one vote covers all 2 actions of the request: you approved some and "
        "rejected others. To reject any of them, vote reject",
    ) as refused:
        item_decide(item_public_id=item.public_id, reviewer=alice, decisions=mixed)
    assert refused.value.field == "decisions" and refused.value.http_status == 400
    assert _snapshot() == before  # nothing recorded
    assert _decide(item, bob).counted
    vetoed = _decide(item, alice, "reject", note="not this amount")
    assert vetoed.won and vetoed.tally["why"] == "veto"
    assert item.asks.get().decisions == [{"type": "reject", "message": "vetoed (alice: not this amount)"}] * 2
