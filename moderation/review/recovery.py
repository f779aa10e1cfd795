"""Start-up and on-demand reconciliation of every item that is not settled."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q

from moderation.core.locks import item_lock
from moderation.graphs.registry import graph_names
from moderation.models import DECIDED_STATUSES, UNDECIDED_STATUSES, ApplyState, ItemStatus, QueueItem
from moderation.records.counts import counts_apply, item_counted
from moderation.review.reconcile import item_reconcile

logger = logging.getLogger(__name__)

# What an attention reason may keep of an exception's text (it is shown on the dashboard).
REASON_MAX_LENGTH = 500


@dataclass(frozen=True)
class RecoveryAction:
    item: str
    title: str
    action: str
    failed: bool = False


@dataclass
class RecoveryReport:
    checked: int = 0
    actions: list[RecoveryAction] = field(default_factory=list)
    # graph name -> its unsettled items, left as they are: this process does not run the graph.
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        return sum(action.failed for action in self.actions)


def items_recover(
    *, include_decided: bool = False, progress: Callable[[int, int], None] | None = None
) -> RecoveryReport:
    """Reconcile starting, pending, needs-attention and not-yet-applied items (decided ones too if asked) with their graphs.

    Idempotent: a second run finds nothing to do. Each item is handled under the same
    locks as a decision, so it is safe while reviewers are working, and on its own: an
    item that cannot be repaired (whatever it contains) is marked needs attention with
    the reason and the run goes on, so no single item can stop a server from starting.
    Items of a graph this process does not run are not touched, only counted
    (``skipped``): nothing is wrong with them, and a run that has the graph back repairs them.
    """
    statuses = list(UNDECIDED_STATUSES)
    if include_decided:
        statuses += list(DECIDED_STATUSES)
    unsettled = Q(status__in=statuses) | Q(apply_state__in=[ApplyState.APPLYING, ApplyState.FAILED])
    items = QueueItem.objects.filter(unsettled)
    loaded = graph_names()
    report = RecoveryReport(skipped=dict(
        items.exclude(graph__in=loaded).values_list("graph").annotate(Count("id")).order_by("graph")))
    keys = list(items.filter(graph__in=loaded).order_by("id").values_list("public_id", flat=True))
    for done, public_id in enumerate(keys, start=1):
        key = str(public_id)
        try:
            title, action = item_reconcile(key=key)
            if action != "ok":
                report.actions.append(RecoveryAction(item=key, title=title, action=action))
        except Exception as exc:
            logger.exception("recover: item %s could not be repaired", key)
            reason = _reason(exc)
            title = _attention_mark(key=key, reason=f"recovery failed: {reason}")
            report.actions.append(RecoveryAction(item=key, title=title, action=f"could not repair: {reason}", failed=True))
        report.checked = done
        if progress is not None:
            progress(done, len(keys))
    return report


def _attention_mark(*, key: str, reason: str) -> str:
    """Flag a pending item the run could not repair; return its title ("" if even that failed).

    A decided row keeps its winner (the database refuses a needs-attention item with
    one); the failure is still reported and counted.
    """
    try:
        with item_lock(key, timeout=settings.DECISION_LOCK_TIMEOUT), transaction.atomic():
            item = QueueItem.objects.select_for_update().get(public_id=key)
            if item.status in UNDECIDED_STATUSES:
                before = item_counted(item)
                item.status = ItemStatus.NEEDS_ATTENTION
                item.attention = reason
                item.save(update_fields=["status", "attention"])
                counts_apply(before=before, after=item_counted(item))
            return item.title
    except Exception:
        logger.exception("recover: could not mark item %s as needing attention", key)
        return ""


def _reason(exc: Exception) -> str:
    # The text came from an item's own data: keep it storable (no NUL) and short.
    text = f"{type(exc).__name__}: {exc}".replace("\x00", "\\x00")
    return text if len(text) <= REASON_MAX_LENGTH else text[: REASON_MAX_LENGTH - 1] + "…"
