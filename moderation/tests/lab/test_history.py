"""The checker must catch each broken history, and pass a clean one."""

import pytest
from django.test import override_settings

from moderation.core.faults import fault_inject
from moderation.lab.history import FinalItem, HistoryRecorder, history_check, history_final_read
from moderation.review.apply import item_apply
from moderation.review.decisions import item_decide


def _history(*entries):
    recorder = HistoryRecorder()
    for reviewer, item, completion, told in entries:
        op = recorder.invoke(reviewer=reviewer, item=item, decision="approve")
        if completion is not None:
            recorder.complete(op, completion=completion, told_winner=told)
    return recorder.ops


CLEAN_FINAL = {"i1": FinalItem(winner="alice", winning_attempts=1, resumes=1)}


def _kinds(ops, final):
    return sorted(a.kind for a in history_check(ops=ops, final=final))


def test_clean_history_has_no_anomalies():
    ops = _history(("alice", "i1", "ok", "alice"), ("bob", "i1", "fail", "alice"), ("carol", "i1", "unknown", None))
    assert history_check(ops=ops, final=CLEAN_FINAL) == []


def test_two_acknowledged_winners_are_caught_and_the_overwritten_one_is_lost():
    ops = _history(("alice", "i1", "ok", "alice"), ("bob", "i1", "ok", "bob"))
    assert _kinds(ops, CLEAN_FINAL) == ["lost_decision", "multiple_winners"]


def test_two_winning_attempts_in_the_database_are_caught():
    ops = _history(("alice", "i1", "ok", "alice"))
    assert _kinds(ops, {"i1": FinalItem(winner="alice", winning_attempts=2, resumes=1)}) == ["multiple_winners"]


def test_acknowledged_win_that_is_not_final_is_lost():
    ops = _history(("bob", "i1", "ok", "bob"), ("alice", "i1", "fail", "bob"))
    assert "lost_decision" in _kinds(ops, CLEAN_FINAL)


def test_loser_told_the_wrong_winner_is_caught():
    ops = _history(("alice", "i1", "ok", "alice"), ("bob", "i1", "fail", "carol"))
    assert _kinds(ops, CLEAN_FINAL) == ["misinformed_loser"]


def test_double_resume_and_never_resumed_are_caught():
    ops = _history(("alice", "i1", "ok", "alice"))
    assert _kinds(ops, {"i1": FinalItem(winner="alice", winning_attempts=1, resumes=2)}) == ["double_resume"]
    assert _kinds(ops, {"i1": FinalItem(winner="alice", winning_attempts=1, resumes=0)}) == ["never_resumed"]


def test_a_remote_agent_resumed_twice_or_never_is_caught():
    ops = _history(("alice", "i1", "ok", "alice"))
    agent = {"winner": "alice", "winning_attempts": 1, "resumes": 1}
    assert _kinds(ops, {"i1": FinalItem(**agent, agent_resumes=1)}) == []
    assert _kinds(ops, {"i1": FinalItem(**agent, agent_resumes=2)}) == ["double_resume"]
    assert _kinds(ops, {"i1": FinalItem(**agent, agent_resumes=0)}) == ["never_resumed"]
    assert _kinds([], {"i2": FinalItem(winner=None, winning_attempts=0, resumes=0, agent_resumes=0)}) == []


def test_a_graph_started_twice_is_caught():
    ops = _history(("alice", "i1", "ok", "alice"))
    assert _kinds(ops, {"i1": FinalItem(winner="alice", winning_attempts=1, resumes=1, starts=2)}) == ["double_start"]


def test_a_decided_item_whose_graph_stopped_between_its_steps_is_caught():
    ops = _history(("alice", "i1", "ok", "alice"))
    assert _kinds(ops, {"i1": FinalItem(winner="alice", winning_attempts=1, resumes=1, settled=False)}) == ["graph_unsettled"]
    # An undecided item's graph is judged by its pause, not by this.
    assert _kinds([], {"i2": FinalItem(winner=None, winning_attempts=0, resumes=0, settled=False)}) == []


@pytest.mark.django_db
def test_final_read_sees_a_graph_a_killed_run_left_between_its_steps(alice, make_item):
    item = make_item()
    with override_settings(REVIEWQUEUE_APPLY_INLINE=False):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")

    def killed(key):
        raise SystemExit("worker killed")

    with fault_inject("in_apply_node", killed), pytest.raises(SystemExit):
        item_apply(item_id=item.pk)
    final = history_final_read(items=[str(item.public_id)])[str(item.public_id)]
    assert (final.resumes, final.settled) == (1, False)
    item_apply(item_id=item.pk)
    assert history_final_read(items=[str(item.public_id)])[str(item.public_id)].settled


def test_withdrawal_competes_with_decisions_for_the_one_win():
    recorder = HistoryRecorder()
    withdraw = recorder.invoke(reviewer="svc", item="i1", decision="withdraw")
    decide = recorder.invoke(reviewer="alice", item="i1", decision="approve")
    recorder.complete(withdraw, completion="ok", told_winner="svc")
    recorder.complete(decide, completion="fail", told_winner="svc")
    withdrawn = {"i1": FinalItem(winner="svc", winning_attempts=1, resumes=1, decision="withdraw")}
    assert history_check(ops=recorder.ops, final=withdrawn) == []
    # Both told they won, the item ended approved: the withdrawal was silently lost.
    recorder.complete(decide, completion="ok", told_winner="alice")
    approved = {"i1": FinalItem(winner="alice", winning_attempts=1, resumes=1, decision="approve")}
    assert _kinds(recorder.ops, approved) == ["lost_decision", "multiple_winners"]


def test_acknowledged_op_must_be_what_the_item_ended_as():
    """The same account told its withdrawal won, while its approval is what was stored."""
    recorder = HistoryRecorder()
    op = recorder.invoke(reviewer="svc", item="i1", decision="withdraw")
    recorder.complete(op, completion="ok", told_winner="svc")
    final = {"i1": FinalItem(winner="svc", winning_attempts=1, resumes=1, decision="approve")}
    assert _kinds(recorder.ops, final) == ["lost_decision"]


def test_an_attempt_that_never_completed_is_reported():
    ops = _history(("alice", "i1", "ok", "alice"), ("bob", "i1", None, None))
    assert _kinds(ops, CLEAN_FINAL) == ["incomplete"]


def test_unknown_outcomes_are_allowed_either_way():
    ops = _history(("alice", "i1", "unknown", None))
    assert history_check(ops=ops, final=CLEAN_FINAL) == []
    assert history_check(ops=ops, final={"i1": FinalItem(winner=None, winning_attempts=0, resumes=0)}) == []


@pytest.mark.django_db
def test_final_read_reflects_the_database_and_the_graph(alice, bob, make_item, django_capture_on_commit_callbacks):
    decided, pending = make_item(), make_item()
    with django_capture_on_commit_callbacks(execute=True):
        item_decide(item_public_id=decided.public_id, reviewer=alice, decision="approve")
        item_decide(item_public_id=decided.public_id, reviewer=bob, decision="reject")
    final = history_final_read(items=[str(decided.public_id), str(pending.public_id)])
    assert final[str(decided.public_id)] == FinalItem(winner="alice", winning_attempts=1, resumes=1, decision="approve")
    assert final[str(pending.public_id)] == FinalItem(winner=None, winning_attempts=0, resumes=0)


def test_http_answers_read_as_the_reviewer_reads_them():
    recorder = HistoryRecorder()
    answers = [
        (200, {"outcome": "won", "winner": "alice"}),
        (409, {"outcome": "lost", "winner": "alice"}),
        (409, {"error": "needs_attention"}),
        (503, {"error": "busy"}),
    ]
    for status, body in answers:
        recorder.complete_from_http(recorder.invoke(reviewer="r", item="i1", decision="approve"), status=status, body=body)
    assert [(op.completion, op.told_winner) for op in recorder.ops] == [
        ("ok", "alice"),
        ("fail", "alice"),
        ("unknown", None),
        ("unknown", None),
    ]


def _vote(recorder, reviewer, decision, *, status=200, outcome="voted", winner=None):
    op = recorder.invoke(reviewer=reviewer, item="q1", decision=decision)
    recorder.complete_from_http(op, status=status, body={"outcome": outcome, **({"winner": winner} if winner else {})})


def test_counted_votes_must_all_be_in_the_final_votes_and_the_tally():
    recorder = HistoryRecorder()
    _vote(recorder, "alice", "approve")
    _vote(recorder, "bob", "approve", outcome="won", winner="bob")
    _vote(recorder, "carol", "reject", status=409, outcome="lost", winner="bob")
    both = {"alice": "approve", "bob": "approve"}
    clean = FinalItem(winner="bob", winning_attempts=1, resumes=1, votes=both, tally=both)
    assert history_check(ops=recorder.ops, final={"q1": clean}) == []
    lost = FinalItem(winner="bob", winning_attempts=1, resumes=1, votes={"bob": "approve"}, tally={"bob": "approve"})
    assert _kinds(recorder.ops, {"q1": lost}) == ["vote_lost"]
    short = FinalItem(winner="bob", winning_attempts=1, resumes=1, votes=both, tally={"bob": "approve"})
    assert _kinds(recorder.ops, {"q1": short}) == ["tally_incomplete"]
    outsider = FinalItem(winner="bob", winning_attempts=1, resumes=1, votes=both, tally=both, ineligible=("alice",))
    assert _kinds(recorder.ops, {"q1": outsider}) == ["ineligible_vote"]


def test_a_deadline_resolving_a_quorum_item_is_a_resolution_not_a_missing_vote():
    recorder = HistoryRecorder()
    _vote(recorder, "alice", "approve")
    _vote(recorder, "deadline", "reject", outcome="won", winner="deadline")
    _vote(recorder, "bob", "approve", status=409, outcome="lost", winner="deadline")
    votes = {"alice": "approve"}
    final = {"q1": FinalItem(winner="deadline", winning_attempts=1, resumes=1, decision="reject", votes=votes)}
    assert history_check(ops=recorder.ops, final=final) == []
    forgotten = {"q1": FinalItem(winner="deadline", winning_attempts=1, resumes=1, decision="reject", votes={})}
    assert _kinds(recorder.ops, forgotten) == ["vote_lost"]


def test_a_changed_vote_is_judged_by_the_last_one_acknowledged():
    recorder = HistoryRecorder()
    _vote(recorder, "alice", "reject")
    _vote(recorder, "alice", "approve")
    final = {"q1": FinalItem(winner=None, winning_attempts=0, resumes=0, votes={"alice": "approve"})}
    assert history_check(ops=recorder.ops, final=final) == []
    stale = {"q1": FinalItem(winner=None, winning_attempts=0, resumes=0, votes={"alice": "reject"})}
    assert _kinds(recorder.ops, stale) == ["vote_lost"]


def test_two_resolutions_of_a_quorum_item_are_multiple_winners():
    recorder = HistoryRecorder()
    _vote(recorder, "alice", "approve", outcome="won", winner="alice")
    _vote(recorder, "carol", "reject", outcome="won", winner="carol")
    votes = {"alice": "approve", "carol": "reject"}
    final = {"q1": FinalItem(winner="carol", winning_attempts=2, resumes=1, votes=votes, tally=votes)}
    assert "multiple_winners" in _kinds(recorder.ops, final)
