"""Asks of any graph, decided once each: every decision type round-trips into the graph,
bad decisions change nothing, and races (threads and processes) keep one winner per ask.

Small asking graphs come from moderation.tests.graphs_support (the ``test_graphs``
fixture registers them). Races are judged by the history checker (moderation.lab.history)
and the graphs' checkpoint history (resume counts, forks); the negative control runs
the same race through the lab's naive strategy and sees the fork.
"""

import threading
import time

import pytest
from django.db import connection

from moderation.graphs.asks import ActionEdit, ArgChange, ArgChangeKind, AskSpec, ask_edits_diff, decisions_describe
from moderation.graphs.runtime import graph_values
from moderation.items.models import ApplyState, AskStatus, ItemStatus, QueueItem, ReviewAsk
from moderation.lab.harness import race_processes, race_threads
from moderation.lab.history import HistoryRecorder, history_check, history_final_read, history_wait_applied
from moderation.records.models import AttemptOutcome, DecisionAttempt
from moderation.review.decisions import InvalidDecision, item_decide
from moderation.review.recovery import items_recover
from moderation.tests.graphs_support import REFUND_ARGS, TEST_GRAPHS_ENV, item_forks, item_resumes, item_waiting_on
from moderation.tests.races import guard_held_assert

EDIT_80 = {"type": "edit", "edited_action": {"name": "refund", "args": {"amount": 80, "to": "acct-1"}}}
TWO_ROUNDS = {"asks": 2}  # t_hitl asks twice in a row: round 2 opens when round 1 is applied
DECISIONS = {
    "approve": ({"type": "approve"}, ItemStatus.APPROVED, "approved refund"),
    "edit": (EDIT_80, ItemStatus.EDITED, "edited refund (amount 120 → 80)"),
    "reject": ({"type": "reject", "message": "too much"}, ItemStatus.REJECTED, "rejected refund (“too much”)"),
    "respond": ({"type": "respond", "message": "ask finance"}, ItemStatus.ANSWERED, "answered refund (“ask finance”)"),
}


def _snapshot(item):
    return (
        list(QueueItem.objects.filter(pk=item.pk).values_list("status", "decided_by", "apply_state")),
        list(ReviewAsk.objects.filter(item=item).values_list("status", "decisions", "decided_by", "applied_at")),
        DecisionAttempt.objects.filter(item=item).count(),
        item_waiting_on(item),
    )


# --- each decision type, through the guard, into the graph -------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("kind", list(DECISIONS))
def test_each_decision_type_round_trips_into_the_graphs_state(alice, make_asking_item, kind, django_capture_on_commit_callbacks):
    decision, status, what = DECISIONS[kind]
    item = make_asking_item()
    [ask] = item.asks.all()
    with django_capture_on_commit_callbacks(execute=True):
        outcome = item_decide(item_public_id=item.public_id, reviewer=alice, ask=ask.interrupt_id, decisions=[decision], note="n")
    assert outcome.won and outcome.what == what and outcome.winner_status == status
    item.refresh_from_db()
    assert (item.status, item.decided_by, item.apply_state) == (status, alice, ApplyState.IDLE)
    [answer] = graph_values(name="t_hitl", thread_id=item.thread_id)["answers"]
    assert answer["node"] == "ask"
    assert answer["value"]["decisions"] == [decision]  # exactly what the reviewer sent, in LangChain's shape
    assert (answer["value"]["reviewer"], answer["value"]["note"]) == ("alice", "n")
    assert item.applied_result == {"state": "finished", "summary": "", "errors": [], "result": {"answers": 1, "types": [kind]}}
    assert item_resumes(item) == 1 and item_forks(item) == 0
    attempt = DecisionAttempt.objects.get(item=item)
    assert (attempt.requested, attempt.decisions, attempt.ask_id) == (kind, [decision], ask.pk)


@pytest.mark.django_db
def test_json_endpoint_takes_langchain_decisions(client, alice, make_asking_item, django_capture_on_commit_callbacks):
    item = make_asking_item()
    client.force_login(alice)
    ask = item.asks.get().interrupt_id
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(
            f"/api/items/{item.public_id}/decision", {"ask": ask, "decisions": [EDIT_80]}, content_type="application/json"
        )
    assert answer.status_code == 200
    body = answer.json()
    assert (body["outcome"], body["status"], body["ask"], body["what"]) == (
        "won",
        "edited",
        ask,
        "edited refund (amount 120 → 80)",
    )
    assert graph_values(name="t_hitl", thread_id=item.thread_id)["answers"][0]["value"]["decisions"] == [EDIT_80]


# --- bad decisions change nothing ------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("decisions", "field", "words"),
    [
        ([EDIT_80], "decisions[0].type", "publish allows approve, reject, not edit"),
        ([{"type": "respond", "message": "hi"}], "decisions[0].type", "not respond"),
        ([{"type": "delete"}], "decisions[0].type", "type must be one of"),
        ([{"type": "approve"}, {"type": "approve"}], "decisions", "send exactly 1 decision"),
        ({"type": "approve"}, "decisions", "must be a list"),
    ],
)
def test_a_decision_the_ask_does_not_allow_is_refused_and_changes_nothing(alice, make_item, decisions, field, words):
    item = make_item()  # the moderation graph allows approve and reject only
    before = _snapshot(item)
    with pytest.raises(InvalidDecision, match=words) as refused:
        item_decide(item_public_id=item.public_id, reviewer=alice, decisions=decisions)
    assert refused.value.field == field
    assert _snapshot(item) == before
    assert item.asks.get().status == AskStatus.PENDING and item_waiting_on(item) == [item.asks.get().interrupt_id]


@pytest.mark.django_db
def test_a_refused_type_is_a_400_naming_the_field(client, alice, make_item):
    item = make_item()
    client.force_login(alice)
    before = _snapshot(item)
    answer = client.post(f"/api/items/{item.public_id}/decision", {"decisions": [EDIT_80]}, content_type="application/json")
    assert answer.status_code == 400
    assert (answer.json()["error"], answer.json()["field"]) == ("invalid_decision", "decisions[0].type")
    assert _snapshot(item) == before


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"amount": 500, "to": "acct-1"}, "decisions[0].edited_action.args.amount"),
        ({"amount": "80", "to": "acct-1"}, "decisions[0].edited_action.args.amount"),
        ({"amount": 80}, "decisions[0].edited_action.args"),
        ({"amount": 80, "to": "acct-1", "extra": 1}, "decisions[0].edited_action.args.extra"),
        ({"amount": 80, "to": "acct\x00-1"}, "decisions[0].edited_action.args.to"),
    ],
)
def test_edited_args_failing_the_schema_are_refused_with_their_path(alice, make_asking_item, args, field):
    item = make_asking_item()
    before = _snapshot(item)
    edit = {"type": "edit", "edited_action": {"name": "refund", "args": args}}
    with pytest.raises(InvalidDecision) as refused:
        item_decide(item_public_id=item.public_id, reviewer=alice, decisions=[edit])
    assert refused.value.field == field
    assert _snapshot(item) == before


@pytest.mark.django_db
def test_an_edit_cannot_change_which_action_runs(alice, make_asking_item):
    item = make_asking_item()
    before = _snapshot(item)
    edit = {"type": "edit", "edited_action": {"name": "delete_account", "args": REFUND_ARGS}}
    with pytest.raises(InvalidDecision) as refused:
        item_decide(item_public_id=item.public_id, reviewer=alice, decisions=[edit])
    assert refused.value.field == "decisions[0].edited_action.name"
    assert _snapshot(item) == before


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["reject", "respond"])
def test_a_nul_in_a_message_is_refused(alice, make_asking_item, kind):
    item = make_asking_item()
    before = _snapshot(item)
    with pytest.raises(InvalidDecision, match="NUL") as refused:
        item_decide(item_public_id=item.public_id, reviewer=alice, decisions=[{"type": kind, "message": "no\x00"}])
    assert refused.value.field == "decisions[0].message"
    assert _snapshot(item) == before


@pytest.mark.django_db
def test_a_response_needs_a_message(alice, make_asking_item):
    item = make_asking_item()
    with pytest.raises(InvalidDecision) as refused:
        item_decide(item_public_id=item.public_id, reviewer=alice, decisions=[{"type": "respond"}])
    assert refused.value.field == "decisions[0].message"


# --- parallel asks and rounds ---------------------------------------------------------


@pytest.mark.django_db
def test_two_parallel_asks_are_decided_separately_and_applied_together(
    alice, bob, make_asking_item, django_capture_on_commit_callbacks
):
    item = make_asking_item("t_parallel")
    left, right = item.asks.order_by("position")
    assert [a.payload["action_requests"][0]["name"] for a in (left, right)] == ["refund", "notify"]
    with pytest.raises(InvalidDecision, match="2 open asks") as refused:
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    assert refused.value.field == "ask"
    with django_capture_on_commit_callbacks(execute=True):
        assert item_decide(item_public_id=item.public_id, reviewer=alice, ask=left.interrupt_id, decision="approve").won
    item.refresh_from_db()
    # One ask still open: the item is still pending, its graph waits on the other.
    assert (item.status, item.decided_by) == (ItemStatus.PENDING, None)
    assert item_waiting_on(item) == [right.interrupt_id]
    with django_capture_on_commit_callbacks(execute=True):
        edit = EDIT_80 | {"edited_action": {"name": "notify", "args": {"amount": 1, "to": "x"}}}
        won = item_decide(item_public_id=item.public_id, reviewer=bob, ask=right.interrupt_id, decisions=[edit])
    assert won.won
    item.refresh_from_db()
    assert (item.status, item.decided_by, item.apply_state) == (ItemStatus.EDITED, bob, ApplyState.IDLE)
    assert sorted(a["node"] for a in graph_values(name="t_parallel", thread_id=item.thread_id)["answers"]) == ["left", "right"]
    assert item.applied_result["result"]["answers"] == 2
    assert item_resumes(item) == 1 and item_forks(item) == 0


@pytest.mark.django_db
def test_a_second_round_reopens_the_item_and_the_first_stays_decided(
    alice, bob, make_asking_item, django_capture_on_commit_callbacks
):
    item = make_asking_item(graph_input=TWO_ROUNDS)
    [first] = item.asks.all()
    with django_capture_on_commit_callbacks(execute=True):
        assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve").won
    item.refresh_from_db()
    first.refresh_from_db()
    second = item.asks.get(round=2)
    assert (item.status, item.decided_by, item.applied_result["state"]) == (ItemStatus.PENDING, None, "asked again")
    assert (first.status, first.decided_by) == (AskStatus.DECIDED, alice) and first.applied_at is not None
    assert item_waiting_on(item) == [second.interrupt_id]
    # A late decision of the first round loses to its winner; it does not touch round 2.
    late = item_decide(item_public_id=item.public_id, reviewer=bob, ask=first.interrupt_id, decision="reject")
    assert not late.won and late.winner == "alice"
    with django_capture_on_commit_callbacks(execute=True):
        assert item_decide(item_public_id=item.public_id, reviewer=bob, decision="reject").won
    item.refresh_from_db()
    assert (item.status, item.decided_by) == (ItemStatus.REJECTED, bob)
    assert item.applied_result == {
        "state": "finished",
        "summary": "",
        "errors": [],
        "result": {"answers": 2, "types": ["approve", "reject"]},
    }
    assert item_resumes(item) == 2 and item_forks(item) == 0


@pytest.mark.django_db
def test_a_graph_that_raises_after_the_decision_is_failed_not_resumed_again(
    alice, make_asking_item, django_capture_on_commit_callbacks
):
    item = make_asking_item("t_failing")
    with django_capture_on_commit_callbacks(execute=True):
        assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve").won
    item.refresh_from_db()
    assert (item.status, item.apply_state) == (ItemStatus.APPROVED, ApplyState.FAILED)
    assert "downstream tool is down" in item.applied_result["error"]
    # recover runs the failed node again (it still fails), but never re-answers the ask.
    [action] = items_recover().actions
    assert action.action.startswith("applied its decision: failed: ") and "downstream tool is down" in action.action
    assert item_resumes(item) == 1 and item_forks(item) == 0
    assert QueueItem.objects.get(pk=item.pk).apply_state == ApplyState.FAILED


# --- races ---------------------------------------------------------------------------

RACE_KINDS = ["approve", "edit", "reject"]


def _race_one_ask(items, users, *, ask_of=None):
    """Every user decides each item's ask at once (approve, edit, reject in turn); returns the history."""
    history = HistoryRecorder()
    barrier = threading.Barrier(len(users))
    told = {}

    def reviewer(index, user):
        kind = RACE_KINDS[index % len(RACE_KINDS)]
        try:
            for item in items:
                ask = ask_of(item) if ask_of else None
                barrier.wait(timeout=60)
                op = history.invoke(reviewer=user.username, item=str(item.public_id), decision=kind)
                try:
                    outcome = item_decide(item_public_id=item.public_id, reviewer=user, ask=ask, decisions=[DECISIONS[kind][0]])
                except Exception as exc:
                    history.complete(op, completion="unknown", error=f"{type(exc).__name__}: {exc}")
                    continue
                told[(str(item.public_id), user.username)] = outcome
                history.complete(op, completion="ok" if outcome.won else "fail", told_winner=outcome.winner)
        finally:
            connection.close()

    threads = [threading.Thread(target=reviewer, args=(i, u)) for i, u in enumerate(users)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    return history, told


def _judge(history, items):
    keys = [str(i.public_id) for i in items]
    history_wait_applied(items=keys)
    return history_check(ops=history.ops, final=history_final_read(items=keys))


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("reviewers", [4, 8])
def test_reviewers_racing_approve_edit_reject_on_one_ask_have_one_winner(make_moderator, make_asking_item, reviewers):
    users = [make_moderator() for _ in range(reviewers)]
    items = [make_asking_item(title=f"race {i}") for i in range(12)]
    history, told = _race_one_ask(items, users)
    assert [str(a) for a in _judge(history, items)] == []
    assert [op.error for op in history.ops if op.error] == []
    kinds_won = set()
    for item in items:
        item.refresh_from_db()
        ask = item.asks.get()
        winner = ask.decided_by.username
        [won] = DecisionAttempt.objects.filter(ask=ask, outcome=AttemptOutcome.WON)
        assert won.reviewer.username == winner and won.decisions == ask.decisions
        kinds_won.add(won.requested)
        for (key, username), outcome in told.items():
            if key != str(item.public_id):
                continue
            assert outcome.winner == winner
            assert outcome.won == (username == winner)
            # A loser is told what the winner decided, in words, for this ask.
            assert outcome.ask == ask.interrupt_id and outcome.what == DECISIONS[won.requested][2]
        assert [a["value"]["decisions"] for a in graph_values(name="t_hitl", thread_id=item.thread_id)["answers"]] == [
            ask.decisions
        ]
        assert item_resumes(item) == 1 and item_forks(item) == 0
        assert DecisionAttempt.objects.filter(item=item).count() == reviewers
    assert len(kinds_won) >= 2, f"every race was won by the same decision type: {kinds_won}"


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
def test_two_asks_of_one_item_decided_at_the_same_instant_are_both_applied(make_moderator, make_asking_item):
    alice, bob = make_moderator(), make_moderator()
    items = [make_asking_item("t_parallel", title=f"pair {i}") for i in range(15)]
    barrier = threading.Barrier(2)
    results = []

    def reviewer(user, position):
        try:
            for item in items:
                ask = item.asks.get(position=position).interrupt_id
                barrier.wait(timeout=60)
                results.append(item_decide(item_public_id=item.public_id, reviewer=user, ask=ask, decision="approve"))
        finally:
            connection.close()

    threads = [threading.Thread(target=reviewer, args=(alice, 0)), threading.Thread(target=reviewer, args=(bob, 1))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(results) == 30 and all(r.won for r in results)
    history_wait_applied(items=[str(i.public_id) for i in items])
    for item in items:
        item.refresh_from_db()
        assert item.status == ItemStatus.APPROVED and item.decided_by in (alice, bob)
        assert item.apply_state == ApplyState.IDLE and item.applied_result["state"] == "finished"
        assert item.applied_result["result"]["answers"] == 2
        assert not item.asks.filter(applied_at__isnull=True).exists()
        # Applied in one resume or two partial ones: the checkpoint history shows one step past the asks, never a fork.
        assert item_forks(item) == 0 and item_resumes(item) == 1
        assert item_waiting_on(item) == []


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
def test_a_second_round_raced_right_after_the_first(make_moderator, make_asking_item):
    users = [make_moderator() for _ in range(4)]
    items = [make_asking_item(title=f"rounds {i}", graph_input=TWO_ROUNDS) for i in range(8)]
    first_round, told1 = _race_one_ask(items, users)

    def second_ask(item):
        # Right after the first round: wait only until its winner's apply has opened round 2.
        deadline = time.monotonic() + 30
        while not (ask := ReviewAsk.objects.filter(item=item, round=2).first()) and time.monotonic() < deadline:
            time.sleep(0.01)
        return ask.interrupt_id

    second_round, told2 = _race_one_ask(items, users, ask_of=second_ask)
    for item in items:
        item.refresh_from_db()
        assert item.status in (ItemStatus.APPROVED, ItemStatus.EDITED, ItemStatus.REJECTED)
        for ask in item.asks.all():
            assert DecisionAttempt.objects.filter(ask=ask, outcome=AttemptOutcome.WON).count() == 1
            assert DecisionAttempt.objects.filter(ask=ask).count() == len(users)
        # The history checker judges whole items; with two asks per item, each round is judged per ask here.
        first, second = item.asks.order_by("round")
        for told, ask in ((told1, first), (told2, second)):
            mine = [o for (key, _), o in told.items() if key == str(item.public_id)]
            assert {o.winner for o in mine} == {ask.decided_by.username} and {o.ask for o in mine} == {ask.interrupt_id}
            assert [o.winner for o in mine if o.won] == [ask.decided_by.username]
        assert item.decided_by == second.decided_by
        assert item.applied_result["state"] == "finished" and item.applied_result["result"]["answers"] == 2
        assert item_resumes(item) == 2 and item_forks(item) == 0
    assert [op.error for op in first_round.ops + second_round.ops if op.error] == []


@pytest.mark.django_db(transaction=True)
def test_negative_control_naive_resumes_fork_an_asking_graph(make_moderator, make_asking_item):
    """The same agent-style graph, decided by the lab's naive check-then-act (no guard, no
    resume lock): LangGraph runs both resumes, the checkpoint history forks, the checker sees it."""
    users = [make_moderator().username for _ in range(4)]
    items = [make_asking_item(title=f"naive {i}") for i in range(6)]
    keys = [str(i.public_id) for i in items]
    report = race_threads(strategy="naive", items=keys, usernames=users, delay=0.05)
    assert report.errors == []
    assert {"double_resume", "multiple_winners"} <= {a.kind for a in report.anomalies}
    assert sum(item_forks(item) for item in items) >= 1


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
def test_guarded_race_on_the_same_graph_has_no_fork(make_moderator, make_asking_item):
    """The negative control's positive twin: the guard, same graph, same harness."""
    users = [make_moderator().username for _ in range(4)]
    items = [make_asking_item(title=f"guarded {i}") for i in range(20)]
    keys = [str(i.public_id) for i in items]
    report = race_threads(strategy="guarded", items=keys, usernames=users, delay=0.0)
    guard_held_assert(report, items=keys, reviewers=4)
    assert sum(item_forks(item) for item in items) == 0


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
def test_processes_racing_on_asks_have_one_winner(make_moderator, make_asking_item):
    users = [make_moderator().username for _ in range(3)]
    items = [make_asking_item(title=f"procs {i}") for i in range(15)]
    keys = [str(i.public_id) for i in items]
    report = race_processes(strategy="guarded", items=keys, usernames=users, delay=0.0, extra_env=TEST_GRAPHS_ENV)
    guard_held_assert(report, items=keys, reviewers=3)
    assert sum(item_forks(item) for item in items) == 0
    assert all(QueueItem.objects.get(pk=i.pk).applied_result["state"] == "finished" for i in items)


@pytest.mark.django_db(transaction=True)
def test_negative_control_naive_processes_fork_an_asking_graph(make_moderator, make_asking_item):
    users = [make_moderator().username for _ in range(2)]
    items = [make_asking_item(title=f"naive procs {i}") for i in range(6)]
    keys = [str(i.public_id) for i in items]
    report = race_processes(strategy="naive", items=keys, usernames=users, delay=0.05, extra_env=TEST_GRAPHS_ENV)
    assert report.double_resumes >= 1 and sum(item_forks(item) for item in items) >= 1


# --- what an edit changed ---------------------------------------------------------------


def _refund_spec(**args):
    return AskSpec(
        kind="batched",
        actions=[
            {"name": "refund", "args": args, "description": ""},
            {"name": "notify", "args": {"to": "ann"}, "description": ""},
        ],
        configs=[
            {"action_name": "refund", "allowed_decisions": ["edit"]},
            {"action_name": "notify", "allowed_decisions": ["approve", "edit"]},
        ],
    )


def test_the_diff_names_each_argument_changed_added_or_removed_per_edit():
    spec = _refund_spec(order_id="A-1", amount=120, memo="late", notify=True)
    edited = {"order_id": "A-1", "amount": 80, "notify": 1, "currency": "EUR"}
    [edit] = ask_edits_diff(
        spec=spec, decisions=[{"type": "edit", "edited_action": {"name": "refund", "args": edited}}, {"type": "approve"}]
    )
    assert (edit.index, edit.action) == (0, "refund")
    assert edit.changes == (
        ArgChange(arg="amount", kind=ArgChangeKind.CHANGED, before=120, after=80),
        ArgChange(arg="memo", kind=ArgChangeKind.REMOVED, before="late"),
        ArgChange(arg="notify", kind=ArgChangeKind.CHANGED, before=True, after=1),  # JSON's true is not 1
        ArgChange(arg="currency", kind=ArgChangeKind.ADDED, after="EUR"),
    )
    assert edit.as_payload() == {
        "index": 0,
        "action": "refund",
        "changes": [
            {"arg": "amount", "change": "changed", "before": 120, "after": 80},
            {"arg": "memo", "change": "removed", "before": "late", "after": None},
            {"arg": "notify", "change": "changed", "before": True, "after": 1},
            {"arg": "currency", "change": "added", "before": None, "after": "EUR"},
        ],
    }
    described = decisions_describe(
        spec=spec, decisions=[{"type": "edit", "edited_action": {"name": "refund", "args": edited}}, {"type": "approve"}]
    )
    assert described == (
        "edited refund (amount 120 → 80, memo removed (was late), notify true → 1, currency added: EUR); approved notify"
    )


def test_an_edit_that_changes_nothing_has_an_empty_diff_and_other_decisions_none():
    spec = _refund_spec(amount=80.0)
    same = {"type": "edit", "edited_action": {"name": "refund", "args": {"amount": 80}}}
    second = {"type": "edit", "edited_action": {"name": "notify", "args": {"to": "bob"}}}
    assert ask_edits_diff(spec=spec, decisions=[same, second]) == [
        ActionEdit(index=0, action="refund", changes=()),
        ActionEdit(
            index=1, action="notify", changes=(ArgChange(arg="to", kind=ArgChangeKind.CHANGED, before="ann", after="bob"),)
        ),
    ]
    assert ask_edits_diff(spec=spec, decisions=[{"type": "reject"}, {"type": "approve"}]) == []
