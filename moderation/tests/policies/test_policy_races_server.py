"""The races of approval policies (issue 16) against real servers, over HTTP, with a real task worker.

One daphne server on SQLite and a ``db_worker`` (which resumes the graphs): races 1
(the Nth approval and a veto at once), 2 (the last two approvals of a quorum of 3 at
once) and 5 (one moderator's two tabs at once), each pair of requests released by a
barrier. In the cluster pass, two servers on one PostgreSQL database and Redis: race 1
and 2 with each moderator on a different server, and race 3, the deadline fired by the
worker's own sweep while moderators click over HTTP.

Each HTTP answer is an op of a ``HistoryRecorder`` (200 won / voted, 409 lost naming
the winner); the deadline's attempts are read back from the attempts log. The final
state (``history_final_read`` after ``history_wait_applied``, in a process of the
server's) is judged by ``history_check``. The negative controls live with the
in-process races (``test_policy_races``): the server runs the guard only.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import psycopg
import pytest

from e2e.server import LiveServer
from moderation.lab.history import FinalItem, HistoryRecorder, history_check
from moderation.tests.cluster_support import channel_prefix, cluster_env, fresh_database, services_require
from moderation.tests.races import race_rounds
from moderation.tests.real_server import Reviewer

pytestmark = [pytest.mark.timeout(300)]

MODERATORS = ["alice", "bob", "carol", "dan"]
ROUNDS = 6
# The suite applies in the deciding process; here the worker resumes the graphs.
WORKER_ENV = {"REVIEWQUEUE_APPLY_INLINE": "", "DECISION_RATE_LIMIT": "0", "DEADLINE_SWEEP_INTERVAL": "0.1"}
VETO_2 = {"approvals": 2, "veto": True}
QUORUM_3 = {"approvals": 3}
QUORUM_2 = {"approvals": 2}
DEADLINE_2 = {"approvals": 2, "deadline_seconds": 3600, "on_deadline": "reject"}

# The team (every moderator a member) and each race's items, with the votes already in.
_SETUP = """
import json, os
from django.contrib.auth import get_user_model
from moderation.review.decisions import item_decide
from moderation.review.items import item_create
from moderation.policies.models import Team
from moderation.policies.teams import team_member_add
spec = json.loads(open(os.environ["POLICY_RACE_FILE"]).read())
users = {u.username: u for u in get_user_model().objects.filter(username__in=spec["members"])}
team, _ = Team.objects.get_or_create(slug="payments", defaults={"name": "Payments"})
for name in spec["members"]:
    team_member_add(team=team, user=users[name])
out = {}
for race, rows in spec["races"].items():
    out[race] = []
    for n, (policy, first) in enumerate(rows):
        item = item_create(title=f"{race} {n}", body="Refund order 7.", source="shop", team="payments", policy=policy)
        for name, vote in first:
            assert item_decide(item_public_id=item.public_id, reviewer=users[name], decision=vote).counted
        out[race].append(str(item.public_id))
print(json.dumps(out))
"""
# history_final_read once the worker has applied every resolution, plus each item's attempts log.
_FINAL = """
import dataclasses, json, os
from moderation.lab.history import history_final_read, history_wait_applied
from moderation.records.models import DecisionAttempt
ids = json.loads(open(os.environ["POLICY_RACE_FILE"]).read())
history_wait_applied(items=ids, stall=60)
attempts = {}
for a in DecisionAttempt.objects.filter(item__public_id__in=ids).select_related("item", "reviewer", "winner").order_by("seq"):
    attempts.setdefault(str(a.item.public_id), []).append(
        [a.reviewer.get_username(), a.outcome, a.winner.get_username() if a.winner else None])
print(json.dumps({i: {"final": dataclasses.asdict(f), "attempts": attempts.get(i, [])}
                  for i, f in history_final_read(items=ids).items()}))
"""


def _shell(server: LiveServer, script: str, data: object) -> dict:
    path = server.workdir / f"policy-race-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(data))
    out = server.manage("shell", "-c", script, timeout=180, env={"POLICY_RACE_FILE": str(path)})
    return json.loads(out.strip().splitlines()[-1])


def _setup(server: LiveServer, races: dict[str, list[tuple[dict, list]]]) -> dict[str, list[str]]:
    return _shell(server, _SETUP, {"members": MODERATORS, "races": races})


@dataclass
class Judged:
    finals: dict[str, FinalItem]
    attempts: dict[str, list[list]]  # item -> [[reviewer, outcome, told winner], ...] in log order
    anomalies: list[str]


def _judge(server: LiveServer, history: HistoryRecorder, ids: list[str], *, deadline_ops: bool = False) -> Judged:
    read = _shell(server, _FINAL, ids)
    finals = {i: FinalItem(**{**r["final"], "ineligible": tuple(r["final"]["ineligible"])}) for i, r in read.items()}
    attempts = {i: r["attempts"] for i, r in read.items()}
    if deadline_ops:  # the worker's deadline is one more competitor: its attempt, as the log recorded it
        for item, log in attempts.items():
            for reviewer, outcome, winner in log:
                if reviewer == "deadline":
                    op = history.invoke(reviewer="deadline", item=item, decision="reject")
                    history.complete(op, completion="ok" if outcome == "won" else "fail", told_winner=winner)
    unknown = [f"{op.reviewer} on {op.item}: {op.error}" for op in history.ops if op.completion == "unknown"]
    assert unknown == [], unknown
    return Judged(finals, attempts, [str(a) for a in history_check(ops=history.ops, final=finals)])


def _pair_race(history: HistoryRecorder, items: list[str], first: tuple[Reviewer, str], second: tuple[Reviewer, str]) -> None:
    race_rounds(
        len(items),
        lambda n: first[0].decide_recorded(history, items[n], first[1]),
        lambda n: second[0].decide_recorded(history, items[n], second[1]),
    )


def _race_1_and_2_assert(judged: Judged, race1: list[str], race2: list[str]) -> dict[str, int]:
    """Race 1: alice voted, then one resolution (the first committed) and one loser told by whom.
    Race 2: one counted vote, one resolution, the graph resumed once with all three votes."""
    wins = {"bob": 0, "carol": 0}
    for item in race1:
        [(_, voted, _), (winner, won, _), (loser, lost, told)] = judged.attempts[item]
        assert (voted, won, lost, told) == ("voted", "won", "lost", winner) and {winner, loser} == {"bob", "carol"}
        final = judged.finals[item]
        assert final.votes == final.tally == {"alice": "approve", winner: "approve" if winner == "bob" else "reject"}
        assert (final.winning_attempts, final.resumes) == (1, 1)
        wins[winner] += 1
    for item in race2:
        assert [outcome for _, outcome, _ in judged.attempts[item]] == ["voted", "voted", "won"]
        final = judged.finals[item]
        assert final.tally == {"alice": "approve", "bob": "approve", "carol": "approve"} and final.resumes == 1
    return wins


def test_races_1_2_5_over_http_against_a_server_and_its_worker(tmp_path):
    server = LiveServer(tmp_path / "site", extra_env=WORKER_ENV)
    seeded = server.seed(users=MODERATORS)
    ids = _setup(
        server,
        {
            "race1": [(VETO_2, [["alice", "approve"]])] * ROUNDS,
            "race2": [(QUORUM_3, [["alice", "approve"]])] * ROUNDS,
            # Half with bob's approval in: alice's first tab resolves, the other is told she did.
            "race5": [(QUORUM_2, [])] * (ROUNDS // 2) + [(QUORUM_2, [["bob", "approve"]])] * (ROUNDS // 2),
        },
    )
    try:
        began = time.monotonic()
        server.start()
        server.worker_start()
        alice, bob, carol = (Reviewer(server, name, seeded.sessions[name]) for name in ("alice", "bob", "carol"))
        history = HistoryRecorder()
        raced = time.monotonic()
        _pair_race(history, ids["race1"], (bob, "approve"), (carol, "reject"))
        _pair_race(history, ids["race2"], (bob, "approve"), (carol, "approve"))
        _pair_race(history, ids["race5"], (alice, "approve"), (alice, "approve"))
        race_seconds = time.monotonic() - raced
        judged = _judge(server, history, [i for race in ids.values() for i in race])
    finally:
        server.close()
    assert judged.anomalies == []
    wins = _race_1_and_2_assert(judged, ids["race1"], ids["race2"])
    for n, item in enumerate(ids["race5"]):
        outcomes = [(who, outcome) for who, outcome, _ in judged.attempts[item]]
        if n < ROUNDS // 2:  # one vote, counted twice as "voted", the item still open
            assert outcomes == [("alice", "voted"), ("alice", "voted")] and judged.finals[item].votes == {"alice": "approve"}
            assert judged.finals[item].resumes == 0
        else:
            assert outcomes == [("bob", "voted"), ("alice", "won"), ("alice", "lost")]
            assert judged.finals[item].resumes == 1
    print(
        f"\npolicy races over HTTP: {3 * ROUNDS} rounds in {race_seconds:.1f} s ({time.monotonic() - began:.1f} s "
        f"with start-up and final read); race 1 resolved by bob {wins['bob']}, by carol's veto {wins['carol']}"
    )


# --- the cluster pass -------------------------------------------------------------------


@pytest.mark.cluster
def test_policy_races_across_two_servers_with_the_workers_deadline_sweep(tmp_path):
    admin_url, redis_url = services_require()
    with fresh_database(admin_url, "policies") as database_url:
        env = {**cluster_env(redis_url=redis_url, prefix=channel_prefix("policies")), **WORKER_ENV}
        servers = [
            LiveServer(tmp_path / f"s{n}", database_url=database_url, extra_env=env, health_path="/healthz") for n in range(2)
        ]
        try:
            seeded = servers[0].seed(users=MODERATORS)
            ids = _setup(
                servers[0],
                {
                    "race1": [(VETO_2, [["alice", "approve"]])] * ROUNDS,
                    "race2": [(QUORUM_3, [["alice", "approve"]])] * ROUNDS,
                    "race3": [(DEADLINE_2, [["alice", "approve"]])] * (2 * ROUNDS),
                },
            )
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(lambda server: server.start(timeout=90), servers))
            servers[0].worker_start(worker_id="sweeper")
            servers[0].worker_wait_ready("sweeper")  # it polls, and so sweeps deadlines
            # bob on server 1, carol on server 2.
            bob, carol = (
                Reviewer(servers[0], "bob", seeded.sessions["bob"]),
                Reviewer(servers[1], "carol", seeded.sessions["carol"]),
            )
            bob_2 = Reviewer(servers[1], "bob", seeded.sessions["bob"])
            history = HistoryRecorder()
            _pair_race(history, ids["race1"], (bob, "approve"), (carol, "reject"))
            _pair_race(history, ids["race2"], (bob, "approve"), (carol, "approve"))
            # Race 3: every item falls due at once; bob (through both servers) approves them one
            # every 50 ms from that moment while the worker's sweep fires whatever is still open,
            # so the first few are his, the rest the deadline's, and the ones between raced.
            lead = 1.0
            with psycopg.connect(database_url, autocommit=True) as conn:
                conn.execute(
                    "UPDATE moderation_reviewask SET deadline_at = now() + make_interval(secs => %s) "
                    "WHERE item_id IN (SELECT id FROM moderation_queueitem WHERE public_id = ANY(%s::uuid[]))",
                    [lead, ids["race3"]],
                )
            time.sleep(lead)
            with ThreadPoolExecutor(4) as pool:
                list(
                    pool.map(
                        lambda n: (
                            time.sleep(n * 0.05),
                            (bob, bob_2)[n % 2].decide_recorded(history, ids["race3"][n], "approve"),
                        ),
                        range(len(ids["race3"])),
                    )
                )
            judged = _judge(servers[0], history, [i for race in ids.values() for i in race], deadline_ops=True)
        finally:
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(LiveServer.close, servers))
    assert judged.anomalies == []
    wins = _race_1_and_2_assert(judged, ids["race1"], ids["race2"])
    by = {"bob": 0, "deadline": 0}
    for item in ids["race3"]:
        log = judged.attempts[item]
        [winner] = [who for who, outcome, _ in log if outcome == "won"]
        # The other competitor, if it reached the guard, lost to the winner and was told so.
        assert all(told == winner for who, outcome, told in log if outcome == "lost"), log
        assert judged.finals[item].resumes == 1 and judged.finals[item].winner == winner
        by[winner] += 1
    print(
        f"\ncluster policy races: race 1 resolved by bob {wins['bob']} / carol {wins['carol']}; "
        f"race 3 won by the worker's deadline {by['deadline']}, by bob {by['bob']}"
    )
