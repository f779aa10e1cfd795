"""Crash safety: a real server SIGKILLed at each point of the decision path loses nothing.

For each fault point a daphne process (fresh copy of one prepared SQLite database)
runs with ``REVIEWQUEUE_FAULTS=<point>:kill``; alice's decision kills it there, so her
connection drops and her attempt is recorded as *unknown*. Then ``manage.py recover
--all`` runs, the server restarts without faults, bob decides the same item again and
carol decides a fresh one. The whole history (decisions acknowledged before the crash,
the unknown one, the ones after) is checked with ``moderation.history.history_check``
against the final rows, attempts and checkpoint histories, and every item's graph must
agree with its row: decided items resumed exactly once, pending items still paused.

The five scenarios run side by side in threads (each is mostly waiting on its own
processes) to keep the module well under a minute on a small machine.
"""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

from moderation.history import FinalItem, HistoryRecorder, history_check
from e2e.server import LiveServer, Seeded
from moderation.tests.real_server import Dropped, Reviewer

pytestmark = [pytest.mark.timeout(240)]

USERS = ["alice", "bob", "carol"]
# items[0]: alice's decision crashes the server; items[1]: decided (and lost by bob)
# before the crash; items[2]: nobody touches it; items[3]: carol decides after the restart.
CRASHED, PRE_DECIDED, UNTOUCHED, AFTER = range(4)
PRE_DECISIONS = [(PRE_DECIDED, "alice", "approve"), (PRE_DECIDED, "bob", "reject")]


@dataclass(frozen=True)
class Expect:
    status: str
    winner: str | None
    recover_adopts: bool


EXPECTED = {
    # Killed holding the row lock, before the graph was touched: nothing happened.
    "after_row_lock": Expect("pending", None, recover_adopts=False),
    # The graph holds alice's decision, the row never committed: recover adopts it.
    "after_graph_resume": Expect("approved", "alice", recover_adopts=True),
    "before_commit": Expect("approved", "alice", recover_adopts=True),
    # Committed; only the answer was lost.
    "after_commit": Expect("approved", "alice", recover_adopts=False),
    "before_response": Expect("approved", "alice", recover_adopts=False),
}


@dataclass
class Scenario:
    point: str
    seeded: Seeded
    history: HistoryRecorder = field(default_factory=HistoryRecorder)
    crash_response: object = None
    exit_code: int | None = None
    recover_output: str = ""
    after_crash: dict = field(default_factory=dict)
    retry: tuple[int, dict] | None = None
    fresh: tuple[int, dict] | None = None
    final: dict = field(default_factory=dict)
    audit_output: str = ""
    log: str = ""


def _record(history: HistoryRecorder, reviewer: Reviewer, item: str, decision: str) -> tuple[int, dict]:
    op = history.invoke(reviewer=reviewer.username, item=item, decision=decision)
    try:
        status, body = reviewer.decide(item, decision)
    except Dropped as exc:
        history.complete(op, completion="unknown", error=str(exc))
        raise
    history.complete_from_http(op, status=status, body=body)
    return status, body


def _crash_scenario(point: str, template: LiveServer, seeded: Seeded, workdir) -> Scenario:
    scenario = Scenario(point=point, seeded=seeded)
    for made in seeded.decided:
        op = scenario.history.invoke(reviewer=made["reviewer"], item=made["item"], decision=made["decision"])
        scenario.history.complete(op, completion="ok" if made["won"] else "fail", told_winner=made["winner"])
    server = LiveServer(workdir, db_name="crash")
    server.clone_from(template)
    items = seeded.items
    try:
        server.start(faults=f"{point}:kill")
        alice, bob, carol = (Reviewer(server, name, seeded.sessions[name]) for name in USERS)
        try:
            scenario.crash_response = _record(scenario.history, alice, items[CRASHED], "approve")
        except Dropped as exc:
            scenario.crash_response = exc
        scenario.exit_code = server.wait_dead()

        scenario.recover_output = server.manage("recover", "--all")
        server.start()
        scenario.after_crash = server.tool("state", *items)
        scenario.retry = _record(scenario.history, bob, items[CRASHED], "reject")
        scenario.fresh = _record(scenario.history, carol, items[AFTER], "approve")
        scenario.final = server.tool("state", *items)
        scenario.audit_output = server.manage("verify_audit")
    finally:
        server.close()
        scenario.log = server.log_tail(40)
    return scenario


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory):
    template = LiveServer(tmp_path_factory.mktemp("crash-template"), db_name="crash")
    seeded = template.seed(users=USERS, items=4, decisions=PRE_DECISIONS, prefix="Crash")
    with ThreadPoolExecutor(max_workers=len(EXPECTED)) as pool:
        futures = {
            point: pool.submit(_crash_scenario, point, template, seeded, tmp_path_factory.mktemp(f"crash-{point}"))
            for point in EXPECTED
        }
    return futures


@pytest.mark.parametrize("point", list(EXPECTED))
def test_server_killed_at_point_loses_nothing_and_recovers(scenarios, point):
    scenario: Scenario = scenarios[point].result()
    expect = EXPECTED[point]
    items = scenario.seeded.items
    crashed = items[CRASHED]
    context = f"\n--- server log ---\n{scenario.log}"

    # The kill really happened where it was asked to, and alice does not know her outcome.
    assert isinstance(scenario.crash_response, Dropped), f"expected a dropped connection, got {scenario.crash_response}{context}"
    assert scenario.exit_code == -signal.SIGKILL, context
    crash_op = next(op for op in scenario.history.ops if op.item == crashed and op.reviewer == "alice")
    assert crash_op.completion == "unknown"

    # recover did what the point calls for, and said so.
    out = scenario.recover_output
    if expect.recover_adopts:
        assert f"{crashed} “{scenario.seeded.titles[CRASHED]}”: adopted the graph's decision: approved by alice" in out, out
        assert "1 changed or need attention, 0 could not be repaired." in out, out
    else:
        assert "0 changed or need attention, 0 could not be repaired." in out, out

    # After recover and restart: the row and the graph agree on the crashed item.
    state = scenario.after_crash[crashed]
    assert (state["status"], state["winner"]) == (expect.status, expect.winner), state
    if expect.winner is None:
        assert state["graph_paused"] and state["resume_count"] == 0 and state["won_attempts"] == [], state
    else:
        assert not state["graph_paused"] and state["resume_count"] == 1, state
        assert state["won_attempts"] == [expect.winner], state

    # Deciding it again on the restarted server is consistent with what was stored.
    status, body = scenario.retry
    if expect.winner is None:
        assert (status, body["outcome"], body["winner"], body["status"]) == (200, "won", "bob", "rejected"), body
    else:
        assert (status, body["outcome"], body["winner"], body["status"]) == (409, "lost", "alice", "approved"), body
        assert body["message"].startswith("Already reviewed by alice (approved,"), body
    assert scenario.fresh[0] == 200 and scenario.fresh[1]["winner"] == "carol", scenario.fresh

    # Every item: decided ones resumed exactly once with one winning attempt; pending ones still paused.
    final = scenario.final
    assert final[items[UNTOUCHED]]["status"] == "pending"
    for item, row in final.items():
        if row["status"] == "pending":
            assert row["graph_paused"] and row["resume_count"] == 0 and row["won_attempts"] == [], (item, row)
        else:
            assert row["status"] in {"approved", "rejected"}, (item, row)
            assert not row["graph_paused"] and row["resume_count"] == 1, (item, row)
            assert row["won_attempts"] == [row["winner"]], (item, row)
    checked = {
        item: FinalItem(winner=row["winner"], winning_attempts=len(row["won_attempts"]), resumes=row["resume_count"])
        for item, row in final.items()
    }
    assert history_check(ops=scenario.history.ops, final=checked) == []
    assert "audit log intact" in scenario.audit_output
