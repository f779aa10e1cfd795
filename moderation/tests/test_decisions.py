import threading
import uuid

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from moderation.decisions import (
    InvalidDecision,
    ItemBusy,
    ItemNeedsAttention,
    ItemNotFound,
    NotAModerator,
    item_decide,
)
from moderation.faults import fault_inject
from moderation.graph import graph_pending_review, graph_resume, graph_resume_count
from moderation.models import AppendOnlyError, AttemptOutcome, DecisionAttempt, ItemStatus, QueueItem


def _snapshot():
    return (
        list(QueueItem.objects.values_list("public_id", "status", "decided_by", "decided_at", "decision_note")),
        DecisionAttempt.objects.count(),
    )


@pytest.mark.django_db
def test_winner_decides_item_resumes_graph_and_records_attempt(alice, make_item):
    item = make_item()
    outcome = item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve", note="fine")
    assert outcome.won and outcome.winner == "alice" and outcome.winner_status == "approved"
    item.refresh_from_db()
    assert (item.status, item.decided_by, item.decision_note) == (ItemStatus.APPROVED, alice, "fine")
    assert graph_pending_review(thread_id=item.thread_id) is None
    assert graph_resume_count(thread_id=item.thread_id) == 1
    attempt = DecisionAttempt.objects.get(item=item, seq=outcome.attempt_seq)
    assert (attempt.outcome, attempt.winner, attempt.requested) == (AttemptOutcome.WON, alice, "approve")


@pytest.mark.django_db
def test_loser_is_told_who_won_and_nothing_of_theirs_is_applied(alice, bob, make_item):
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    lost = item_decide(item_public_id=item.public_id, reviewer=bob, decision="reject", note="spam")
    assert not lost.won
    assert (lost.winner, lost.winner_status, lost.requested) == ("alice", "approved", "reject")
    assert lost.message(now=lost.decided_at + timezone.timedelta(seconds=3)) == (
        "Already reviewed by alice (approved, 3 s ago) — your decision was not applied"
    )
    item.refresh_from_db()
    assert (item.status, item.decided_by, item.decision_note) == (ItemStatus.APPROVED, alice, "")
    assert graph_resume_count(thread_id=item.thread_id) == 1
    attempt = DecisionAttempt.objects.get(item=item, seq=lost.attempt_seq)
    assert (attempt.outcome, attempt.reviewer, attempt.winner, attempt.winner_status) == (
        AttemptOutcome.LOST, bob, alice, "approved"
    )


@pytest.mark.django_db
@pytest.mark.parametrize("decision", ["delete", "", None, "APPROVE", 1, ["approve"]])
def test_invalid_decision_changes_nothing(alice, make_item, decision):
    item = make_item()
    before = _snapshot()
    with pytest.raises(InvalidDecision):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision=decision)
    assert _snapshot() == before
    assert graph_pending_review(thread_id=item.thread_id) is not None


@pytest.mark.django_db
def test_oversized_or_non_text_note_changes_nothing(alice, make_item, settings):
    item = make_item()
    before = _snapshot()
    with pytest.raises(InvalidDecision, match="longer than"):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve", note="x" * (settings.DECISION_NOTE_MAX_LENGTH + 1))
    with pytest.raises(InvalidDecision, match="text"):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve", note={"x": 1})
    assert _snapshot() == before


@pytest.mark.django_db
def test_non_moderator_cannot_decide(make_viewer, make_item):
    item = make_item()
    before = _snapshot()
    with pytest.raises(NotAModerator):
        item_decide(item_public_id=item.public_id, reviewer=make_viewer(), decision="approve")
    assert _snapshot() == before


@pytest.mark.django_db
@pytest.mark.parametrize("public_id", [uuid.uuid4(), "not-a-uuid", ""])
def test_unknown_item_is_not_found(alice, make_item, public_id):
    make_item()
    before = _snapshot()
    with pytest.raises(ItemNotFound):
        item_decide(item_public_id=public_id, reviewer=alice, decision="approve")
    assert _snapshot() == before


@pytest.mark.django_db(transaction=True)
def test_reviewer_waiting_past_the_bound_gets_busy_and_changes_nothing(alice, bob, make_item, settings):
    settings.DECISION_LOCK_TIMEOUT = 0.3
    item = make_item()
    inside, release = threading.Event(), threading.Event()

    def stall(key):
        inside.set()
        release.wait(5)

    results = {}
    with fault_inject("after_item_lock", stall):
        t = threading.Thread(target=lambda: results.setdefault("alice", item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")))
        t.start()
        assert inside.wait(5)
        before = _snapshot()
        with pytest.raises(ItemBusy):
            item_decide(item_public_id=item.public_id, reviewer=bob, decision="reject")
        assert _snapshot() == before
        release.set()
        t.join()
    assert results["alice"].won


@pytest.mark.django_db
def test_graph_failure_rolls_back_and_leaves_item_pending(alice, make_item):
    item = make_item()

    def explode(key):
        raise RuntimeError("checkpointer went away")

    before = _snapshot()
    with fault_inject("after_row_lock", explode), pytest.raises(RuntimeError):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    assert _snapshot() == before
    assert graph_pending_review(thread_id=item.thread_id) is not None


@pytest.mark.django_db
def test_commit_lost_after_resume_is_reconciled_from_the_graph(alice, bob, make_item):
    """Resume succeeded, commit failed: the next guarded look adopts the graph's decision."""
    item = make_item()

    def crash(key):
        raise ConnectionError("database connection dropped")

    with fault_inject("before_commit", crash), pytest.raises(ConnectionError):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject", note="dup")
    item.refresh_from_db()
    assert item.status == ItemStatus.PENDING and graph_pending_review(thread_id=item.thread_id) is None

    lost = item_decide(item_public_id=item.public_id, reviewer=bob, decision="approve")
    assert not lost.won and lost.winner == "alice" and lost.winner_status == "rejected"
    item.refresh_from_db()
    assert (item.status, item.decided_by, item.decision_note) == (ItemStatus.REJECTED, alice, "dup")
    assert graph_resume_count(thread_id=item.thread_id) == 1
    adopted = DecisionAttempt.objects.get(item=item, outcome=AttemptOutcome.WON)
    assert adopted.reviewer == alice and "adopted" in adopted.detail


@pytest.mark.django_db
def test_pending_item_whose_graph_vanished_needs_attention(alice, bob, make_item):
    item = make_item()
    QueueItem.objects.filter(pk=item.pk).update(thread_id=f"missing-{uuid.uuid4()}")
    with pytest.raises(ItemNeedsAttention, match="not waiting for review"):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    item.refresh_from_db()
    assert item.status == ItemStatus.NEEDS_ATTENTION and item.decided_by is None
    with pytest.raises(ItemNeedsAttention):
        item_decide(item_public_id=item.public_id, reviewer=bob, decision="reject")
    refused = DecisionAttempt.objects.filter(item=item)
    assert [a.outcome for a in refused] == [AttemptOutcome.INVALID, AttemptOutcome.INVALID]


@pytest.mark.django_db
def test_transient_node_failure_is_retried_by_langgraph(alice, make_item):
    item = make_item()
    failures = []

    def flaky(key):
        if len(failures) < 2:
            failures.append(key)
            raise ConnectionError("checkpoint store blinked")

    with fault_inject("in_apply_node", flaky):
        outcome = item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    assert outcome.won and len(failures) == 2
    assert graph_resume_count(thread_id=item.thread_id) == 1


@pytest.mark.django_db
def test_node_that_keeps_failing_leaves_item_visibly_needing_attention(alice, bob, make_item):
    item = make_item()

    def broken(key):
        raise KeyError("reporting service schema changed")

    with fault_inject("in_apply_node", broken), pytest.raises(ItemNeedsAttention, match="could not finish"):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject")
    item.refresh_from_db()
    assert item.status == ItemStatus.NEEDS_ATTENTION
    assert "alice's reject" in item.attention and "reporting service schema changed" in item.attention
    with pytest.raises(ItemNeedsAttention):
        item_decide(item_public_id=item.public_id, reviewer=bob, decision="approve")
    assert graph_resume_count(thread_id=item.thread_id) == 1


@pytest.mark.django_db
def test_events_are_sent_only_after_commit(alice, bob, make_item, monkeypatch, django_capture_on_commit_callbacks):
    item = make_item()
    sent = []
    monkeypatch.setattr("moderation.events.decision_broadcast", lambda *, outcome: sent.append(("decided", outcome.winner)))
    monkeypatch.setattr("moderation.events.loser_notify", lambda *, outcome, reviewer_id: sent.append(("lost", reviewer_id)))
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
        item_decide(item_public_id=item.public_id, reviewer=bob, decision="reject")
    assert sent == []
    for callback in callbacks:
        callback()
    assert sent == [("decided", "alice"), ("lost", bob.pk)]


@pytest.mark.django_db
def test_database_refuses_decided_item_without_winner(make_item):
    item = make_item()
    with pytest.raises(IntegrityError), transaction.atomic():
        QueueItem.objects.filter(pk=item.pk).update(status=ItemStatus.APPROVED)
    with pytest.raises(IntegrityError), transaction.atomic():
        QueueItem.objects.filter(pk=item.pk).update(decided_at=timezone.now())


@pytest.mark.django_db
def test_database_refuses_a_second_winning_attempt(alice, bob, make_item):
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    item.refresh_from_db()
    with pytest.raises(IntegrityError), transaction.atomic():
        DecisionAttempt.objects.create(
            item=item, reviewer=bob, requested="reject", outcome=AttemptOutcome.WON, winner=bob,
            winner_status="rejected", requested_at=timezone.now(), recorded_at=timezone.now(),
            seq=item.attempt_count + 1, entry_hash="0" * 64,
        )


@pytest.mark.django_db
def test_attempts_are_append_only(alice, make_item):
    item = make_item()
    outcome = item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    attempt = DecisionAttempt.objects.get(item=item, seq=outcome.attempt_seq)
    attempt.note = "rewritten"
    with pytest.raises(AppendOnlyError):
        attempt.save()
    with pytest.raises(AppendOnlyError):
        attempt.delete()


@pytest.mark.django_db
def test_hand_made_double_resume_is_refused_after_the_guard(alice, make_item):
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    graph_resume(thread_id=item.thread_id, decision="reject", reviewer="mallory", note="", decided_at="x")
    assert graph_resume_count(thread_id=item.thread_id) == 1
