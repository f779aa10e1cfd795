"""The soak, short: two servers and two workers under mixed load and every kind of fault, judged at the end.

``make soak`` runs it for half an hour (``moderation.tests.soak_run``); here it runs for
``SOAK_TEST_MINUTES`` with faults close together, so each of the six kinds strikes at least
once. The judge (``moderation.lab.soak``) must find nothing.

The negative control, on the same cluster once the run is judged: a lost decision written
into the history, and the database and Redis tampered with (a counter bumped, an accepted
submit's key changed, a delivered webhook marked failed before its retry window ended, a fresh presence row for no
page, an attempt's note rewritten behind the audit log's back, a group subscription nobody
leaves); gathered and judged again, each check must report its own (the memory check's control
is in ``moderation/tests/lab/test_soak.py``: a process cannot be made to leak on demand).
"""

from __future__ import annotations

import copy
import dataclasses
import os

import pytest
import redis

from moderation.lab.soak import soak_judge, soak_table
from moderation.tests.cluster_support import database_query, services_require
from moderation.tests.soak_run import FAULTS, Load, SoakConfig, SoakResult, facts_gather, soak_run

# A net for a hang, not a speed claim: the settle waits give up on a stall.
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1200)]

SOAK_TEST_MINUTES = float(os.environ.get("SOAK_TEST_MINUTES") or 1.0)

_TAMPER = [
    "UPDATE moderation_queuecounter SET n = n + 1 WHERE id = (SELECT min(id) FROM moderation_queuecounter)",
    "UPDATE moderation_queueitem SET idempotency_key = idempotency_key || '-tampered' "
    "WHERE id = (SELECT min(id) FROM moderation_queueitem WHERE idempotency_key LIKE 'soak-%%')",
    # Failed, its window not over: a row the workers leave alone (one set back to pending they would send again).
    "UPDATE moderation_webhookdelivery SET status = 'failed', retry_until = now() + interval '1 hour' "
    "WHERE id = (SELECT min(id) FROM moderation_webhookdelivery WHERE status = 'delivered' AND event = 'item.decided')",
    # Its heartbeat in the future: still counted however long the gathering takes.
    "INSERT INTO moderation_presence (channel_name, item_id, user_id, last_seen) "
    "SELECT 'specific.ghost!1', min(id), (SELECT min(id) FROM auth_user), now() + interval '1 hour' FROM moderation_queueitem",
]
# The audit log's triggers refuse UPDATE; a superuser with replication role skips them, as an intruder with the database might.
_AUDIT_TAMPER = (
    "SET session_replication_role = replica; UPDATE moderation_decisionattempt SET note = 'tampered' "
    "WHERE id = (SELECT min(id) FROM moderation_decisionattempt)"
)


def _tampered_checks(result: SoakResult) -> list[str]:
    """Corrupt the run's history, database and Redis; the checks the judge then fails."""
    cluster = result.cluster
    for statement in _TAMPER:
        database_query(cluster.database_url, statement)
    import psycopg

    with psycopg.connect(cluster.database_url, autocommit=True) as conn:
        conn.execute(_AUDIT_TAMPER)
    listener = redis.Redis(port=cluster.redis.port).pubsub()
    listener.subscribe(f"{cluster.prefix}__group__tampered")
    try:
        facts = facts_gather(cluster, result.load, baseline_groups=result.baseline_groups, memory=result.facts.memory)
    finally:
        listener.close()
    facts.ops = copy.deepcopy(facts.ops)
    loser = next(op for op in facts.ops if op.completion == "fail" and not op.voted)
    loser.completion, loser.told_winner = "ok", loser.reviewer  # told they won; the database says otherwise
    return sorted({finding.check for finding in soak_judge(facts)})


# A submit the run gave up on, as a fault's answers can leave one: the soak sends it again once everything is healed.
GIVEN_UP = "soak-given-up"


def test_a_short_soak_under_every_fault_keeps_every_promise_and_its_judge_sees_tampering(tmp_path, monkeypatch):
    services_require()
    load_init = Load.__init__

    def with_one_given_up(self, *args, **kwargs):
        load_init(self, *args, **kwargs)
        self.given_up[GIVEN_UP] = {"title": "Soak given up", "body": "refused all through the run", "source": "soak"}

    monkeypatch.setattr(Load, "__init__", with_one_given_up)
    controls: list[str] = []
    config = SoakConfig.short(minutes=SOAK_TEST_MINUTES, seed=int(os.environ.get("SOAK_SEED") or 33), out=tmp_path)
    # Faults closer still than a short `make soak`'s: the load lasts until each kind has struck once, so the
    # pauses and the faults' lengths are most of its time (a server's restart is the rest).
    config = dataclasses.replace(config, quiet=(3.0, 5.0), lasting=(3.0, 5.0))
    result = soak_run(config, keep=lambda result: controls.extend(_tampered_checks(result)))
    report = result.report
    print("\n" + soak_table(report))
    assert report["verdict"] == "pass", soak_table(report)
    assert {fault["kind"] for fault in report["faults"]} == set(FAULTS), report["faults"]
    assert report["config"]["items"] > 0 and report["phases"]["quiet"]["answered"] > 0
    # Something raced: losers told the winner, cancels, votes.
    completions = {op.completion for op in result.facts.ops}
    assert {"ok", "fail"} <= completions, completions
    assert controls == ["audit", "counters", "groups", "history", "presence", "submits", "webhooks"]
    # Sent again after the run, the key was accepted, and its item stored once (the judge's submits check).
    assert result.facts.resent[GIVEN_UP] == 201 and len(result.facts.rows_by_key[GIVEN_UP]) == 1, result.facts.resent
