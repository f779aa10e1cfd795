import threading
import uuid

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from moderation.core.faults import fault_inject
from moderation.graphs.runtime import graph_resume, graph_values
from moderation.items.models import ApplyState, AskStatus, ItemStatus, QueueItem, ReviewAsk
from moderation.records.models import AppendOnlyError, AttemptOutcome, DecisionAttempt
from moderation.review.decisions import (
    InvalidDecision,
    ItemBusy,
    ItemNeedsAttention,
    ItemNotFound,
    NotAModerator,
    item_decide,
)
from moderation.tests.graphs_support import item_resumes, item_waiting_on


def _snapshot():
    return (
        list(QueueItem.objects.values_list("public_id", "status", "decided_by", "decided_at", "decision_note", "apply_state")),
        list(ReviewAsk.objects.values_list("pk", "status", "decisions", "decided_by", "decided_at", "applied_at")),
        DecisionAttempt.objects.count(),
    )


def _waiting(item) -> bool:
    """The item's graph is still paused at its (one) ask, never resumed."""
    return item_waiting_on(item) == [item.asks.get().interrupt_id]


@pytest.mark.django_db
def test_winner_decides_the_ask_and_the_apply_resumes_the_graph_once(alice, make_item, django_capture_on_commit_callbacks):
    item = make_item()
    [ask] = item.asks.all()
    with django_capture_on_commit_callbacks(execute=True):
        outcome = item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve", note="fine")
    assert outcome.won and outcome.winner == "alice" and outcome.winner_status == "approved"
    assert outcome.ask == ask.interrupt_id and outcome.what == "approved publish"
    item.refresh_from_db()
    assert (item.status, item.decided_by, item.decision_note) == (ItemStatus.APPROVED, alice, "fine")
    ask.refresh_from_db()
    assert (ask.status, ask.decisions, ask.decided_by, ask.note) == (AskStatus.DECIDED, [{"type": "approve"}], alice, "fine")
    assert ask.applied_at is not None
    assert item_waiting_on(item) == [] and item_resumes(item) == 1
    assert item.apply_state == ApplyState.IDLE
    assert item.applied_result == {
        "state": "finished",
        "summary": "approved",
        "errors": [],
        "result": graph_values(name="moderation", thread_id=item.thread_id)["result"],
    }
    assert item.applied_result["result"]["status"] == "approved" and item.applied_result["result"]["reviewer"] == "alice"
    attempt = DecisionAttempt.objects.get(item=item, seq=outcome.attempt_seq)
    assert (attempt.outcome, attempt.winner, attempt.requested, attempt.ask) == (AttemptOutcome.WON, alice, "approve", ask)
    assert attempt.decisions == [{"type": "approve"}]


@pytest.mark.django_db
def test_the_guard_records_and_queues_but_never_resumes_in_the_request(alice, make_item, django_capture_on_commit_callbacks):
    item = make_item()
    with django_capture_on_commit_callbacks(execute=False):
        assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve").won
    item.refresh_from_db()
    assert (item.status, item.apply_state) == (ItemStatus.APPROVED, ApplyState.APPLYING)
    assert item.asks.get().applied_at is None
    assert _waiting(item) and item_resumes(item) == 0


@pytest.mark.django_db
def test_loser_is_told_who_won_and_nothing_of_theirs_is_applied(alice, bob, make_item, django_capture_on_commit_callbacks):
    item = make_item()
    with django_capture_on_commit_callbacks(execute=True):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
        lost = item_decide(item_public_id=item.public_id, reviewer=bob, decision="reject", note="spam")
    assert not lost.won
    assert (lost.winner, lost.winner_status, lost.requested) == ("alice", "approved", "reject")
    assert lost.message(now=lost.decided_at + timezone.timedelta(seconds=3)) == (
        "Already reviewed by alice (approved, 3 s ago) — your decision was not applied"
    )
    item.refresh_from_db()
    assert (item.status, item.decided_by, item.decision_note) == (ItemStatus.APPROVED, alice, "")
    assert item.asks.get().decisions == [{"type": "approve"}]
    assert item_resumes(item) == 1
    assert graph_values(name="moderation", thread_id=item.thread_id)["result"]["reviewer"] == "alice"
    attempt = DecisionAttempt.objects.get(item=item, seq=lost.attempt_seq)
    assert (attempt.outcome, attempt.reviewer, attempt.winner, attempt.winner_status) == (
        AttemptOutcome.LOST,
        bob,
        alice,
        "approved",
    )
    assert attempt.decisions == [{"type": "reject", "message": "spam"}]


@pytest.mark.django_db
@pytest.mark.parametrize("decision", ["delete", "", None, "APPROVE", 1, ["approve"]])
def test_invalid_decision_changes_nothing(alice, make_item, decision):
    item = make_item()
    before = _snapshot()
    with pytest.raises(InvalidDecision):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision=decision)
    assert _snapshot() == before
    assert _waiting(item)


@pytest.mark.django_db
def test_oversized_or_non_text_note_changes_nothing(alice, make_item, settings):
    item = make_item()
    before = _snapshot()
    with pytest.raises(InvalidDecision, match="longer than"):
        item_decide(
            item_public_id=item.public_id, reviewer=alice, decision="approve", note="x" * (settings.DECISION_NOTE_MAX_LENGTH + 1)
        )
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
@pytest.mark.parametrize("decision", ["approve", None])
def test_a_nul_in_the_note_is_refused_before_anything_is_locked(alice, make_item, decision):
    item = make_item()
    before = _snapshot()
    touched = []
    decisions = None if decision else [{"type": "reject", "message": "spam\x00"}]
    note = "bad\x00note" if decision else ""
    with fault_inject("after_item_lock", touched.append), pytest.raises(InvalidDecision, match="NUL") as refused:
        item_decide(item_public_id=item.public_id, reviewer=alice, decision=decision, decisions=decisions, note=note)
    assert refused.value.field == ("note" if decision else "decisions[0].message")
    assert touched == [] and _snapshot() == before and _waiting(item)


@pytest.mark.django_db
def test_unknown_ask_is_not_found_and_changes_nothing(alice, make_item):
    item = make_item()
    before = _snapshot()
    with pytest.raises(ItemNotFound, match="has no ask"):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve", ask="not-an-interrupt")
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
        decide = lambda: item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")  # noqa: E731
        t = threading.Thread(target=lambda: results.setdefault("alice", decide()))
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
def test_failure_under_the_row_lock_rolls_everything_back(alice, make_item):
    item = make_item()

    def explode(key):
        raise RuntimeError("database went away")

    before = _snapshot()
    with fault_inject("after_row_lock", explode), pytest.raises(RuntimeError):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    assert _snapshot() == before
    assert _waiting(item)


@pytest.mark.django_db
def test_commit_lost_decides_nothing_and_the_next_reviewer_wins(alice, bob, make_item, django_capture_on_commit_callbacks):
    """The graph is resumed only after a commit: a lost commit leaves nothing to adopt."""
    item = make_item()

    def crash(key):
        raise ConnectionError("database connection dropped")

    before = _snapshot()
    with (
        django_capture_on_commit_callbacks(execute=True) as callbacks,
        fault_inject("before_commit", crash),
        pytest.raises(ConnectionError),
    ):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject", note="dup")
    assert callbacks == [] and _snapshot() == before
    assert _waiting(item) and item_resumes(item) == 0

    with django_capture_on_commit_callbacks(execute=True):
        won = item_decide(item_public_id=item.public_id, reviewer=bob, decision="approve")
    assert won.won and won.winner == "bob"
    item.refresh_from_db()
    assert (item.status, item.decided_by) == (ItemStatus.APPROVED, bob)
    assert item_resumes(item) == 1
    assert [a.reviewer for a in DecisionAttempt.objects.filter(item=item)] == [bob]


@pytest.mark.django_db
def test_needs_attention_item_refuses_decisions_and_records_them(alice, bob, make_item):
    item = make_item()
    QueueItem.objects.filter(pk=item.pk).update(
        status=ItemStatus.NEEDS_ATTENTION, attention="its graph is not waiting for review"
    )
    with pytest.raises(ItemNeedsAttention, match="not waiting for review"):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    with pytest.raises(ItemNeedsAttention):
        item_decide(item_public_id=item.public_id, reviewer=bob, decision="reject")
    item.refresh_from_db()
    assert item.status == ItemStatus.NEEDS_ATTENTION and item.decided_by is None
    assert item.asks.get().status == AskStatus.PENDING
    refused = DecisionAttempt.objects.filter(item=item)
    assert [a.outcome for a in refused] == [AttemptOutcome.INVALID, AttemptOutcome.INVALID]
    assert _waiting(item)


@pytest.mark.django_db
def test_transient_node_failure_is_retried_by_langgraph(alice, make_item, django_capture_on_commit_callbacks):
    item = make_item()
    failures = []

    def flaky(key):
        if len(failures) < 2:
            failures.append(key)
            raise ConnectionError("checkpoint store blinked")

    with fault_inject("in_apply_node", flaky), django_capture_on_commit_callbacks(execute=True):
        outcome = item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    assert outcome.won and len(failures) == 2
    assert item_resumes(item) == 1
    item.refresh_from_db()
    assert item.apply_state == ApplyState.IDLE and item.applied_result["state"] == "finished"


@pytest.mark.django_db
def test_node_that_keeps_failing_leaves_the_decision_and_a_visible_failed_apply(
    alice, bob, make_item, django_capture_on_commit_callbacks
):
    item = make_item()

    def broken(key):
        raise KeyError("reporting service schema changed")

    with fault_inject("in_apply_node", broken), django_capture_on_commit_callbacks(execute=True):
        outcome = item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject")
    # The reviewer's decision stands (it won before the graph ran); the apply is what failed.
    assert outcome.won
    item.refresh_from_db()
    assert (item.status, item.decided_by, item.apply_state) == (ItemStatus.REJECTED, alice, ApplyState.FAILED)
    assert item.applied_result["state"] == "failed" and "reporting service schema changed" in item.applied_result["error"]
    assert item.asks.get().applied_at is None
    lost = item_decide(item_public_id=item.public_id, reviewer=bob, decision="approve")
    assert not lost.won and lost.winner == "alice"
    assert item_resumes(item) == 1


@pytest.mark.django_db
def test_events_are_sent_only_after_commit(alice, bob, make_item, monkeypatch, django_capture_on_commit_callbacks):
    item = make_item()
    sent = []
    monkeypatch.setattr("moderation.review.apply.item_apply", lambda *, item_id: sent.append(("applied", item_id)))
    monkeypatch.setattr(
        "moderation.records.events.decision_broadcast", lambda *, outcome: sent.append(("decided", outcome.winner))
    )
    monkeypatch.setattr(
        "moderation.records.events.loser_notify", lambda *, outcome, reviewer_id: sent.append(("lost", reviewer_id))
    )
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
        item_decide(item_public_id=item.public_id, reviewer=bob, decision="reject")
    assert sent == []
    for callback in callbacks:
        callback()
    assert sorted(sent, key=str) == sorted([("applied", item.pk), ("decided", "alice"), ("lost", bob.pk)], key=str)


@pytest.mark.django_db
def test_database_refuses_decided_item_without_winner(make_item):
    item = make_item()
    with pytest.raises(IntegrityError), transaction.atomic():
        QueueItem.objects.filter(pk=item.pk).update(status=ItemStatus.APPROVED)
    with pytest.raises(IntegrityError), transaction.atomic():
        QueueItem.objects.filter(pk=item.pk).update(decided_at=timezone.now())


@pytest.mark.django_db
def test_database_refuses_a_second_winning_attempt_on_an_ask(alice, bob, make_item):
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    item.refresh_from_db()
    with pytest.raises(IntegrityError), transaction.atomic():
        DecisionAttempt.objects.create(
            item=item,
            ask=item.asks.get(),
            reviewer=bob,
            requested="reject",
            outcome=AttemptOutcome.WON,
            winner=bob,
            winner_status="rejected",
            requested_at=timezone.now(),
            recorded_at=timezone.now(),
            seq=item.attempt_count + 1,
            entry_hash="0" * 64,
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
def test_hand_made_second_resume_of_an_applied_ask_changes_nothing(alice, make_item, django_capture_on_commit_callbacks):
    item = make_item()
    with django_capture_on_commit_callbacks(execute=True):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    interrupt_id = item.asks.get().interrupt_id
    answer = {"decisions": [{"type": "reject"}], "reviewer": "mallory"}
    graph_resume(name="moderation", thread_id=item.thread_id, answers={interrupt_id: answer})
    assert item_resumes(item) == 1
    assert graph_values(name="moderation", thread_id=item.thread_id)["result"]["status"] == "approved"
