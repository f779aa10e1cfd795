"""Start-up and on-demand reconciliation of every item that is not settled."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from moderation.locks import item_lock
from moderation.models import ItemStatus, QueueItem
from moderation.reconcile import item_reconcile_locked


@dataclass(frozen=True)
class RecoveryAction:
    item: str
    title: str
    action: str


def items_recover(
    *, include_decided: bool = False, progress: Callable[[int, int], None] | None = None
) -> list[RecoveryAction]:
    """Reconcile pending and needs-attention items (and decided ones if asked) with their graphs.

    Idempotent: a second run finds nothing to do. Each item is handled under the same
    locks as a decision, so it is safe while reviewers are working. Returns the items
    that changed or still need an operator.
    """
    statuses = [ItemStatus.PENDING, ItemStatus.NEEDS_ATTENTION]
    if include_decided:
        statuses += [ItemStatus.APPROVED, ItemStatus.REJECTED]
    keys = list(QueueItem.objects.filter(status__in=statuses).order_by("id").values_list("public_id", flat=True))
    actions: list[RecoveryAction] = []
    for done, public_id in enumerate(keys, start=1):
        key = str(public_id)
        with item_lock(key, timeout=settings.DECISION_LOCK_TIMEOUT), transaction.atomic():
            item = QueueItem.objects.select_for_update().get(public_id=key)
            action = item_reconcile_locked(item=item, retry=True)
        if action != "ok":
            actions.append(RecoveryAction(item=key, title=item.title, action=action))
        if progress is not None:
            progress(done, len(keys))
    return actions
