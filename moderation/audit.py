"""The attempts log as a per-item hash chain.

Each attempt's hash covers its own fields, its position (``seq``) and the previous
attempt's hash; the item row keeps the chain's head and length. Editing, deleting or
reordering any entry (the last one included) breaks a link that ``audit_verify`` finds.
Appends happen under the item's row lock, which the guard already holds, so the chain
needs no lock of its own.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from moderation.models import DecisionAttempt, QueueItem


@dataclass(frozen=True)
class AuditProblem:
    item: str
    seq: int | None
    problem: str

    def __str__(self) -> str:
        where = f"item {self.item}" + (f" entry {self.seq}" if self.seq is not None else "")
        return f"{where}: {self.problem}"


def _iso(value: datetime | None) -> str:
    return value.isoformat() if value else ""


def attempt_digest(*, attempt: DecisionAttempt, item_public_id: str) -> str:
    fields: dict[str, Any] = {
        "item": item_public_id,
        "seq": attempt.seq,
        "prev": attempt.prev_hash,
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
    }
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def attempt_append(*, item: QueueItem, **fields: Any) -> DecisionAttempt:
    """Append an attempt to ``item``'s chain. The caller holds the item's row lock."""
    attempt = DecisionAttempt(
        item=item, seq=item.attempt_count + 1, prev_hash=item.audit_head, recorded_at=timezone.now(), **fields
    )
    attempt.entry_hash = attempt_digest(attempt=attempt, item_public_id=str(item.public_id))
    attempt.save(force_insert=True)
    item.attempt_count = attempt.seq
    item.audit_head = attempt.entry_hash
    item.save(update_fields=["attempt_count", "audit_head"])
    return attempt


def audit_verify(*, items: Iterator[QueueItem] | None = None) -> Iterator[AuditProblem]:
    """Yield every break in every item's chain (nothing for an intact log)."""
    for item in items if items is not None else QueueItem.objects.order_by("id").iterator():
        yield from _item_verify(item)


def _item_verify(item: QueueItem) -> Iterator[AuditProblem]:
    item_id = str(item.public_id)
    prev = ""
    expected_seq = 1
    for attempt in DecisionAttempt.objects.filter(item=item).order_by("seq", "id"):
        if attempt.seq != expected_seq:
            yield AuditProblem(item_id, attempt.seq, f"expected entry {expected_seq}: an entry is missing or out of order")
        if attempt.prev_hash != prev:
            yield AuditProblem(item_id, attempt.seq, "does not link to the entry before it (deleted or reordered)")
        if attempt_digest(attempt=attempt, item_public_id=item_id) != attempt.entry_hash:
            yield AuditProblem(item_id, attempt.seq, "content does not match its hash (edited)")
        prev = attempt.entry_hash
        expected_seq = attempt.seq + 1
    if expected_seq - 1 != item.attempt_count or prev != item.audit_head:
        yield AuditProblem(item_id, None, f"chain ends at entry {expected_seq - 1} but the item records {item.attempt_count} (entries deleted)")
