import hashlib
import json
import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction

from moderation.items.models import QueueItem, ReviewAsk
from moderation.lab.runner import lab_items_remove
from moderation.records.audit import audit_guard_lifted, audit_head, audit_key_id, audit_verify
from moderation.records.models import AppendOnlyError, AuditLedgerEntry, DecisionAttempt, LedgerKind
from moderation.review.decisions import item_decide
from moderation.review.items import lab_item_create

ATTEMPTS = DecisionAttempt._meta.db_table
LEDGER = AuditLedgerEntry._meta.db_table
ITEMS = QueueItem._meta.db_table
ASKS = ReviewAsk._meta.db_table


@pytest.fixture
def history(alice, bob, make_moderator, make_item):
    carol = make_moderator("carol")
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    item_decide(item_public_id=item.public_id, reviewer=bob, decision="reject")
    item_decide(item_public_id=item.public_id, reviewer=carol, decision="reject")
    other = make_item()
    item_decide(item_public_id=other.public_id, reviewer=bob, decision="reject")
    return item


def _problems(**kwargs):
    return [str(p) for p in audit_verify(**kwargs).problems]


def _sql(statement, params=()):
    """Tamper as someone who owns the database (and so can lift or drop the append-only triggers)."""
    with audit_guard_lifted(), connection.cursor() as cursor:
        cursor.execute(statement, params)


def _plain_digest(attempt, item_public_id):
    """A forger without the key: an unkeyed SHA-256 over the attempt's fields, which anyone can recompute."""
    iso = lambda v: v.isoformat() if v else ""  # noqa: E731
    fields = {
        "item": item_public_id,
        "seq": attempt.seq,
        "prev": attempt.prev_hash,
        "reviewer": attempt.reviewer_id,
        "requested": attempt.requested,
        "note": attempt.note,
        "outcome": attempt.outcome,
        "winner": attempt.winner_id,
        "winner_status": attempt.winner_status,
        "winner_decided_at": iso(attempt.winner_decided_at),
        "detail": attempt.detail,
        "requested_at": iso(attempt.requested_at),
        "recorded_at": iso(attempt.recorded_at),
    }
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


@pytest.mark.django_db
def test_intact_log_verifies(history, capsys):
    assert _problems() == []
    call_command("verify_audit")
    assert f"audit log intact: 4 ledger entries, head {audit_head()}" in capsys.readouterr().out
    attempts = list(DecisionAttempt.objects.filter(item=history).order_by("seq"))
    assert [a.seq for a in attempts] == [1, 2, 3]
    assert attempts[1].prev_hash == attempts[0].entry_hash
    assert list(AuditLedgerEntry.objects.values_list("seq", flat=True)) == [1, 2, 3, 4]


@pytest.mark.django_db
def test_edited_entry_is_detected(history):
    _sql(f"UPDATE {ATTEMPTS} SET requested = 'approve' WHERE item_id = %s AND seq = 2", [history.pk])
    assert any("entry 2: content does not match its hash (edited)" in p for p in _problems())
    with pytest.raises(CommandError, match="audit log broken"):
        call_command("verify_audit")


@pytest.mark.django_db
def test_edited_winner_is_detected(history, make_moderator):
    mallory = make_moderator("mallory")
    _sql(
        f"UPDATE {ATTEMPTS} SET winner_id = %s, reviewer_id = %s WHERE item_id = %s AND seq = 1",
        [mallory.pk, mallory.pk, history.pk],
    )
    assert any("entry 1: content does not match" in p for p in _problems())


@pytest.mark.django_db
def test_deleted_middle_entry_is_detected(history):
    _sql(f"DELETE FROM {ATTEMPTS} WHERE item_id = %s AND seq = 2", [history.pk])
    problems = _problems()
    assert any("entry 3: expected entry 2" in p for p in problems)
    assert any("entry 3: does not link" in p for p in problems)
    assert any("entry 2: in the global ledger but missing from the item's log (deleted)" in p for p in problems)


@pytest.mark.django_db
def test_deleted_last_entry_is_detected(history):
    _sql(f"DELETE FROM {ATTEMPTS} WHERE item_id = %s AND seq = 3", [history.pk])
    assert any("entries deleted" in p for p in _problems())


@pytest.mark.django_db
def test_reordered_entries_are_detected(history):
    first, second = DecisionAttempt.objects.filter(item=history).order_by("seq")[:2]
    for pk, seq in ((first.pk, 100), (second.pk, 1), (first.pk, 2)):
        _sql(f"UPDATE {ATTEMPTS} SET seq = %s WHERE id = %s", [seq, pk])
    problems = _problems()
    assert any("does not link" in p for p in problems)
    assert any("content does not match" in p for p in problems)


# --- Regressions of issue #12: each passed `verify_audit` (or was allowed) before. ---


@pytest.mark.django_db
def test_history_rewritten_with_recomputed_plain_hashes_is_detected(alice, bob, make_item):
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    # alice's approval becomes bob's rejection; every hash and the head recomputed.
    attempt = DecisionAttempt.objects.get(item=item)
    _sql(
        f"UPDATE {ATTEMPTS} SET reviewer_id = %s, winner_id = %s, requested = 'reject', winner_status = 'rejected' WHERE id = %s",
        [bob.pk, bob.pk, attempt.pk],
    )
    forged = _plain_digest(DecisionAttempt.objects.get(pk=attempt.pk), str(item.public_id))
    _sql(f"UPDATE {ATTEMPTS} SET entry_hash = %s WHERE id = %s", [forged, attempt.pk])
    _sql(f"UPDATE {ITEMS} SET status = 'rejected', decided_by_id = %s, audit_head = %s WHERE id = %s", [bob.pk, forged, item.pk])
    problems = _problems()
    assert any("entry 1: content does not match its hash (edited)" in p for p in problems), problems
    assert any("entry 1: differs from its global ledger entry (rewritten)" in p for p in problems)
    ask = item.asks.get().interrupt_id
    assert any(f"ask {ask}'s decision differs from its log's winning entry" in p for p in problems), problems


@pytest.mark.django_db
def test_deleted_last_entry_with_rewound_head_is_detected(history):
    before = DecisionAttempt.objects.get(item=history, seq=2)
    _sql(f"DELETE FROM {ATTEMPTS} WHERE item_id = %s AND seq = 3", [history.pk])
    _sql(f"UPDATE {ITEMS} SET attempt_count = 2, audit_head = %s WHERE id = %s", [before.entry_hash, history.pk])
    assert _problems() == [f"item {history.public_id} entry 3: in the global ledger but missing from the item's log (deleted)"]


@pytest.mark.django_db
def test_item_row_winner_and_status_changed_alone_is_detected(history, bob):
    # alice approved first; only the item row is made to say bob rejected.
    _sql(f"UPDATE {ITEMS} SET status = 'rejected', decided_by_id = %s WHERE id = %s", [bob.pk, history.pk])
    problems = _problems()
    assert any("the item row's decision (rejected" in p and "differs from its log's (approved" in p for p in problems), problems


@pytest.mark.django_db
def test_item_deleted_with_all_its_attempts_is_detected(history):
    _sql(f"DELETE FROM {ATTEMPTS} WHERE item_id = %s", [history.pk])
    _sql(f"DELETE FROM {ASKS} WHERE item_id = %s", [history.pk])
    _sql(f"DELETE FROM {ITEMS} WHERE id = %s", [history.pk])
    assert _problems() == [f"item {history.public_id}: item deleted: the ledger records 3 entries for it"]


@pytest.mark.django_db
def test_decided_content_edited_afterwards_is_detected(history):
    QueueItem.objects.filter(pk=history.pk).update(body="Something else entirely.")
    assert any("title, body or source changed after it was decided" in p for p in _problems())


@pytest.mark.django_db
def test_queryset_update_and_delete_are_refused(history):
    for model, field in ((DecisionAttempt, "note"), (AuditLedgerEntry, "entry_hash")):
        with pytest.raises(AppendOnlyError, match="append-only"):
            model.objects.all().update(**{field: "rewritten"})
        with pytest.raises(AppendOnlyError, match="append-only"):
            model.objects.all().delete()
    assert DecisionAttempt.objects.count() == 4 and _problems() == []


@pytest.mark.postgres_variant
@pytest.mark.django_db
def test_database_refuses_update_and_delete_of_log_rows(history):
    for statement in (
        f"UPDATE {ATTEMPTS} SET note = 'rewritten' WHERE item_id = %s",
        f"DELETE FROM {ATTEMPTS} WHERE item_id = %s",
        f"UPDATE {LEDGER} SET entry_hash = '' WHERE item_public_id = (SELECT public_id FROM {ITEMS} WHERE id = %s)",
        f"DELETE FROM {LEDGER} WHERE item_public_id = (SELECT public_id FROM {ITEMS} WHERE id = %s)",
    ):
        with pytest.raises(IntegrityError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement, [history.pk])
    assert DecisionAttempt.objects.filter(item=history).count() == 3 and _problems() == []


@pytest.mark.django_db
def test_anchor_catches_a_cut_of_the_newest_entries(history, alice, make_item):
    before = audit_head()
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    after = audit_head()
    # The newest decision erased everywhere: its attempt, its ledger entry, its asks, its item row.
    _sql(f"DELETE FROM {ATTEMPTS} WHERE item_id = %s", [item.pk])
    _sql(f"DELETE FROM {LEDGER} WHERE seq = %s", [int(after.split(":")[0])])
    _sql(f"DELETE FROM {ASKS} WHERE item_id = %s", [item.pk])
    _sql(f"DELETE FROM {ITEMS} WHERE id = %s", [item.pk])
    assert _problems() == []  # the documented limit: only an anchor kept elsewhere shows it
    assert _problems(anchor=before) == []
    assert _problems(anchor=after) == [f"ledger: the anchor {after} is not in the ledger (entries after it were cut)"]
    with pytest.raises(CommandError):
        call_command("verify_audit", "--anchor", after)


@pytest.mark.django_db
def test_rotated_key_keeps_old_entries_verifiable(history, alice, make_item, settings):
    old_key = settings.AUDIT_KEY
    settings.AUDIT_KEY, settings.AUDIT_KEYS = "a-new-audit-key-for-the-rotation-test", [old_key]
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    assert DecisionAttempt.objects.get(item=item).key_id == audit_key_id(key=settings.AUDIT_KEY)
    assert _problems() == []
    settings.AUDIT_KEYS = []
    assert any(f"signed with unknown key {audit_key_id(key=old_key)}" in p for p in _problems())


@pytest.mark.django_db
def test_a_forged_entry_signed_with_another_key_is_detected(history, settings):
    settings.AUDIT_KEY = "the-forger-does-not-have-the-real-key"
    settings.AUDIT_KEYS = []
    problems = _problems()
    assert problems and all("signed with unknown key" in p for p in problems)


@pytest.mark.django_db
def test_lab_purge_leaves_a_signed_trace_and_an_intact_log(alice, make_item):
    lab = lab_item_create(title="Lab", body="A lab item.")
    kept = make_item()
    for item in (lab, kept):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    assert lab_items_remove() == 1
    assert not QueueItem.objects.filter(pk=lab.pk).exists()
    assert AuditLedgerEntry.objects.filter(kind=LedgerKind.PURGE, item_public_id=lab.public_id).count() == 1
    assert _problems() == []


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
def test_verify_while_reviewers_decide_sees_one_consistent_snapshot(make_moderator, make_item):
    reviewers = [make_moderator() for _ in range(2)]
    items = [make_item(title=f"live {i}") for i in range(15)]
    done = threading.Event()

    def decide():
        try:
            for item in items:
                for reviewer in reviewers:
                    item_decide(item_public_id=item.public_id, reviewer=reviewer, decision="approve")
        finally:
            done.set()
            connection.close()

    worker = threading.Thread(target=decide)
    worker.start()
    checks = []
    while not done.is_set():
        checks.append(_problems())
    worker.join()
    assert len(checks) >= 2
    assert [problems for problems in checks if problems] == []
    assert _problems() == []
