import pytest
from django.core.management import CommandError, call_command
from django.db import DataError

from moderation.decisions import ItemNeedsAttention, item_decide
from moderation.faults import fault_inject
from moderation.graph import graph_is_finished, graph_pending_review, graph_resume, graph_resume_count
from moderation.models import AttemptOutcome, DecisionAttempt, ItemStatus, QueueItem
from moderation import recovery
from moderation.recovery import items_recover


def _crash(key):
    raise ConnectionResetError("server killed before commit")


@pytest.mark.django_db
def test_recover_adopts_a_decision_whose_commit_was_lost(alice, make_item):
    item = make_item()
    with fault_inject("before_commit", _crash), pytest.raises(ConnectionResetError):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    actions = items_recover().actions
    assert [a.action for a in actions] == ["adopted the graph's decision: approved by alice"]
    item.refresh_from_db()
    assert (item.status, item.decided_by) == (ItemStatus.APPROVED, alice)
    assert items_recover().actions == []  # idempotent
    assert DecisionAttempt.objects.filter(item=item, outcome=AttemptOutcome.WON).count() == 1


@pytest.mark.django_db
def test_recover_retries_a_failed_node_and_finishes_the_item(alice, make_item):
    item = make_item()
    with fault_inject("in_apply_node", lambda key: (_ for _ in ()).throw(KeyError("down"))):
        with pytest.raises(ItemNeedsAttention):
            item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject")
    assert QueueItem.objects.get(pk=item.pk).status == ItemStatus.NEEDS_ATTENTION
    actions = items_recover().actions
    assert actions[0].action == "adopted the graph's decision: rejected by alice"
    item.refresh_from_db()
    assert item.status == ItemStatus.REJECTED and item.attention == ""
    assert graph_is_finished(thread_id=item.thread_id)
    assert graph_resume_count(thread_id=item.thread_id) == 1


@pytest.mark.django_db
def test_recover_keeps_flagging_while_the_node_still_fails(alice, make_item):
    item = make_item()
    boom = lambda key: (_ for _ in ()).throw(KeyError("still down"))  # noqa: E731
    with fault_inject("in_apply_node", boom):
        with pytest.raises(ItemNeedsAttention):
            item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject")
        actions = items_recover().actions
    assert "retrying the workflow failed again" in actions[0].action
    assert QueueItem.objects.get(pk=item.pk).status == ItemStatus.NEEDS_ATTENTION


@pytest.mark.django_db
def test_recover_rolls_a_decided_row_forward_into_its_paused_graph(alice, make_item):
    item = make_item()
    # A row decided behind the guard's back (e.g. restored from a backup taken mid-decision).
    QueueItem.objects.filter(pk=item.pk).update(status=ItemStatus.APPROVED, decided_by=alice, decided_at=item.created_at)
    assert items_recover().actions == []  # decided rows are only checked on request
    actions = items_recover(include_decided=True).actions
    assert actions[0].action == "resumed the graph with the recorded decision (approved)"
    assert graph_pending_review(thread_id=item.thread_id) is None
    assert graph_resume_count(thread_id=item.thread_id) == 1


@pytest.mark.django_db
def test_recover_leaves_healthy_items_alone_and_command_reports(alice, make_item, capsys):
    healthy = make_item()
    decided = make_item()
    item_decide(item_public_id=decided.public_id, reviewer=alice, decision="approve")
    call_command("recover", "--all")
    out = capsys.readouterr().out
    assert "recover: checked 2 item(s); 0 changed or need attention, 0 could not be repaired." in out
    assert graph_pending_review(thread_id=healthy.thread_id) is not None


@pytest.mark.django_db
def test_hand_resumed_graph_is_adopted_not_resumed_again(alice, bob, make_item):
    item = make_item()
    graph_resume(thread_id=item.thread_id, decision="approve", reviewer="alice", note="", decided_at=item.created_at.isoformat())
    outcome = item_decide(item_public_id=item.public_id, reviewer=bob, decision="reject")
    assert not outcome.won and outcome.winner == "alice"
    assert graph_resume_count(thread_id=item.thread_id) == 1


@pytest.mark.django_db
def test_one_item_that_cannot_be_repaired_does_not_stop_the_run(alice, make_item, monkeypatch, capsys):
    first, broken, last = make_item(title="first"), make_item(title="broken"), make_item(title="last")
    for item in (first, broken, last):  # each one's commit lost: all three need adopting
        with fault_inject("before_commit", _crash), pytest.raises(ConnectionResetError):
            item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    reconcile = recovery.item_reconcile_locked

    def reconcile_or_fail(*, item, retry):
        if item.pk == broken.pk:
            raise DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes\x00")
        return reconcile(item=item, retry=retry)

    monkeypatch.setattr(recovery, "item_reconcile_locked", reconcile_or_fail)
    with pytest.raises(CommandError) as failed:
        call_command("recover")
    assert failed.value.returncode == 2
    assert "checked 3 item(s); 2 changed or need attention, 1 could not be repaired" in str(failed.value)
    assert "could not repair: DataError" in capsys.readouterr().out
    statuses = dict(QueueItem.objects.values_list("title", "status"))
    assert statuses == {"first": ItemStatus.APPROVED, "broken": ItemStatus.NEEDS_ATTENTION, "last": ItemStatus.APPROVED}
    broken.refresh_from_db()
    assert broken.attention.startswith("recovery failed: DataError") and "\x00" not in broken.attention


@pytest.mark.postgres_variant
@pytest.mark.django_db
def test_a_nul_already_in_the_graph_is_adopted_readably_not_fatal(alice, make_item):
    """Before notes were validated, a NUL reached the graph and every later write failed on PostgreSQL."""
    item = make_item()
    graph_resume(
        thread_id=item.thread_id, decision="reject", reviewer="alice", note="bad\x00note", decided_at=item.created_at.isoformat()
    )
    report = items_recover()
    assert report.failed == 0
    item.refresh_from_db()
    assert (item.status, item.decided_by, item.decision_note) == (ItemStatus.REJECTED, alice, "bad\ufffdnote")
    adopted = DecisionAttempt.objects.get(item=item, outcome=AttemptOutcome.WON)
    assert "NUL" in adopted.detail


@pytest.mark.django_db
def test_recover_all_reports_a_decided_row_that_disagrees_with_its_graph(alice, bob, make_item, capsys):
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    QueueItem.objects.filter(pk=item.pk).update(status=ItemStatus.REJECTED, decided_by=bob)
    call_command("recover", "--all")
    out = capsys.readouterr().out
    assert "row disagrees with its graph, left as is: the item row's decision (reject, bob" in out
    assert "differs from its graph's (approve, alice" in out
    assert "recover: checked 1 item(s); 1 changed or need attention, 0 could not be repaired." in out
    item.refresh_from_db()
    assert (item.status, item.decided_by) == (ItemStatus.REJECTED, bob)  # reported, not "repaired" either way
    assert graph_resume_count(thread_id=item.thread_id) == 1
