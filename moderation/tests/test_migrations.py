"""Migration 0007: plain SHA-256 chains are checked, then re-signed and entered into the ledger."""

import hashlib
import json

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from moderation.records.audit import audit_verify

BEFORE, AFTER = ("moderation", "0006_lab_marker"), ("moderation", "0007_audit_keyed_ledger")


def _plain(fields):
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()


def _old_log_write(apps, *, tamper: bool):
    """Two attempts on one item, chained the way 0005's code did."""
    User, Item, Attempt = (apps.get_model(*m) for m in (("auth", "User"), ("moderation", "QueueItem"), ("moderation", "DecisionAttempt")))
    alice = User.objects.create(username="alice")
    now = timezone.now()
    item = Item.objects.create(
        title="t", body="b", source="s", thread_id="item-x", status="approved", decided_by=alice, decided_at=now
    )
    prev = ""
    for seq, outcome in ((1, "won"), (2, "lost")):
        fields = {
            "item": str(item.public_id), "seq": seq, "prev": prev, "reviewer": alice.pk, "requested": "approve",
            "note": "", "outcome": outcome, "winner": alice.pk, "winner_status": "approved",
            "winner_decided_at": now.isoformat(), "detail": "", "requested_at": now.isoformat(),
            "recorded_at": now.isoformat(),
        }
        entry = _plain(fields)
        Attempt.objects.create(
            item=item, reviewer=alice, requested="approve", outcome=outcome, winner=alice, winner_status="approved",
            winner_decided_at=now, requested_at=now, recorded_at=now, seq=seq, prev_hash=prev,
            note="edited" if tamper and seq == 1 else "", entry_hash=entry,
        )
        prev = entry
    Item.objects.filter(pk=item.pk).update(attempt_count=2, audit_head=prev)
    return item


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("tamper", [False, True])
def test_0006_resigns_an_intact_plain_log_and_refuses_a_broken_one(tamper):
    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE])
    executor.loader.build_graph()
    item = _old_log_write(executor.loader.project_state([BEFORE]).apps, tamper=tamper)
    executor = MigrationExecutor(connection)
    if tamper:
        with pytest.raises(RuntimeError, match=f"item {item.public_id} is broken at entry 1; not re-signing it"):
            executor.migrate([AFTER])
        apps = executor.loader.project_state([BEFORE]).apps
        apps.get_model("moderation", "DecisionAttempt").objects.all().delete()  # 0005 had no triggers
        call_command("migrate", "moderation", verbosity=0)  # leave the schema as the suite expects
        return
    executor.migrate([AFTER])
    call_command("migrate", "moderation", verbosity=0)  # later migrations, which today's models need
    # The re-signed chain verifies; the item predates asks, so only its row is checked against its log.
    assert [p.problem for p in audit_verify().problems] == []
