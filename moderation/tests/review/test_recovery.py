"""manage.py recover: the rows can be ahead of the graph after a crash, never behind it."""

import pytest
from django.core.management import CommandError, call_command
from django.db import DataError
from django.test import override_settings

from moderation.core.faults import fault_inject
from moderation.graphs import runtime
from moderation.graphs.runtime import graph_is_finished, graph_resume, graph_values
from moderation.items.models import ApplyState, ItemStatus, QueueItem
from moderation.records.models import AttemptOutcome, DecisionAttempt
from moderation.review import recovery
from moderation.review.apply import ApplyOutcome, ApplyResult, item_apply
from moderation.review.decisions import ItemNeedsAttention, item_decide, item_withdraw
from moderation.review.items import item_create
from moderation.review.recovery import items_recover
from moderation.tests.graphs_support import item_forks, item_resumes, item_waiting_on


def _crash(key):
    raise ConnectionResetError("server killed before commit")


def _decided_unapplied(item, reviewer, decision="approve"):
    with override_settings(REVIEWQUEUE_APPLY_INLINE=False):
        assert item_decide(item_public_id=item.public_id, reviewer=reviewer, decision=decision).won
    return item


@pytest.mark.django_db
def test_a_lost_commit_leaves_nothing_to_recover(alice, make_item):
    item = make_item()
    with fault_inject("before_commit", _crash), pytest.raises(ConnectionResetError):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    assert items_recover().actions == []
    item.refresh_from_db()
    assert item.status == ItemStatus.PENDING and item_resumes(item) == 0
    assert not DecisionAttempt.objects.filter(item=item).exists()


@pytest.mark.django_db
def test_recover_applies_a_decision_the_worker_never_ran_exactly_once(alice, make_item):
    item = _decided_unapplied(make_item(), alice, decision="reject")
    [action] = items_recover().actions
    assert action.action == "applied its decision: resumed 1, finished"
    assert items_recover().actions == []  # idempotent
    assert item_resumes(item) == 1 and item_forks(item) == 0
    assert graph_values(name="moderation", thread_id=item.thread_id)["result"]["status"] == "rejected"
    assert DecisionAttempt.objects.filter(item=item, outcome=AttemptOutcome.WON).count() == 1


@pytest.mark.django_db
def test_recover_retries_a_failed_node_and_finishes_the_item(alice, make_item, django_capture_on_commit_callbacks):
    item = make_item()
    with (
        fault_inject("in_apply_node", lambda key: (_ for _ in ()).throw(KeyError("down"))),
        django_capture_on_commit_callbacks(execute=True),
    ):
        assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject").won
    assert QueueItem.objects.get(pk=item.pk).apply_state == ApplyState.FAILED
    [action] = items_recover().actions
    assert action.action == "applied its decision: resumed 0, finished"
    item.refresh_from_db()
    assert (item.status, item.apply_state, item.applied_result["state"]) == (ItemStatus.REJECTED, ApplyState.IDLE, "finished")
    assert graph_is_finished(name="moderation", thread_id=item.thread_id)
    assert item_resumes(item) == 1


@pytest.mark.django_db
def test_recover_keeps_reporting_while_the_node_still_fails(alice, make_item, django_capture_on_commit_callbacks):
    item = make_item()
    boom = lambda key: (_ for _ in ()).throw(KeyError("still down"))  # noqa: E731
    with fault_inject("in_apply_node", boom):
        with django_capture_on_commit_callbacks(execute=True):
            item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject")
        [action] = items_recover().actions
    assert action.action.startswith("applied its decision: failed: ") and "still down" in action.action
    assert QueueItem.objects.get(pk=item.pk).apply_state == ApplyState.FAILED
    assert item_resumes(item) == 1


@pytest.mark.django_db
def test_recover_leaves_healthy_items_alone_and_command_reports(alice, make_item, capsys, django_capture_on_commit_callbacks):
    healthy = make_item()
    decided = make_item()
    with django_capture_on_commit_callbacks(execute=True):
        item_decide(item_public_id=decided.public_id, reviewer=alice, decision="approve")
    call_command("recover", "--all")
    out = capsys.readouterr().out
    assert "recover: checked 2 item(s); 0 changed or need attention, 0 could not be repaired." in out
    assert item_waiting_on(healthy) == [healthy.asks.get().interrupt_id]


@pytest.mark.django_db
def test_a_graph_resumed_behind_the_guard_is_flagged_not_decided(alice, bob, make_item):
    item = make_item()
    interrupt_id = item.asks.get().interrupt_id
    graph_resume(
        name="moderation",
        thread_id=item.thread_id,
        answers={interrupt_id: {"decisions": [{"type": "approve"}], "reviewer": "mallory"}},
    )
    [action] = items_recover().actions
    assert action.action.startswith("needs attention: its graph is not waiting for review")
    with pytest.raises(ItemNeedsAttention):
        item_decide(item_public_id=item.public_id, reviewer=bob, decision="reject")
    assert item_resumes(item) == 1
    assert not DecisionAttempt.objects.filter(item=item, outcome=AttemptOutcome.WON).exists()


@pytest.mark.django_db
def test_one_item_that_cannot_be_repaired_does_not_stop_the_run(alice, make_item, monkeypatch, capsys):
    first, broken, last = make_item(title="first"), make_item(title="broken"), make_item(title="last")
    for item in (first, last):
        _decided_unapplied(item, alice)
    reconcile = recovery.item_reconcile

    def reconcile_or_fail(*, key):
        if key == str(broken.public_id):
            raise DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes\x00")
        return reconcile(key=key)

    monkeypatch.setattr(recovery, "item_reconcile", reconcile_or_fail)
    with pytest.raises(CommandError) as failed:
        call_command("recover")
    assert failed.value.returncode == 2
    assert "checked 3 item(s); 2 changed or need attention, 1 could not be repaired" in str(failed.value)
    assert "could not repair: DataError" in capsys.readouterr().out
    statuses = dict(QueueItem.objects.values_list("title", "status"))
    assert statuses == {"first": ItemStatus.APPROVED, "broken": ItemStatus.NEEDS_ATTENTION, "last": ItemStatus.APPROVED}
    assert item_resumes(first) == item_resumes(last) == 1
    broken.refresh_from_db()
    assert broken.attention.startswith("recovery failed: DataError") and "\x00" not in broken.attention


@pytest.mark.postgres_variant
@pytest.mark.django_db
def test_a_nul_in_a_graph_error_is_stored_readably(alice, make_item, django_capture_on_commit_callbacks):
    """A node's error can quote an item's text; PostgreSQL refuses NUL in what records it."""
    item = make_item()
    with fault_inject("in_apply_node", lambda key: (_ for _ in ()).throw(KeyError("bad\x00key"))):
        with django_capture_on_commit_callbacks(execute=True):
            item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject")
        report = items_recover()
    assert report.failed == 0
    item.refresh_from_db()
    assert item.apply_state == ApplyState.FAILED and "bad\\x00key" in item.applied_result["error"]


@pytest.mark.django_db
def test_items_of_a_graph_not_loaded_are_left_alone_and_carry_on_once_it_is_back(
    alice,
    bob,
    make_asking_item,
    settings,
    capsys,
    caplog,
    monkeypatch,
):
    """REVIEWQUEUE_EXTRA_GRAPHS forgotten on a restart: recover skips the graph's items with one
    line, no traceback, and marks none of them; a decision still wins and waits to be applied;
    with the graph back, each is applied once."""
    waiting, decided = make_asking_item(title="waiting"), make_asking_item(title="decided")
    _decided_unapplied(decided, alice)
    builtin = _decided_unapplied(make_asking_item(graph="moderation", title="builtin"), alice)
    graphs = dict(settings.REVIEWQUEUE_GRAPHS)
    settings.REVIEWQUEUE_GRAPHS = {name: path for name, path in graphs.items() if name != "t_hitl"}
    monkeypatch.setattr(runtime, "_compiled", {})  # a restart: nothing compiled yet

    def rows():
        return {
            title: (status, apply_state, attention, result.get("state"))
            for title, status, apply_state, attention, result in QueueItem.objects.values_list(
                "title", "status", "apply_state", "attention", "applied_result"
            )
        }

    call_command("recover")
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        "recover: skipped 2 item(s) of graph 't_hitl' is not loaded in this process (add it to REVIEWQUEUE_GRAPHS "
        "or REVIEWQUEUE_EXTRA_GRAPHS); they are left as they are, and carry on once it is back"
    ]
    assert "checked 1 item(s); 1 changed or need attention, 0 could not be repaired" in out  # the builtin one
    assert rows() == {
        "waiting": (ItemStatus.PENDING, "", "", None),
        "decided": (ItemStatus.APPROVED, ApplyState.APPLYING, "", None),
        "builtin": (ItemStatus.APPROVED, "", "", "finished"),
    }
    # Still decidable: the decision wins and waits, applying, for a worker that runs the graph.
    _decided_unapplied(waiting, bob)
    assert item_apply(item_id=waiting.pk) == [ApplyResult(ApplyOutcome.GRAPH_NOT_LOADED)]
    assert rows()["waiting"] == (ItemStatus.APPROVED, ApplyState.APPLYING, "", None)
    assert not [record for record in caplog.records if record.exc_info], "a traceback for an expected case"

    settings.REVIEWQUEUE_GRAPHS = graphs
    assert {a.title: a.action for a in items_recover().actions} == {
        "waiting": "applied its decision: resumed 1, finished",
        "decided": "applied its decision: resumed 1, finished",
    }
    assert {title: row[:2] + row[3:] for title, row in rows().items()} == {
        title: (ItemStatus.APPROVED, "", "finished") for title in ("waiting", "decided", "builtin")
    }
    assert item_resumes(waiting) == item_resumes(decided) == item_resumes(builtin) == 1


def _decided_applied(item, reviewer, django_capture_on_commit_callbacks, decision="approve"):
    with django_capture_on_commit_callbacks(execute=True):
        assert item_decide(item_public_id=item.public_id, reviewer=reviewer, decision=decision).won
    return item


@pytest.mark.parametrize("tampered", ["row and ask", "item row", "ask"])
@pytest.mark.django_db
def test_recover_all_reports_a_decided_row_that_disagrees_with_its_graph_and_leaves_it(
    alice, bob, make_item, capsys, django_capture_on_commit_callbacks, tampered
):
    item = _decided_applied(make_item(), alice, django_capture_on_commit_callbacks)
    healthy = _decided_applied(make_item(), alice, django_capture_on_commit_callbacks)
    # The graph holds alice's approval; the rows are changed behind the guard's back to say bob rejected.
    rejection = [{"type": "reject", "message": "spam"}]
    if tampered != "ask":
        QueueItem.objects.filter(pk=item.pk).update(status=ItemStatus.REJECTED, decided_by=bob)
    if tampered != "item row":
        item.asks.update(decided_by=bob, decisions=rejection)
    before = list(QueueItem.objects.order_by("pk").values_list("status", "decided_by", "apply_state"))
    interrupt_id = item.asks.get().interrupt_id

    assert items_recover().actions == []  # without --all, decided items are not read
    call_command("recover", "--all")
    out = capsys.readouterr().out
    assert "checked 2 item(s); 1 changed or need attention, 0 could not be repaired" in out
    [line] = [line for line in out.splitlines() if line.startswith(str(item.public_id))]
    reports = {
        "row and ask": f"ask {interrupt_id}: the row says bob rejected publish (“spam”); "
        "its graph was resumed with alice's: approved publish",
        "ask": f"ask {interrupt_id}: the row says bob rejected publish (“spam”); "
        "its graph was resumed with alice's: approved publish",
        "item row": f"the item row says rejected by bob; the ask {interrupt_id} that decided it (its graph holds it) "
        "says approved by alice",
    }
    assert line.endswith(f"decided row disagrees with its graph, left as it is (see verify_audit): {reports[tampered]}")
    assert str(healthy.public_id) not in out
    assert list(QueueItem.objects.order_by("pk").values_list("status", "decided_by", "apply_state")) == before
    assert item_resumes(item) == 1


@pytest.mark.django_db
def test_recover_all_finds_every_kind_of_healthy_decision_in_agreement(
    alice, bob, carol, payments, make_asking_item, make_item, make_viewer, django_capture_on_commit_callbacks
):
    edited = make_asking_item(graph="t_refund")
    both = make_asking_item(graph="t_parallel")
    quorum = item_create(title="Refund", body="Order 7.", source="shop", team="payments", policy={"approvals": 2})
    withdrawn = make_item()
    with django_capture_on_commit_callbacks(execute=True):
        ask = edited.asks.get()
        item_decide(
            item_public_id=edited.public_id,
            reviewer=alice,
            ask=ask.interrupt_id,
            decisions=[
                {
                    "type": "edit",
                    "edited_action": {"name": "refund", "args": {**ask.payload["action_requests"][0]["args"], "amount": 80}},
                }
            ],
        )
        for ask in both.asks.all():
            item_decide(item_public_id=both.public_id, reviewer=bob, ask=ask.interrupt_id, decision="reject", note="no")
        item_decide(item_public_id=quorum.public_id, reviewer=alice, decision="approve")
        item_decide(item_public_id=quorum.public_id, reviewer=bob, decision="approve")
        item_withdraw(item_public_id=withdrawn.public_id, by=make_viewer("svc"), reason="sent twice")
    assert QueueItem.objects.filter(apply_state="").count() == 4
    assert items_recover(include_decided=True).actions == []
