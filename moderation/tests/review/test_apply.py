"""moderation.review.apply: the worker's half of a decision, applied exactly once whatever runs it."""

import threading
from contextlib import nullcontext, suppress
from datetime import timedelta
from unittest import mock

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone
from django_tasks.base import TaskResultStatus
from django_tasks_db.models import DBTaskResult

from moderation.core.faults import fault_inject
from moderation.core.taskqueue import QueueLane, TaskWake
from moderation.graphs.outcome import AppliedState
from moderation.graphs.runtime import graph_get, graph_is_finished, graph_run_counts, graph_state_read, graph_values
from moderation.items.models import ApplyState, AskStatus, ItemStatus, QueueItem
from moderation.review.apply import APPLY_QUEUE, ApplyOutcome, ApplyResult, applies_sweep, item_apply, item_apply_task
from moderation.review.decisions import item_decide, item_withdraw
from moderation.review.recovery import items_recover
from moderation.tests.graphs_support import item_forks, item_resumes, item_waiting_on
from moderation.tests.races import first_calls_meet

pytestmark = pytest.mark.django_db


def _decided_unapplied(item, reviewer, **kwargs):
    """A decision committed with its apply queued, the queue's worker never having run."""
    with override_settings(REVIEWQUEUE_APPLY_INLINE=False):
        assert item_decide(item_public_id=item.public_id, reviewer=reviewer, **kwargs).won
    item.refresh_from_db()
    assert item.apply_state == ApplyState.APPLYING and item_resumes(item) == 0 and item_waiting_on(item)
    return item


def test_decided_unapplied_ask_is_applied_once_and_a_second_apply_does_nothing(alice, make_item):
    item = _decided_unapplied(make_item(), alice, decision="approve")
    assert item_apply(item_id=item.pk) == [ApplyResult(ApplyOutcome.RECORDED, resumed=1, state=AppliedState.FINISHED)]
    assert item_apply(item_id=item.pk) == [ApplyResult(ApplyOutcome.NOTHING_TO_APPLY)]
    item.refresh_from_db()
    assert (item.apply_state, item.applied_result["state"]) == (ApplyState.IDLE, "finished")
    assert item.asks.get().applied_at is not None
    assert item_resumes(item) == 1 and item_waiting_on(item) == []


def test_recover_applies_a_decided_unapplied_ask_once(alice, make_item):
    item = _decided_unapplied(make_item(), alice, decision="reject", note="spam")
    [action] = items_recover().actions
    assert action.action == "applied its decision: resumed 1, finished"
    assert items_recover(include_decided=True).actions == []
    assert item_resumes(item) == 1
    assert graph_values(name="moderation", thread_id=item.thread_id)["result"]["status"] == "rejected"


def test_a_withdrawal_is_applied_as_withdrawn(make_viewer, make_item):
    item = make_item()
    with override_settings(REVIEWQUEUE_APPLY_INLINE=False):
        item_withdraw(item_public_id=item.public_id, by=make_viewer("svc"))
    assert item.asks.get().status == AskStatus.WITHDRAWN
    item_apply(item_id=item.pk)
    assert graph_values(name="moderation", thread_id=item.thread_id)["result"]["status"] == "withdrawn"
    assert item_resumes(item) == 1


@pytest.mark.parametrize("point", ["in_apply_node", "after_resume"])
def test_failed_apply_is_left_for_recover_which_finishes_it_once(alice, make_item, point):
    """The graph took the decision and then failed (a node raised, or reading it back did):
    recover runs it on from where it failed, never resuming the decision a second time."""
    item = _decided_unapplied(make_item(), alice, decision="approve")

    def down(key):
        raise ConnectionError("tool service down")

    with fault_inject(point, down):
        [failed] = item_apply(item_id=item.pk)
        assert failed.outcome == ApplyOutcome.FAILED and failed.error.startswith("ConnectionError: tool service down")
    item.refresh_from_db()
    assert (item.status, item.apply_state) == (ItemStatus.APPROVED, ApplyState.FAILED)
    assert item.applied_result == {
        "state": "failed",
        "summary": "",
        "error": "ConnectionError: tool service down",
        "errors": [{"where": "graph", "message": "ConnectionError: tool service down"}],
    }
    assert item.asks.get().applied_at is None
    # The worker's own retries and the sweep leave a failed item to the operator.
    assert item_apply(item_id=item.pk) == [ApplyResult(ApplyOutcome.FAILED_EARLIER)]
    assert applies_sweep(enqueue=lambda item_id: pytest.fail("a failed apply was queued again")) == 0
    [action] = items_recover().actions
    assert action.action == "applied its decision: resumed 0, finished"
    item.refresh_from_db()
    assert (item.apply_state, item.applied_result["state"]) == (ApplyState.IDLE, "finished")
    assert item_resumes(item) == 1 and item_forks(item) == 0
    assert items_recover().actions == []


def test_apply_killed_before_the_resume_is_resumed_by_the_next_run(alice, make_item):
    item = _decided_unapplied(make_item(), alice, decision="approve")

    def killed(key):
        raise SystemExit("worker killed")

    with fault_inject("before_resume", killed), pytest.raises(SystemExit):
        item_apply(item_id=item.pk)
    item.refresh_from_db()
    assert item.apply_state == ApplyState.APPLYING and item_resumes(item) == 0 and item_waiting_on(item)
    assert item_apply(item_id=item.pk) == [ApplyResult(ApplyOutcome.RECORDED, resumed=1, state=AppliedState.FINISHED)]
    assert item_resumes(item) == 1


def test_apply_killed_after_the_resume_records_without_resuming_again(alice, make_item):
    """The graph took the decision but the worker died before recording it: the next run only records."""
    item = _decided_unapplied(make_item(), alice, decision="approve")

    def killed(key):
        raise SystemExit("worker killed")

    with fault_inject("before_record", killed), pytest.raises(SystemExit):
        item_apply(item_id=item.pk)
    item.refresh_from_db()
    assert item.apply_state == ApplyState.APPLYING and item.asks.get().applied_at is None
    assert item_resumes(item) == 1
    assert item_apply(item_id=item.pk) == [ApplyResult(ApplyOutcome.RECORDED, resumed=0, state=AppliedState.FINISHED)]
    assert item_resumes(item) == 1


@pytest.mark.parametrize("point", ["in_review_node", "before_checkpoint", "in_apply_node"])
def test_apply_killed_inside_the_graph_run_is_run_to_the_graphs_end_by_the_next_run(alice, make_item, point):
    """Killed inside the resumed node (its answer not yet checkpointed), after it (its writes saved,
    its step's checkpoint not) or inside the next one (the resume's first checkpoint written,
    nothing left to resume): the retry runs the graph on to its end, resumed once, and only
    then records it as applied."""
    item = _decided_unapplied(make_item(), alice, decision="approve")

    def killed(key):
        raise SystemExit("worker killed")

    with fault_inject(point, killed), pytest.raises(SystemExit):
        item_apply(item_id=item.pk)
    item.refresh_from_db()
    assert item.apply_state == ApplyState.APPLYING and item.asks.get().applied_at is None
    assert [r.state for r in item_apply(item_id=item.pk)] == [AppliedState.FINISHED]
    item.refresh_from_db()
    assert (item.apply_state, item.applied_result) == (
        ApplyState.IDLE,
        {
            "state": "finished",
            "summary": "approved",
            "errors": [],
            "result": {"status": "approved", "reviewer": "alice", "decided_at": item.asks.get().decided_at.isoformat()},
        },
    )
    assert graph_is_finished(name=item.graph, thread_id=item.thread_id)
    assert item_resumes(item) == 1 and item_forks(item) == 0


def test_a_run_killed_before_its_steps_checkpoint_is_not_taken_for_finished(alice, make_item):
    """The resumed node's writes saved, its step's checkpoint not: LangGraph's ``next`` is empty
    then (the node is done and nothing after it is scheduled yet), which a worker once read as
    the graph's end and recorded, leaving it never run to its end (found with apply lanes, a
    worker killed while another lane's apply was at this point)."""
    item = _decided_unapplied(make_item(), alice, decision="approve")

    def killed(key):
        raise SystemExit("worker killed")

    with fault_inject("before_checkpoint", killed), pytest.raises(SystemExit):
        item_apply(item_id=item.pk)
    snapshot = graph_get(name=item.graph).get_state({"configurable": {"thread_id": item.thread_id}})
    # The trap, as LangGraph shows it: no node left in ``next``, one task of the step done.
    assert snapshot.next == () and [t.name for t in snapshot.tasks] == ["request_review"] and snapshot.tasks[0].result
    state = graph_state_read(name=item.graph, thread_id=item.thread_id)
    assert (state.finished, state.asks, state.stalled) == (False, [], True)
    runs = graph_run_counts(name=item.graph, thread_id=item.thread_id)
    assert (runs.resumes, runs.settled) == (0, False)


def test_recover_runs_on_a_decided_item_recorded_as_applied_while_its_graph_was_stalled(alice, make_item):
    """What the worker recorded before it checked for a stalled graph ("waiting", asks applied):
    ``recover --all`` runs the graph on to its end and records that."""
    item = _decided_unapplied(make_item(), alice, decision="reject")

    def killed(key):
        raise SystemExit("worker killed")

    with fault_inject("in_apply_node", killed), pytest.raises(SystemExit):
        item_apply(item_id=item.pk)
    item.asks.update(applied_at=timezone.now())
    QueueItem.objects.filter(pk=item.pk).update(apply_state=ApplyState.IDLE, applied_result={"state": "waiting"})
    assert not graph_is_finished(name=item.graph, thread_id=item.thread_id)
    [action] = items_recover(include_decided=True).actions
    assert action.action == "ran its graph on from where a killed run left it: resumed 0, finished"
    item.refresh_from_db()
    assert item.applied_result["state"] == "finished" and item.applied_result["result"]["status"] == "rejected"
    assert item_resumes(item) == 1 and graph_is_finished(name=item.graph, thread_id=item.thread_id)
    assert items_recover(include_decided=True).actions == []


def _apply_tasks(item, status):
    return DBTaskResult.objects.filter(task_path=item_apply_task.module_path, status=status, args_kwargs__args=[item.pk])


def test_sweep_queues_only_overdue_unapplied_decisions_no_task_will_run(alice, bob, make_item, settings):
    overdue = _decided_unapplied(make_item(title="overdue"), alice, decision="approve")
    make_item(title="pending")
    settings.APPLY_SWEEP_GRACE = 3600
    assert applies_sweep(enqueue=lambda item_id: pytest.fail("queued too early")) == 0
    settings.APPLY_SWEEP_GRACE = 0
    # A backlog: the decision's own task still waits in the queue, however long.
    assert applies_sweep(enqueue=lambda item_id: pytest.fail("queued again while its task waits")) == 0
    # A worker claimed it and died: the task stays RUNNING for good.
    _apply_tasks(overdue, TaskResultStatus.READY).update(
        status=TaskResultStatus.RUNNING, started_at=timezone.now() - timedelta(seconds=1)
    )
    assert applies_sweep() == 1
    assert _apply_tasks(overdue, TaskResultStatus.READY).count() == 1
    assert applies_sweep() == 0  # the task it queued waits: once, not once per sweep
    item_apply(item_id=overdue.pk)
    assert applies_sweep(enqueue=lambda item_id: pytest.fail("applied already")) == 0


@pytest.mark.django_db(transaction=True)
def test_two_workers_applying_one_item_at_once_resume_it_once(alice, make_item):
    """A duplicated task: the resume lock serialises the two, the second finds nothing to do."""
    item = _decided_unapplied(make_item(), alice, decision="approve")
    barrier = threading.Barrier(2)
    results = []

    def worker():
        from django.db import connection

        barrier.wait()
        try:
            results.append(item_apply(item_id=item.pk))
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sorted(results, key=lambda r: r[0].outcome) == [
        [ApplyResult(ApplyOutcome.NOTHING_TO_APPLY)],
        [ApplyResult(ApplyOutcome.RECORDED, resumed=1, state=AppliedState.FINISHED)],
    ]
    assert item_resumes(item) == 1 and item_forks(item) == 0
    assert QueueItem.objects.get(pk=item.pk).apply_state == ApplyState.IDLE


def test_a_decision_on_a_graph_not_loaded_waits_unapplied_and_the_sweep_queues_it_once_the_graph_is_back(
    alice,
    make_asking_item,
    settings,
):
    item = _decided_unapplied(make_asking_item(), alice, decision="approve")
    graphs = dict(settings.REVIEWQUEUE_GRAPHS)
    settings.REVIEWQUEUE_GRAPHS = {name: path for name, path in graphs.items() if name != item.graph}
    assert item_apply(item_id=item.pk) == [ApplyResult(ApplyOutcome.GRAPH_NOT_LOADED)]
    item.refresh_from_db()
    assert (item.apply_state, item.applied_result, item_resumes(item)) == (ApplyState.APPLYING, {}, 0)
    assert item.asks.get().applied_at is None
    # Its task ran; this worker's sweep does not queue it again and again for nothing.
    _apply_tasks(item, TaskResultStatus.READY).update(status=TaskResultStatus.SUCCESSFUL)
    settings.APPLY_SWEEP_GRACE = 0
    assert applies_sweep(enqueue=lambda item_id: pytest.fail("queued for a worker without its graph")) == 0
    settings.REVIEWQUEUE_GRAPHS = graphs
    queued: list[int] = []
    assert applies_sweep(enqueue=queued.append) == 1 and queued == [item.pk]
    assert item_apply(item_id=item.pk) == [ApplyResult(ApplyOutcome.RECORDED, resumed=1, state=AppliedState.FINISHED)]
    assert item_resumes(item) == 1


HOLD = 3.0  # seconds: see _two_lanes_apply_a_duplicated_task


def _two_lanes_apply_a_duplicated_task(item, *, hold: float = HOLD) -> list[str]:
    """One worker's two apply lanes, each taking one of the item's two apply tasks at once; what each task returned.

    Each lane waits at ``before_resume`` (up to ``hold`` s) for the other to get there too: under
    the resume lock the other cannot, so the hold only gives a missing lock its chance to show.
    """
    item_apply_task.enqueue(item.pk)  # the duplicate, beside the decision's own task
    both = threading.Barrier(2, timeout=hold)

    def hold(_key):
        with suppress(threading.BrokenBarrierError):
            both.wait()

    def lane(n):
        from django.db import connection

        try:
            QueueLane(
                wake=TaskWake(),
                queue_names=[APPLY_QUEUE],
                excluded_queue_names=[],
                batch=True,
                interval=0,
                backend_name="default",
                startup_delay=False,
                max_tasks=1,
                worker_id=f"lane-{n}",
            ).run()
        finally:
            connection.close()

    with fault_inject("before_resume", hold):
        threads = [threading.Thread(target=lane, args=(n,)) for n in range(2)]
        [t.start() for t in threads]
        [t.join() for t in threads]
    return sorted(DBTaskResult.objects.filter(task_path=item_apply_task.module_path).values_list("return_value", flat=True))


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
def test_two_apply_lanes_of_one_worker_on_one_items_duplicated_tasks_resume_it_once(alice, make_item):
    item = _decided_unapplied(make_item(), alice, decision="approve")
    assert _two_lanes_apply_a_duplicated_task(item) == ["nothing to apply", "resumed 1, finished"]
    assert item_resumes(item) == 1 and item_forks(item) == 0
    assert QueueItem.objects.get(pk=item.pk).apply_state == ApplyState.IDLE


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
def test_without_the_resume_lock_two_lanes_resume_one_item_twice(alice, make_item):
    """Negative control: the same two lanes with the resume lock taken away resume the graph twice."""
    item = _decided_unapplied(make_item(), alice, decision="approve")
    # Both lanes get there now, however busy the machine: the hold waits for the slower one's start-up, and each
    # lane's first read of the graph's state waits for the other's, so neither resumes before both have read the
    # interrupt (a CI run saw one lane's whole resume done before the other read it: "resumed 0").
    with (
        mock.patch("moderation.review.apply.thread_resume_lock", lambda *a, **k: nullcontext()),
        mock.patch("moderation.review.apply.graph_state_read", first_calls_meet(graph_state_read, parties=2)),
    ):
        _two_lanes_apply_a_duplicated_task(item, hold=120)
    assert item_resumes(item) == 2 or item_forks(item) >= 1


def _apply_after_the_checkpointers_connections_are_terminated(item) -> list[ApplyResult]:
    """``item_apply`` once every other backend of the database has been terminated (``pg_terminate_backend``,
    as an operator or a failover does): the checkpointer's idle pooled connections among them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        assert cursor.fetchone()[0] >= 1  # the checkpointer's pool keeps one connection at least
    return item_apply(item_id=item.pk)


def _pinned_connection():
    from moderation.core.checkpointer import checkpointer_get

    return checkpointer_get().conn  # the pinned saver's one connection, not a pool


def _resume_lock_backend_terminate(lock_connection=_pinned_connection) -> None:
    """From inside a graph's run: terminate the backend of the connection its resume lock is held on
    (which its checkpoints go over), as an operator's ``pg_terminate_backend`` or a failover would."""
    pid = lock_connection().info.backend_pid
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        assert cursor.fetchone()[0]


_postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="pg_terminate_backend")


def _apply_whose_lock_backend_is_terminated_in_the_resumed_node(item) -> list[ApplyResult]:
    """``item_apply``, the resume lock's backend terminated while the resumed node runs: the connection
    its run's checkpoints go over ends under it."""
    with fault_inject("in_review_node", lambda key: _resume_lock_backend_terminate()):
        return item_apply(item_id=item.pk)


@pytest.mark.postgres_variant
@_postgres_only
def test_an_apply_after_every_backend_was_terminated_resumes_at_once_on_new_connections(alice, make_item):
    item = _decided_unapplied(make_item(), alice, decision="approve")
    assert _apply_after_the_checkpointers_connections_are_terminated(item) == [
        ApplyResult(ApplyOutcome.RECORDED, resumed=1, state=AppliedState.FINISHED)
    ]


@pytest.mark.postgres_variant
@_postgres_only
def test_an_apply_whose_storage_connection_ends_under_it_is_tried_again_not_failed(alice, make_item):
    item = _decided_unapplied(make_item(), alice, decision="approve")
    [retrying] = _apply_whose_lock_backend_is_terminated_in_the_resumed_node(item)
    assert retrying.outcome == ApplyOutcome.RETRYING and retrying.error.startswith("the graph's storage: ")
    item.refresh_from_db()
    assert item.apply_state == ApplyState.APPLYING and item.applied_result["state"] == "applying"
    # Queued again, to run after a backoff (the decision's own task waits too: its run_after is the package's "now").
    retry = DBTaskResult.objects.filter(task_path=item_apply_task.module_path).order_by("run_after").first()
    assert retry.args_kwargs["args"] == [item.pk] and retry.run_after > timezone.now()
    assert [r.state for r in item_apply(item_id=item.pk)] == [AppliedState.FINISHED]  # the retry, on another connection
    assert item_resumes(item) == 1 and item_forks(item) == 0


@pytest.mark.postgres_variant
@_postgres_only
def test_negative_control_without_telling_a_lost_connection_apart_the_apply_is_failed_and_never_resumed(
    alice,
    make_item,
    monkeypatch,
):
    """What the soak found with pg_terminate: decided items left FAILED, their graphs never resumed."""
    item = _decided_unapplied(make_item(), alice, decision="approve")
    monkeypatch.setattr("moderation.review.apply.STORAGE_LOST", ())
    [failed] = _apply_whose_lock_backend_is_terminated_in_the_resumed_node(item)
    assert failed.outcome == ApplyOutcome.FAILED and failed.error.startswith("OperationalError: ")
    item.refresh_from_db()
    assert item.apply_state == ApplyState.FAILED
    assert applies_sweep(enqueue=lambda item_id: pytest.fail("a failed apply is queued again")) == 0
    assert item_resumes(item) == 0


def _lock_lost_under_a_run_then_taken_by_another_apply(
    item, lock_connection=_pinned_connection
) -> tuple[list[ApplyResult], list[ApplyResult]]:
    """Two applies of one item, as two worker processes (the in-process lock taken away: the PostgreSQL
    lock alone is between them). The first's lock is lost (its backend terminated) while its resumed
    node runs; the second then takes the lock and applies; only then does the first's node return.
    What each said."""
    in_node, released = threading.Event(), threading.Event()
    first_done: list[list[ApplyResult]] = []

    def hold(key):
        if not in_node.is_set():  # the first apply's node; the second's runs through
            _resume_lock_backend_terminate(lock_connection)
            in_node.set()
            assert released.wait(60)

    def first():
        try:
            first_done.append(item_apply(item_id=item.pk))
        finally:
            connection.close()

    with (
        fault_inject("in_review_node", hold),
        mock.patch("moderation.core.resumelock.item_lock", lambda key, timeout: nullcontext()),
    ):
        worker = threading.Thread(target=first)
        worker.start()
        assert in_node.wait(60)
        try:
            second = item_apply(item_id=item.pk)
        finally:
            released.set()
            worker.join(60)
    return first_done[0], second


@pytest.mark.postgres_variant
@_postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_worker_that_lost_its_resume_lock_writes_no_checkpoint_beside_the_next_holder(alice, make_item):
    """The soak's open finding on the resume side: a terminated backend frees the lock while its holder's
    graph runs on. The holder's checkpoints go over the lock's own connection, so it can no longer write."""
    item = _decided_unapplied(make_item(), alice, decision="approve")
    first, second = _lock_lost_under_a_run_then_taken_by_another_apply(item)
    assert [r.state for r in second] == [AppliedState.FINISHED], second
    [retrying] = first
    assert retrying.outcome == ApplyOutcome.RETRYING and retrying.error.startswith("the graph's storage:"), first
    assert item_resumes(item) == 1 and item_forks(item) == 0
    assert graph_run_counts(name=item.graph, thread_id=item.thread_id).settled
    assert item_apply(item_id=item.pk) == [ApplyResult(ApplyOutcome.NOTHING_TO_APPLY)]  # the first's retry


@pytest.mark.postgres_variant
@_postgres_only
@pytest.mark.django_db(transaction=True)
def test_negative_control_a_lock_whose_runs_write_over_other_connections_lets_both_resume(alice, make_item, monkeypatch):
    """The lock as it was (its runs' checkpoints over the pool's other connections): both runs write, the thread forks."""
    held = []
    monkeypatch.setattr("moderation.core.resumelock.checkpointer_pinned", lambda conn: held.append(conn) or nullcontext())
    item = _decided_unapplied(make_item(), alice, decision="approve")
    first, second = _lock_lost_under_a_run_then_taken_by_another_apply(item, lambda: held[0])
    assert item_forks(item) >= 1 or item_resumes(item) == 2, (first, second)
