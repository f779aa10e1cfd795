import pytest
from django.core.management import call_command

from moderation.decisions import ItemNeedsAttention, item_decide
from moderation.faults import fault_inject
from moderation.graph import graph_is_finished, graph_pending_review, graph_resume, graph_resume_count
from moderation.models import AttemptOutcome, DecisionAttempt, ItemStatus, QueueItem
from moderation.recovery import items_recover


def _crash(key):
    raise ConnectionResetError("server killed before commit")


@pytest.mark.django_db
def test_recover_adopts_a_decision_whose_commit_was_lost(alice, make_item):
    item = make_item()
    with fault_inject("before_commit", _crash), pytest.raises(ConnectionResetError):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    actions = items_recover()
    assert [a.action for a in actions] == ["adopted the graph's decision: approved by alice"]
    item.refresh_from_db()
    assert (item.status, item.decided_by) == (ItemStatus.APPROVED, alice)
    assert items_recover() == []  # idempotent
    assert DecisionAttempt.objects.filter(item=item, outcome=AttemptOutcome.WON).count() == 1


@pytest.mark.django_db
def test_recover_retries_a_failed_node_and_finishes_the_item(alice, make_item):
    item = make_item()
    with fault_inject("in_apply_node", lambda key: (_ for _ in ()).throw(KeyError("down"))):
        with pytest.raises(ItemNeedsAttention):
            item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject")
    assert QueueItem.objects.get(pk=item.pk).status == ItemStatus.NEEDS_ATTENTION
    actions = items_recover()
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
        actions = items_recover()
    assert "retrying the workflow failed again" in actions[0].action
    assert QueueItem.objects.get(pk=item.pk).status == ItemStatus.NEEDS_ATTENTION


@pytest.mark.django_db
def test_recover_rolls_a_decided_row_forward_into_its_paused_graph(alice, make_item):
    item = make_item()
    # A row decided behind the guard's back (e.g. restored from a backup taken mid-decision).
    QueueItem.objects.filter(pk=item.pk).update(status=ItemStatus.APPROVED, decided_by=alice, decided_at=item.created_at)
    assert items_recover() == []  # decided rows are only checked on request
    actions = items_recover(include_decided=True)
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
    assert "recover: 0 item(s) changed or need attention." in out
    assert graph_pending_review(thread_id=healthy.thread_id) is not None


@pytest.mark.django_db
def test_hand_resumed_graph_is_adopted_not_resumed_again(alice, bob, make_item):
    item = make_item()
    graph_resume(thread_id=item.thread_id, decision="approve", reviewer="alice", note="", decided_at=item.created_at.isoformat())
    outcome = item_decide(item_public_id=item.public_id, reviewer=bob, decision="reject")
    assert not outcome.won and outcome.winner == "alice"
    assert graph_resume_count(thread_id=item.thread_id) == 1


@pytest.mark.django_db
def test_recover_all_reports_a_decided_row_that_disagrees_with_its_graph(alice, bob, make_item, capsys):
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    QueueItem.objects.filter(pk=item.pk).update(status=ItemStatus.REJECTED, decided_by=bob)
    call_command("recover", "--all")
    out = capsys.readouterr().out
    assert "row disagrees with its graph, left as is: the item row's decision (reject, bob" in out
    assert "differs from its graph's (approve, alice" in out
    assert "recover: 1 item(s) changed or need attention." in out
    item.refresh_from_db()
    assert (item.status, item.decided_by) == (ItemStatus.REJECTED, bob)  # reported, not "repaired" either way
    assert graph_resume_count(thread_id=item.thread_id) == 1
