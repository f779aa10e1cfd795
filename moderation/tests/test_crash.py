"""Crash safety: a real server, or a real worker, SIGKILLed at each point of a decision's path loses nothing.

For each fault point, a fresh copy of one prepared SQLite database runs a daphne server and a
worker, one of them with ``REVIEWQUEUE_FAULTS=<point>:kill``:

- server points: alice's decision kills the server, her attempt is *unknown*; ``manage.py
  recover --all`` runs and the server restarts;
- worker points: alice is told she won, then the worker dies applying it (before the resume,
  inside the graph's run, before its checkpoint, or before the record); a second worker's
  sweep applies it and runs the graph on to its end.

Then bob decides the same item and carol a fresh one, and ``history_check`` judges the whole
history against the final rows and checkpoints: decided items resumed exactly once, never
forked, their graphs at their end; pending items still paused. Scenarios run side by side in
threads.
"""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

from e2e.server import LiveServer, Seeded
from moderation.lab.history import FinalItem, HistoryRecorder, history_check
from moderation.tests.real_server import Dropped, Reviewer, progress_wait

# The first test waits for every scenario (the module fixture): near 300 s on a loaded 2-core machine.
pytestmark = [pytest.mark.timeout(600)]

USERS = ["alice", "bob", "carol"]
# items[0]: alice's decision crashes a process; items[1]: decided (and lost by bob)
# before the crash; items[2]: nobody touches it; items[3]: carol decides after the restart.
CRASHED, PRE_DECIDED, UNTOUCHED, AFTER = range(4)
PRE_DECISIONS = [(PRE_DECIDED, "alice", "approve"), (PRE_DECIDED, "bob", "reject")]
# The server answers before the graph runs; a worker applies. A killed worker's task is
# found again by the next worker's sweep, after APPLY_SWEEP_GRACE.
WORKER_ENV = {"REVIEWQUEUE_APPLY_INLINE": "", "APPLY_SWEEP_GRACE": "1", "WEBHOOK_SWEEP_INTERVAL": "0.2"}
# The workers' task poll: at the default 0.05 s each idle worker costs a tenth of a core,
# and up to eight run at once on a 2-core machine; the sweep's 0.2 s bounds the recovery anyway.
WORKER_POLL = 0.25
# A worker's apply may be slow on a busy machine, never stuck: the wait gives up after this long with no change.
APPLY_STALL = 60


@dataclass(frozen=True)
class Expect:
    process: str  # which process the fault kills: "server" or "worker"
    status: str
    winner: str | None


EXPECTED = {
    # Killed holding the row lock, or before the commit: nothing was recorded, nothing resumed.
    "after_row_lock": Expect("server", "pending", None),
    "before_commit": Expect("server", "pending", None),
    # Committed, the apply queued in the same transaction; only the answer was lost.
    "after_commit": Expect("server", "approved", "alice"),
    "before_response": Expect("server", "approved", "alice"),
    # The worker dies before the resume, after it, or before recording it.
    "before_resume": Expect("worker", "approved", "alice"),
    "after_resume": Expect("worker", "approved", "alice"),
    "before_record": Expect("worker", "approved", "alice"),
    # Or inside the graph's run: in the resumed node, holding its answer before any checkpoint;
    # after it, its writes saved and its step's checkpoint not (LangGraph's ``next`` is empty then);
    # in the next node, after the resume's first checkpoint, with nothing left to resume.
    "in_review_node": Expect("worker", "approved", "alice"),
    "before_checkpoint": Expect("worker", "approved", "alice"),
    "in_apply_node": Expect("worker", "approved", "alice"),
}


@dataclass
class Scenario:
    point: str
    seeded: Seeded
    history: HistoryRecorder = field(default_factory=HistoryRecorder)
    crash_response: object = None


def _record(history: HistoryRecorder, reviewer: Reviewer, item: str, decision: str) -> tuple[int, dict]:
    op = history.invoke(reviewer=reviewer.username, item=item, decision=decision)
    try:
        status, body = reviewer.decide(item, decision)
    except Dropped as exc:
        history.complete(op, completion="unknown", error=str(exc))
        raise
    history.complete_from_http(op, status=status, body=body)
    return status, body


def _applied_wait(server: LiveServer, items: list[str]) -> dict:
    """The items' state once no decision on them waits for a worker (or nothing moved for ``APPLY_STALL`` s).

    Polls the rows alone, one query (the test process never opens the server's database
    through the ORM, so not ``history_wait_applied``); the full state, which reads every
    item's checkpoint history, is read once at the end.
    """
    progress_wait(
        lambda: {item: row.apply_state for item, row in server.rows(items).items()},
        done=lambda states: "applying" not in states.values(),
        stall=APPLY_STALL,
    )
    return server.tool("state", *items)


def _crash_scenario(point: str, template: LiveServer, seeded: Seeded, workdir) -> Scenario:
    expect = EXPECTED[point]
    scenario = Scenario(point=point, seeded=seeded)
    for made in seeded.decided:
        op = scenario.history.invoke(reviewer=made["reviewer"], item=made["item"], decision=made["decision"])
        scenario.history.complete(op, completion="ok" if made["won"] else "fail", told_winner=made["winner"])
    server = LiveServer(workdir, db_name="crash", extra_env=WORKER_ENV)
    server.clone_from(template)
    items = seeded.items
    try:
        server.start(faults=f"{point}:kill" if expect.process == "server" else "")
        first_worker = server.worker_start(interval=WORKER_POLL, faults=f"{point}:kill" if expect.process == "worker" else "")
        alice, bob, carol = (Reviewer(server, name, seeded.sessions[name]) for name in USERS)
        try:
            scenario.crash_response = _record(scenario.history, alice, items[CRASHED], "approve")
        except Dropped as exc:
            scenario.crash_response = exc
        if expect.process == "server":
            scenario.exit_code = server.wait_dead()
            scenario.recover_output = server.manage("recover", "--all")
            server.start()
        else:
            scenario.exit_code = first_worker.wait(timeout=60)
            server.worker_start(interval=WORKER_POLL)
        scenario.after_crash = _applied_wait(server, items)
        scenario.retry = _record(scenario.history, bob, items[CRASHED], "reject")
        scenario.fresh = _record(scenario.history, carol, items[AFTER], "approve")
        scenario.final = _applied_wait(server, items)
    finally:
        server.close()
        scenario.log = server.log_tail(40) + "\n--- worker log ---\n" + server.log_tail(40, worker=True)
    # Once the server and its workers are stopped: the database is final, and the check has the CPU.
    scenario.audit_output = server.manage("verify_audit")
    return scenario


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory):
    template = LiveServer(tmp_path_factory.mktemp("crash-template"), db_name="crash", extra_env=WORKER_ENV)
    seeded = template.seed(users=USERS, items=4, decisions=PRE_DECISIONS, prefix="Crash")
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {
            point: pool.submit(_crash_scenario, point, template, seeded, tmp_path_factory.mktemp(f"crash-{point}"))
            for point in EXPECTED
        }
    return futures


@pytest.mark.parametrize("point", list(EXPECTED))
def test_process_killed_at_point_loses_nothing_and_applies_once(scenarios, point):
    scenario: Scenario = scenarios[point].result()
    expect = EXPECTED[point]
    items = scenario.seeded.items
    crashed = items[CRASHED]
    context = f"\n--- server log ---\n{scenario.log}"

    # The kill really happened where it was asked to.
    assert scenario.exit_code == -signal.SIGKILL, context
    crash_op = next(op for op in scenario.history.ops if op.item == crashed and op.reviewer == "alice")
    if expect.process == "server":
        # alice does not know her outcome, and recover had nothing to repair: the graph
        # is only resumed after a commit, so a server crash never leaves it ahead.
        assert isinstance(scenario.crash_response, Dropped), (
            f"expected a dropped connection, got {scenario.crash_response}{context}"
        )
        assert crash_op.completion == "unknown"
        assert "could not be repaired." in scenario.recover_output and ", 0 could not" in scenario.recover_output, (
            scenario.recover_output
        )
    else:
        # alice was told she won before any graph ran: the worker's death is not hers to see.
        status, body = scenario.crash_response
        assert (status, body["outcome"], body["applying"]) == (200, "won", True), body
        assert crash_op.completion == "ok"

    # After the crash and the recovery: the rows and the graph agree on the crashed item.
    state = scenario.after_crash[crashed]
    assert (state["status"], state["winner"]) == (expect.status, expect.winner), (state, context)
    if expect.winner is None:
        assert state["graph_paused"] and state["resume_count"] == 0 and state["won_attempts"] == [], state
    else:
        assert state["apply_state"] == "" and state["applied_result"]["state"] == "finished", (state, context)
        assert not state["graph_paused"] and state["resume_count"] == 1 and state["forks"] == 0, (state, context)
        assert state["final"]["settled"] and state["applied_result"]["result"]["status"] == "approved", (state, context)
        assert state["won_attempts"] == [expect.winner], state

    # Deciding it again is consistent with what was stored.
    status, body = scenario.retry
    if expect.winner is None:
        assert (status, body["outcome"], body["winner"], body["status"]) == (200, "won", "bob", "rejected"), body
    else:
        assert (status, body["outcome"], body["winner"], body["status"]) == (409, "lost", "alice", "approved"), body
        assert body["message"].startswith("Already reviewed by alice (approved,"), body
    assert scenario.fresh[0] == 200 and scenario.fresh[1]["winner"] == "carol", scenario.fresh

    # Every item: decided ones resumed exactly once, never forked, one winning attempt; pending ones still paused.
    final = scenario.final
    assert final[items[UNTOUCHED]]["status"] == "pending"
    for item, row in final.items():
        if row["status"] == "pending":
            assert row["graph_paused"] and row["resume_count"] == 0 and row["won_attempts"] == [], (item, row)
        else:
            assert row["status"] in {"approved", "rejected"}, (item, row)
            assert not row["graph_paused"] and row["resume_count"] == 1 and row["forks"] == 0, (item, row, context)
            assert row["won_attempts"] == [row["winner"]], (item, row)
    checked = {item: FinalItem(**row["final"]) for item, row in final.items()}
    assert history_check(ops=scenario.history.ops, final=checked) == []
    assert "audit log intact" in scenario.audit_output
