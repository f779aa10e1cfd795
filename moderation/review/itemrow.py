"""The one way a service locks an item's row (``SELECT ... FOR UPDATE``) to decide on what it holds."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from moderation.items.models import QueueItem


def item_row_lock(
    *,
    pk: int | None = None,
    public_id: str | UUID | None = None,
    submitted_by: Any = None,
    related: tuple[str, ...] = (),
) -> QueueItem:
    """The item's row, locked until the caller's transaction ends; raises ``QueueItem.DoesNotExist``.

    Found by ``pk`` or ``public_id`` (and, given, its ``submitted_by`` client). ``related`` rows are read
    in the same query but not locked; without them nothing is joined, as a guard that re-reads a row it
    waited for needs: PostgreSQL does not redo a join on the row it re-reads, so a joined row comes back stale.
    """
    lookup: dict[str, Any] = {"pk": pk} if pk is not None else {"public_id": public_id}
    if submitted_by is not None:
        lookup["submitted_by"] = submitted_by
    if related:
        return QueueItem.objects.select_for_update(of=("self",)).select_related(*related).get(**lookup)
    return QueueItem.objects.select_for_update().get(**lookup)
