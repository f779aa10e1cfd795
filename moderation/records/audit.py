"""The attempts log: keyed, chained per item and across items, append-only.

Each attempt is signed (HMAC-SHA256 with ``AUDIT_KEY``) over its fields, its ``seq``, the
previous entry's MAC, the key id and a digest of the item's content; the item row keeps the
chain's head, and every attempt also gets an entry in one global, chained ledger
(``AuditLedgerEntry``). ``audit_verify`` reports a rewritten, inserted, reordered or deleted
entry, a truncated chain, a deleted item, or an item row that disagrees with its chain;
``verify_audit --anchor`` checks the ledger head kept outside the database. What it cannot
catch (someone holding the database and the key): operators/audit-log.md.

Locking contract of ``attempt_append``: called under the decision's row lock and
transaction; on PostgreSQL it takes a transaction-scoped advisory lock as the last statement
before the commit (ledger appends are serialized; bounded by the decision's ``lock_timeout``,
whose timeout rolls the whole decision back).

Append-only: the models refuse updates and deletes, and triggers (migration 0007) refuse row
UPDATE and DELETE, except inside ``audit_guard_lifted`` (``audit_items_purge`` and the test
suite's flush). Key rotation: the old key moves to ``AUDIT_KEYS``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, connections, transaction
from django.db.models import QuerySet
from django.utils import timezone

from moderation.items.models import AskStatus, QueueItem, Requested, ReviewAsk
from moderation.records.counts import counts_forget
from moderation.records.metrics import metrics_attempt_record
from moderation.records.models import AttemptOutcome, AuditLedgerEntry, DecisionAttempt, LedgerKind, OutcomeReport
from moderation.records.teamstats import teamstats_attempt_record

# Any constant: the key of the PostgreSQL advisory lock that serializes ledger appends.
_LEDGER_LOCK = 7_243_001
GUARD_SETTING = "reviewqueue.audit_guard_lifted"
SQLITE_GUARD_FUNCTION = "reviewqueue_audit_guard_lifted"


class AuditKeyError(Exception):
    pass


@dataclass(frozen=True)
class AuditProblem:
    item: str
    seq: int | None
    problem: str

    def __str__(self) -> str:
        where = (f"item {self.item}" if self.item else "ledger") + (f" entry {self.seq}" if self.seq is not None else "")
        return f"{where}: {self.problem}"


def audit_key_id(*, key: str) -> str:
    return hmac.new(key.encode(), b"reviewqueue audit key id", hashlib.sha256).hexdigest()[:12]


def audit_keys() -> dict[str, bytes]:
    """Every key entries may be signed with, by key id; the current one first."""
    keys = [settings.AUDIT_KEY, *settings.AUDIT_KEYS]
    return {audit_key_id(key=k): k.encode() for k in keys if k}


def _key_current() -> tuple[str, bytes]:
    if not settings.AUDIT_KEY:
        raise AuditKeyError("AUDIT_KEY is not set")
    return audit_key_id(key=settings.AUDIT_KEY), settings.AUDIT_KEY.encode()


def _iso(value: datetime | None) -> str:
    return value.isoformat() if value else ""


def _mac(key: bytes, fields: dict[str, Any]) -> str:
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hmac.new(key, canonical.encode(), hashlib.sha256).hexdigest()


def item_content_digest(*, title: str, body: str, source: str) -> str:
    canonical = json.dumps([title, body, source], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def attempt_digest(*, attempt: DecisionAttempt, item_public_id: str, key: bytes) -> str:
    return _mac(
        key,
        {
            "item": item_public_id,
            "seq": attempt.seq,
            "prev": attempt.prev_hash,
            "key_id": attempt.key_id,
            "content": attempt.content_digest,
            "reviewer": attempt.reviewer_id,
            "requested": attempt.requested,
            "note": attempt.note,
            "outcome": attempt.outcome,
            "winner": attempt.winner_id,
            "winner_status": attempt.winner_status,
            "winner_decided_at": _iso(attempt.winner_decided_at),
            "detail": attempt.detail,
            "requested_at": _iso(attempt.requested_at),
            "recorded_at": _iso(attempt.recorded_at),
            # Signed only where set: an attempt may have no ask, reason or origin.
            **({"ask": attempt.ask_id, "decisions": attempt.decisions} if attempt.ask_id else {}),
            **{name: value for name in ("reason", "origin") if (value := getattr(attempt, name))},
        },
    )


def ledger_digest(*, entry: AuditLedgerEntry, key: bytes) -> str:
    return _mac(
        key,
        {
            "seq": entry.seq,
            "kind": entry.kind,
            "item": str(entry.item_public_id),
            "attempt_seq": entry.attempt_seq,
            "entry_hash": entry.entry_hash,
            "recorded_at": _iso(entry.recorded_at),
            "prev": entry.prev_mac,
            "key_id": entry.key_id,
        },
    )


def attempt_append(*, item: QueueItem, **fields: Any) -> DecisionAttempt:
    """Append an attempt to ``item``'s chain and the global ledger. The caller holds the item's row lock."""
    key_id, key = _key_current()
    attempt = DecisionAttempt(
        item=item,
        seq=item.attempt_count + 1,
        prev_hash=item.audit_head,
        recorded_at=timezone.now(),
        key_id=key_id,
        content_digest=item_content_digest(title=item.title, body=item.body, source=item.source),
        **fields,
    )
    attempt.entry_hash = attempt_digest(attempt=attempt, item_public_id=str(item.public_id), key=key)
    attempt.save(force_insert=True)
    item.attempt_count = attempt.seq
    item.audit_head = attempt.entry_hash
    item.save(update_fields=["attempt_count", "audit_head"])
    _ledger_append(
        kind=LedgerKind.ATTEMPT, item_public_id=str(item.public_id), attempt_seq=attempt.seq, entry_hash=attempt.entry_hash
    )
    metrics_attempt_record(attempt=attempt, item_created_at=item.created_at)
    teamstats_attempt_record(attempt=attempt, item=item)
    return attempt


def outcome_digest(*, report: OutcomeReport, item_public_id: str, key: bytes) -> str:
    return _mac(
        key,
        {
            "item": item_public_id,
            "kind": LedgerKind.OUTCOME.value,
            "status": report.status,
            "message": report.message,
            "by": report.reported_by_id,
            "reported_at": _iso(report.reported_at),
            "key_id": report.key_id,
        },
    )


def outcome_append(*, item: QueueItem, report: OutcomeReport) -> OutcomeReport:
    """Sign and save ``report`` (unsaved) and enter it in the global ledger. The caller holds the item's row
    lock, and makes this its transaction's last write (the ledger's append is, see the module docstring)."""
    key_id, key = _key_current()
    report.item, report.key_id = item, key_id
    report.mac = outcome_digest(report=report, item_public_id=str(item.public_id), key=key)
    report.save(force_insert=True)
    _ledger_append(kind=LedgerKind.OUTCOME, item_public_id=str(item.public_id), entry_hash=report.mac)
    return report


def _ledger_append(*, kind: str, item_public_id: str, attempt_seq: int = 0, entry_hash: str = "") -> AuditLedgerEntry:
    """Append to the global chain; keep it the last write before the commit (see the module docstring)."""
    if not connection.in_atomic_block:
        raise RuntimeError("ledger appends belong inside the decision's transaction")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LEDGER_LOCK])
    key_id, key = _key_current()
    last = AuditLedgerEntry.objects.order_by("-seq").values_list("seq", "mac").first()
    seq, prev = last if last else (0, "")
    entry = AuditLedgerEntry(
        seq=seq + 1,
        kind=kind,
        item_public_id=item_public_id,
        attempt_seq=attempt_seq,
        entry_hash=entry_hash,
        recorded_at=timezone.now(),
        prev_mac=prev,
        key_id=key_id,
    )
    entry.mac = ledger_digest(entry=entry, key=key)
    entry.save(force_insert=True)
    return entry


@contextmanager
def audit_guard_lifted(*, using: str = "default") -> Iterator[None]:
    """Let this connection UPDATE/DELETE log rows (PostgreSQL: only inside the current transaction)."""
    conn = connections[using]
    if conn.vendor == "postgresql":
        if not conn.in_atomic_block:
            raise RuntimeError("lift the audit guard inside a transaction")
        with conn.cursor() as cursor:
            cursor.execute("SELECT set_config(%s, 'on', true)", [GUARD_SETTING])
        try:
            yield
        finally:
            with conn.cursor() as cursor:
                cursor.execute("SELECT set_config(%s, 'off', true)", [GUARD_SETTING])
        return
    conn.audit_guard_lifted = True
    try:
        yield
    finally:
        conn.audit_guard_lifted = False


def audit_sqlite_function_install(*, wrapper: Any) -> None:
    """Give a new SQLite connection the function the append-only triggers ask (``connection_created``)."""
    wrapper.connection.create_function(SQLITE_GUARD_FUNCTION, 0, lambda: int(getattr(wrapper, "audit_guard_lifted", False)))


def audit_items_purge(*, items: QuerySet[QueueItem]) -> list[str]:
    """Delete ``items`` with their logs, leaving a signed purge entry per item; return their thread ids."""
    with transaction.atomic():
        rows = list(items.select_for_update().order_by("id").values_list("pk", "public_id", "thread_id"))
        with audit_guard_lifted(), connection.cursor() as cursor:
            for pk, _, _ in rows:
                cursor.execute(f"DELETE FROM {DecisionAttempt._meta.db_table} WHERE item_id = %s", [pk])
        # Asks PROTECT their item (and their attempts PROTECT them): they go once the attempts have.
        ReviewAsk.objects.filter(item_id__in=[pk for pk, _, _ in rows]).delete()
        counts_forget(items=QueueItem.objects.filter(pk__in=[pk for pk, _, _ in rows]))
        QueueItem.objects.filter(pk__in=[pk for pk, _, _ in rows]).delete()
        for _, public_id, _ in rows:
            _ledger_append(kind=LedgerKind.PURGE, item_public_id=str(public_id))
    return [thread_id for _, _, thread_id in rows]


def audit_head() -> str:
    """The ledger's head as ``seq:mac``, to keep outside the database (see ``verify_audit --anchor``)."""
    last = AuditLedgerEntry.objects.order_by("-seq").values_list("seq", "mac").first()
    return f"{last[0]}:{last[1]}" if last else "0:"


@dataclass(frozen=True)
class AuditReport:
    problems: list[AuditProblem]
    head: str  # the ledger head this check covered, as ``seq:mac``


def audit_verify(*, anchor: str | None = None) -> AuditReport:
    """Every problem in the log, the ledger and the item rows (none for an intact log).

    Reads one snapshot, so decisions made meanwhile are neither waited for nor mistaken
    for tampering.
    """
    with _snapshot():
        return AuditReport(problems=list(_verify(anchor=anchor)), head=audit_head())


@contextmanager
def _snapshot() -> Iterator[None]:
    if connection.in_atomic_block:  # the caller's transaction is the view
        yield
    elif connection.vendor == "postgresql":
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield
    else:
        # Django's own SQLite transactions are IMMEDIATE: they take the write lock and would
        # stall every decision. A DEFERRED one that only reads is a snapshot under WAL.
        with connection.cursor() as cursor:
            cursor.execute("BEGIN DEFERRED")
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("COMMIT")


def _verify(*, anchor: str | None) -> Iterator[AuditProblem]:
    keys = audit_keys()
    expected: dict[tuple[str, int], str] = {}
    outcomes: dict[str, str] = {}
    yield from _ledger_verify(keys=keys, expected=expected, outcomes=outcomes, anchor=anchor)
    seen: set[str] = set()
    for item in QueueItem.objects.select_related("decided_by", "outcome_report").order_by("id").iterator():
        seen.add(str(item.public_id))
        yield from _item_verify(item=item, keys=keys, expected=expected)
        yield from _outcome_verify(item=item, keys=keys, recorded=outcomes.pop(str(item.public_id), None))
    for item_id in sorted(set(outcomes) - seen):
        yield AuditProblem(item_id, None, "item deleted: the ledger records its outcome report")
    left: dict[str, list[int]] = defaultdict(list)
    for item_id, seq in expected:
        left[item_id].append(seq)
    for item_id, seqs in sorted(left.items()):
        if item_id not in seen:
            yield AuditProblem(item_id, None, f"item deleted: the ledger records {len(seqs)} entries for it")
            continue
        for seq in sorted(seqs):
            yield AuditProblem(item_id, seq, "in the global ledger but missing from the item's log (deleted)")


def _ledger_verify(
    *,
    keys: dict[str, bytes],
    expected: dict[tuple[str, int], str],
    outcomes: dict[str, str],
    anchor: str | None,
) -> Iterator[AuditProblem]:
    prev, expected_seq = "", 1
    anchor_seq, _, anchor_mac = (anchor or "").partition(":")
    anchor_found = anchor is None
    for entry in AuditLedgerEntry.objects.order_by("seq").iterator():
        item_id = str(entry.item_public_id)
        if entry.seq != expected_seq:
            yield AuditProblem("", entry.seq, f"expected ledger entry {expected_seq}: entries are missing")
        if entry.prev_mac != prev:
            yield AuditProblem("", entry.seq, "does not link to the ledger entry before it")
        key = keys.get(entry.key_id)
        if key is None:
            yield AuditProblem("", entry.seq, f"signed with unknown key {entry.key_id} (add it to AUDIT_KEYS)")
        elif not hmac.compare_digest(ledger_digest(entry=entry, key=key), entry.mac):
            yield AuditProblem("", entry.seq, "does not match its MAC (edited)")
        if anchor is not None and str(entry.seq) == anchor_seq:
            anchor_found = hmac.compare_digest(entry.mac, anchor_mac)
        if entry.kind == LedgerKind.PURGE:
            for k in [k for k in expected if k[0] == item_id]:
                del expected[k]
        elif entry.kind == LedgerKind.OUTCOME:
            outcomes[item_id] = entry.entry_hash
        else:
            expected[(item_id, entry.attempt_seq)] = entry.entry_hash
        prev, expected_seq = entry.mac, entry.seq + 1
    if not anchor_found:
        yield AuditProblem("", None, f"the anchor {anchor} is not in the ledger (entries after it were cut)")


def _item_verify(*, item: QueueItem, keys: dict[str, bytes], expected: dict[tuple[str, int], str]) -> Iterator[AuditProblem]:
    item_id = str(item.public_id)
    prev, expected_seq = "", 1
    won: list[DecisionAttempt] = []
    for attempt in DecisionAttempt.objects.filter(item=item).order_by("seq", "id"):
        if attempt.seq != expected_seq:
            yield AuditProblem(item_id, attempt.seq, f"expected entry {expected_seq}: an entry is missing or out of order")
        if attempt.prev_hash != prev:
            yield AuditProblem(item_id, attempt.seq, "does not link to the entry before it (deleted or reordered)")
        key = keys.get(attempt.key_id)
        if key is None:
            yield AuditProblem(item_id, attempt.seq, f"signed with unknown key {attempt.key_id} (add it to AUDIT_KEYS)")
        elif not hmac.compare_digest(attempt_digest(attempt=attempt, item_public_id=item_id, key=key), attempt.entry_hash):
            yield AuditProblem(item_id, attempt.seq, "content does not match its hash (edited)")
        recorded = expected.pop((item_id, attempt.seq), None)
        if recorded is None:
            yield AuditProblem(item_id, attempt.seq, "not in the global ledger (written outside the application)")
        elif recorded != attempt.entry_hash:
            yield AuditProblem(item_id, attempt.seq, "differs from its global ledger entry (rewritten)")
        if attempt.outcome == AttemptOutcome.WON:
            won.append(attempt)
        prev = attempt.entry_hash
        expected_seq = attempt.seq + 1
    if expected_seq - 1 != item.attempt_count or prev != item.audit_head:
        yield AuditProblem(
            item_id, None, f"chain ends at entry {expected_seq - 1} but the item records {item.attempt_count} (entries deleted)"
        )
    yield from _item_row_verify(item=item, won=won)


def _outcome_verify(*, item: QueueItem, keys: dict[str, bytes], recorded: str | None) -> Iterator[AuditProblem]:
    """An item's outcome report must match its MAC and its one ledger entry; a ledger entry needs its report."""
    item_id = str(item.public_id)
    report = getattr(item, "outcome_report", None)
    if report is None:
        if recorded is not None:
            yield AuditProblem(item_id, None, "its outcome report is in the global ledger but missing (deleted)")
        return
    key = keys.get(report.key_id)
    if key is None:
        yield AuditProblem(item_id, None, f"its outcome report is signed with unknown key {report.key_id}")
    elif not hmac.compare_digest(outcome_digest(report=report, item_public_id=item_id, key=key), report.mac):
        yield AuditProblem(item_id, None, "its outcome report does not match its MAC (edited)")
    if recorded is None:
        yield AuditProblem(item_id, None, "its outcome report is not in the global ledger (written outside the application)")
    elif recorded != report.mac:
        yield AuditProblem(item_id, None, "its outcome report differs from its global ledger entry (rewritten)")


def _item_row_verify(*, item: QueueItem, won: list[DecisionAttempt]) -> Iterator[AuditProblem]:
    """Each decided ask (and a decided row) must be its log's one winning entry, and the graph must agree."""
    item_id = str(item.public_id)
    asks = {ask.pk: ask for ask in item.asks.all()}
    by_ask: dict[int | None, list[DecisionAttempt]] = defaultdict(list)
    for entry in won:
        by_ask[entry.ask_id].append(entry)
    # One withdrawal settles every open ask with one entry (logged on the first of them):
    # each withdrawn ask must match it by who and when; its rejections are derived, not logged.
    withdrawals = [entry for entry in won if entry.requested == Requested.WITHDRAW]
    for pk, ask in asks.items():
        entries = by_ask.get(pk, [])
        if ask.status == AskStatus.WITHDRAWN:
            if len(withdrawals) != 1 or (ask.decided_by_id, ask.decided_at) != (
                withdrawals[0].winner_id,
                withdrawals[0].winner_decided_at,
            ):
                yield AuditProblem(item_id, None, f"ask {ask.interrupt_id} is withdrawn but its log has no matching withdrawal")
            continue
        if ask.is_pending:
            if entries:
                yield AuditProblem(item_id, None, f"ask {ask.interrupt_id} is pending but its log has a winning entry")
            continue
        if len(entries) != 1:
            yield AuditProblem(
                item_id, None, f"ask {ask.interrupt_id} is {ask.status} but its log has {len(entries)} winning entries"
            )
            continue
        entry = entries[0]
        if (ask.decided_by_id, ask.decided_at, ask.decisions or entry.decisions, ask.reason) != (
            entry.winner_id,
            entry.winner_decided_at,
            entry.decisions,
            entry.reason,
        ):
            yield AuditProblem(item_id, entry.seq, f"ask {ask.interrupt_id}'s decision differs from its log's winning entry")
    if item.is_decided:
        latest = max(won, key=lambda entry: entry.seq, default=None)
        if latest is None:
            yield AuditProblem(item_id, None, f"the item is {item.status} but its log has no winning entry")
            return
        row = (item.status, item.decided_by_id, item.decided_at, item.decision_note)
        logged = (latest.winner_status, latest.winner_id, latest.winner_decided_at, latest.note)
        if row != logged:
            yield AuditProblem(item_id, None, f"the item row's decision {_show(row)} differs from its log's {_show(logged)}")
        content = item_content_digest(title=item.title, body=item.body, source=item.source)
        if not hmac.compare_digest(content, latest.content_digest):
            yield AuditProblem(item_id, None, "the item's title, body or source changed after it was decided")
    mismatch = item_graph_mismatch(item=item)
    if mismatch:
        yield AuditProblem(item_id, None, mismatch)


def item_graph_mismatch(*, item: QueueItem) -> str | None:
    """How the item's asks disagree with its graph (None if they agree): an ask recorded
    as applied must no longer be waited on by its graph.

    Only that direction: the rows are read in one snapshot while the checkpointer is read
    live, so an ask the snapshot still shows pending may have been decided and applied
    since. (``manage.py recover`` checks pending asks, under the item's lock.)
    """
    # Imported here: every SQLite connection imports this module (audit_sqlite_function_install), and
    # graphs.runtime brings LangGraph, which a process that runs no graph (moderator_add) never needs.
    from moderation.graphs.runtime import graph_asks_pending

    applied = {ask.interrupt_id for ask in item.asks.all() if ask.applied_at is not None}
    if not applied:
        return None
    for waiting in graph_asks_pending(name=item.graph, thread_id=item.thread_id):
        if waiting.interrupt_id in applied:
            return f"ask {waiting.interrupt_id} is recorded as applied but its graph still waits on it (run manage.py recover)"
    return None


def _show(values: tuple) -> str:
    return "(" + ", ".join(_iso(v) if isinstance(v, datetime) else str(v) for v in values) + ")"
