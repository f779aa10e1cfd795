"""A remote agent's report of what it did with an item's decision (``POST /api/v1/items/{id}/outcome``).

An in-process graph's outcome is read from its final state by the worker
(``moderation.graphs.outcome``); an agent in its own service resumes its own thread, so
only it can say whether its tool then ran: ``done`` or ``failed``, with a short message.

The first report stands. The same report again is answered as a success (a retry after
a lost answer); a different one is refused (``outcome_already_reported``), never
written over: what the item page, the history and the webhook said stays true, and
the audit ledger holds one report per item.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from moderation.core.faults import fault_point
from moderation.core.text import TextInvalid, text_check
from moderation.delivery.models import ApiClient
from moderation.delivery.outbox import item_outcome_record
from moderation.items.models import QueueItem
from moderation.records import events
from moderation.records.audit import outcome_append
from moderation.records.models import OUTCOME_MESSAGE_MAX_LENGTH, OutcomeReport, OutcomeStatus
from moderation.review.itemrow import item_row_lock

# A message is a line or a few: tabs and line breaks, no other control character
# (a terminal escape would reach whoever reads the history in a shell).
_ALLOWED_CONTROLS = {"\t", "\n", "\r"}


class OutcomeRefused(Exception):
    """A report that was not recorded; nothing was changed. ``code``: the API's error code."""

    code = "invalid"
    http_status = 422

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class OutcomeInvalid(OutcomeRefused):
    code = "invalid"
    http_status = 422


class OutcomeItemUnknown(OutcomeRefused):
    # Another client's item answers as one that does not exist: nothing to probe.
    code = "not_found"
    http_status = 404


class OutcomeNotDecided(OutcomeRefused):
    code = "not_decided"
    http_status = 409


class OutcomeAlreadyReported(OutcomeRefused):
    code = "outcome_already_reported"
    http_status = 409


@dataclass(frozen=True)
class Reported:
    report: OutcomeReport
    created: bool  # False: the same report was already recorded (a retry)


def outcome_message_check(*, message: str) -> str:
    """``message`` if it may be stored and shown; ``OutcomeInvalid`` naming ``message`` otherwise."""
    try:
        text_check(text=message, field="message")
    except TextInvalid as exc:
        raise OutcomeInvalid(f"message: {exc}", field="message") from None
    if len(message) > OUTCOME_MESSAGE_MAX_LENGTH:
        raise OutcomeInvalid(f"message: at most {OUTCOME_MESSAGE_MAX_LENGTH} characters, not {len(message)}", field="message")
    bad = next((c for c in message if unicodedata.category(c) == "Cc" and c not in _ALLOWED_CONTROLS), None)
    if bad is not None:
        raise OutcomeInvalid(f"message: must not contain control characters (U+{ord(bad):04X})", field="message")
    return message


def item_outcome_report(*, client: ApiClient, item_public_id: str, status: str, message: str) -> Reported:
    """Record ``client``'s report on its own decided item, audited, with its ``item.outcome`` webhook.

    Locking: the input is checked before any lock. Then, in one transaction, the item's row
    lock (``select_for_update``) serializes this with every report, decision and apply of
    the item: the decided check and the "one report" check are made on what the lock
    holds, and the report, its webhook delivery and its ledger entry (the last write, as
    the ledger asks) commit together. The item page's live refresh goes out after the commit.
    """
    if status not in OutcomeStatus.values:
        raise OutcomeInvalid(f"status: one of {', '.join(OutcomeStatus.values)}, not {status!r}", field="status")
    outcome_message_check(message=message)
    with events.events_held(), transaction.atomic():
        try:
            item = item_row_lock(public_id=item_public_id, submitted_by=client)
        except QueueItem.DoesNotExist:
            raise OutcomeItemUnknown("no such item") from None
        # Read once the lock is held (not joined to the locking query, whose joined rows PostgreSQL does not re-read).
        existing = OutcomeReport.objects.filter(item=item).first()
        if existing is not None:
            if (existing.status, existing.message) == (status, message):
                return Reported(report=existing, created=False)
            raise OutcomeAlreadyReported(
                f"this item's outcome was already reported ({existing.status}, {existing.reported_at.isoformat()}); "
                "the first report stands"
            )
        if not item.is_decided:
            raise OutcomeNotDecided(f"the item is {item.status}: report its outcome once it is decided")
        fault_point("outcome_checked", item_key=str(item.public_id))
        report = OutcomeReport(item=item, status=status, message=message, reported_by=client, reported_at=timezone.now())
        item_outcome_record(item=item, report=report)
        outcome_append(item=item, report=report)
        events.item_applied_after_commit(item=item)
    return Reported(report=report, created=True)
