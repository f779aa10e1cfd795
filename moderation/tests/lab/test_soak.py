"""The soak's judge must pass clean facts and catch each broken promise (its negative controls), and its
report must put each request and fault in its phase."""

from dataclasses import replace

import pytest

from moderation.lab.history import FinalItem, HistoryRecorder
from moderation.lab.soak import (
    QUIET,
    Delivery,
    Fault,
    Memory,
    Request,
    SoakFacts,
    p99,
    soak_judge,
    soak_report,
    soak_save,
    soak_table,
)


def _facts() -> SoakFacts:
    """What a clean run looks like: a plain item won by alice, a quorum item approved by two votes."""
    history = HistoryRecorder()
    for reviewer, item, decision, completion, told, voted in (
        ("alice", "i1", "approve", "ok", "alice", False),
        ("bob", "i1", "reject", "fail", "alice", False),
        ("carol", "q1", "approve", "ok", None, True),
        ("alice", "q1", "approve", "ok", "alice", False),
    ):
        op = history.invoke(reviewer=reviewer, item=item, decision=decision)
        history.complete(op, completion=completion, told_winner=told)
        op.voted = voted
    return SoakFacts(
        ops=history.ops,
        final={
            "i1": FinalItem(winner="alice", winning_attempts=1, resumes=1, decision="approve"),
            "q1": FinalItem(
                winner="alice",
                winning_attempts=1,
                resumes=1,
                decision="approve",
                votes={"carol": "approve", "alice": "approve"},
                tally={"carol": "approve", "alice": "approve"},
            ),
        },
        accepted={"soak-1": "i1", "soak-2": "q1"},
        rows_by_key={"soak-1": ["i1"], "soak-2": ["q1"]},
        resent={"soak-4": 201},  # refused during the run, accepted once everything was healed
        deliveries=[
            Delivery(item="i1", endpoint="steady", status="delivered", msg_id="m1", received=True),
            Delivery(item="i1", endpoint="dead", status="failed", msg_id="m2", retry_until=100.0, last_attempt_at=100.5),
        ],
        counters={"moderation/approved": (2, 2)},
        memory=[Memory(server="server1", warm_kb=150_000, end_kb=190_000)],
    )


def _checks(facts: SoakFacts) -> list[str]:
    return sorted({finding.check for finding in soak_judge(facts)})


def test_clean_facts_pass():
    assert soak_judge(_facts()) == []


def _lost_decision(facts):
    facts.ops[1].completion, facts.ops[1].told_winner = "ok", "bob"  # bob told he won too


def _double_resume(facts):
    facts.final["i1"] = replace(facts.final["i1"], resumes=2)


def _lost_vote(facts):
    facts.final["q1"] = replace(facts.final["q1"], votes={"alice": "approve"}, tally={"alice": "approve"})


def _submit_lost(facts):
    facts.rows_by_key["soak-2"] = []


def _submit_twice(facts):
    facts.rows_by_key["soak-1"] = ["i1", "i9"]


def _submit_stuck(facts):
    facts.resent["soak-3"] = 500  # refused during the run, and again once everything was healed


def _webhook_missing(facts):
    facts.deliveries[0] = replace(facts.deliveries[0], status=None)


def _webhook_delivered_unseen(facts):
    facts.deliveries[0] = replace(facts.deliveries[0], received=False)


def _webhook_failed_early(facts):
    facts.deliveries[1] = replace(facts.deliveries[1], last_attempt_at=60.0)


def _webhook_pending(facts):
    facts.deliveries[1] = replace(facts.deliveries[1], status="pending")


def _counter_drift(facts):
    facts.counters["moderation/approved"] = (3, 2)


def _ghost_presence(facts):
    facts.live_presence = ["specific.abc!def"]


def _leaked_group(facts):
    facts.leaked_groups = ["rqc-soak__group__item-i1"]


def _memory_grown(facts):
    facts.memory = [Memory(server="server1", warm_kb=150_000, end_kb=400_000)]


def _audit_broken(facts):
    facts.audit_status, facts.audit_output = 1, "attempt 7: entry hash mismatch"


@pytest.mark.parametrize(
    ("corrupt", "check"),
    [
        (_lost_decision, "history"),
        (_double_resume, "history"),
        (_lost_vote, "history"),
        (_submit_lost, "submits"),
        (_submit_twice, "submits"),
        (_submit_stuck, "submits"),
        (_webhook_missing, "webhooks"),
        (_webhook_delivered_unseen, "webhooks"),
        (_webhook_failed_early, "webhooks"),
        (_webhook_pending, "webhooks"),
        (_counter_drift, "counters"),
        (_ghost_presence, "presence"),
        (_leaked_group, "groups"),
        (_memory_grown, "memory"),
        (_audit_broken, "audit"),
    ],
)
def test_each_broken_promise_is_found_by_its_check_alone(corrupt, check):
    facts = _facts()
    corrupt(facts)
    assert _checks(facts) == [check]


def test_the_history_findings_name_the_anomaly():
    facts = _facts()
    _lost_vote(facts)
    assert [str(f) for f in soak_judge(facts)] == [
        "[history] q1: vote_lost: carol was told their approve vote counted; the final votes say None"
    ]


def test_p99_is_the_value_below_which_99_percent_fall():
    assert p99([]) is None
    assert p99([float(n) for n in range(1, 101)]) == 99.0
    assert p99([5.0]) == 5.0


def test_the_report_splits_requests_by_phase_and_times_each_recovery(tmp_path):
    faults = [
        Fault(kind="redis_pause", target="redis", start=100.0, end=110.0),
        Fault(kind="kill_server", target="server1", start=200.0, end=230.0),
    ]
    requests = [
        Request(at=10.0, latency=0.05, kind="decide", status=200),
        Request(at=20.0, latency=0.07, kind="decide", status=409),
        Request(at=30.0, latency=15.0, kind="wait", status=200),  # a long-poll answered at the decision: not timed
        Request(at=105.0, latency=30.0, kind="decide", status=None),  # timed out during the pause
        Request(at=106.0, latency=2.0, kind="submit", status=201),
        Request(at=112.0, latency=1.5, kind="wait", status=503),  # after the heal: recovery until 113.5
        Request(at=150.0, latency=0.05, kind="decide", status=200),
        Request(at=210.0, latency=0.1, kind="cancel", status=200),
    ]
    report = soak_report(
        requests=requests, faults=faults, applied=[(10.0, 10.2), (20.0, 20.4), (105.0, 140.0)], config={"began": 0.0}, findings=[]
    )
    assert report["phases"][QUIET] == {
        "requests": 5,
        "answered": 4,
        "failed": 1,
        "failures": {"503": 1},
        "availability": 0.8,
        "p99_ms": 70.0,
    }
    assert report["phases"]["redis_pause"]["failures"] == {"timeout": 1}
    assert report["phases"]["kill_server"]["availability"] == 1.0
    assert [f["recovery_s"] for f in report["faults"]] == [3.5, 0.0]
    # The decision made during the pause is not the quiet phase's.
    assert report["decision_to_applied"] == {"quiet_decisions": 2, "p99_ms": 400.0}
    assert report["verdict"] == "pass"
    table = soak_table(report)
    assert "redis_pause" in table and "1 timeout" in table and "verdict: pass" in table
    json_path, svg_path = soak_save(report=report, requests=requests, faults=faults, directory=tmp_path)
    assert json_path.read_text().startswith("{") and "<svg" in svg_path.read_text()
