"""Read-only queries for the dashboard."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from django.core.paginator import Page, Paginator
from django.db.models import Prefetch, QuerySet
from django.utils import timezone

from moderation.counts import counted_day, counts_read
from moderation.graphs.asks import AskSpec, decisions_describe
from moderation.models import DECIDED_STATUSES, AskStatus, ItemStatus, QueueItem, ReviewAsk

# An API item shows its asks with who decided each: one query for a whole page.
_ASKS = Prefetch("asks", queryset=ReviewAsk.objects.select_related("decided_by"))


def _queue_items() -> QuerySet[QueueItem]:
    # Race-lab items live in the same table while a lab run goes; reviewers never see them.
    return QueueItem.objects.filter(is_lab=False)


@dataclass(frozen=True)
class QueueCounts:
    pending: int
    decided_today: int
    # Per queue: an item's queue is the graph that asks about it.
    pending_by_graph: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, int]:
        return {"pending": self.pending, "decided_today": self.decided_today}


class _IdsThenRows:
    """A queryset the paginator slices in two steps: the page's ids, then its rows.

    A deep page's OFFSET then walks only the (status, created_at, id, is_lab) index,
    which covers the id query, instead of reading every skipped row from the table.
    """

    def __init__(self, items: QuerySet[QueueItem]) -> None:
        self.items = items

    def count(self) -> int:
        return self.items.count()

    def __getitem__(self, window: slice) -> list[QueueItem]:
        ids = list(self.items.values_list("id", flat=True)[window])
        # The open asks ride along: the queue names the actions each item asks about.
        open_asks = Prefetch("asks", queryset=ReviewAsk.objects.filter(status=AskStatus.PENDING), to_attr="open_asks")
        rows = QueueItem.objects.prefetch_related(open_asks).in_bulk(ids)
        return [rows[i] for i in ids if i in rows]


def queue_pending(*, page: int | str | None, per_page: int) -> Page:
    """Pending items, oldest first. Ordering by an indexed (created_at, id) keeps it stable."""
    items = _queue_items().filter(status=ItemStatus.PENDING).order_by("created_at", "id")
    return Paginator(_IdsThenRows(items), per_page).get_page(page)


def queue_counts(*, now: datetime | None = None) -> QueueCounts:
    """Read from the counter rows moderation.counts keeps: no item is counted, whatever the queue's size."""
    read = counts_read(day=counted_day(now or timezone.now()))
    return QueueCounts(
        pending=read.status_total(ItemStatus.PENDING),
        decided_today=sum(read.decided_on_day.values()),
        pending_by_graph={graph: n for (graph, status), n in read.by_status.items() if status == ItemStatus.PENDING and n},
    )


def item_get(*, public_id: UUID | str) -> QueueItem | None:
    try:
        return QueueItem.objects.select_related("decided_by").get(public_id=UUID(str(public_id)))
    except (QueueItem.DoesNotExist, ValueError):
        return None


def item_asks_open(*, item: QueueItem) -> list[ReviewAsk]:
    """The asks of ``item`` still waiting for a decision, in the order its graph raised them."""
    return list(item.asks.filter(status=AskStatus.PENDING).order_by("round", "position", "id"))


def item_ask_get(*, item: QueueItem, interrupt_id: str) -> ReviewAsk | None:
    return item.asks.filter(interrupt_id=interrupt_id).first()


@dataclass(frozen=True)
class SettledAsk:
    """One decided (or withdrawn) ask, in words, for the item page."""

    by: str
    what: str
    at: datetime
    applied: bool


def item_asks_settled(*, item: QueueItem) -> list[SettledAsk]:
    """Every settled ask of ``item``, oldest first: who decided what, and whether its graph has taken it."""
    asks = item.asks.exclude(status=AskStatus.PENDING).select_related("decided_by").order_by("decided_at", "id")
    return [
        SettledAsk(
            by=ask.decided_by.get_username(),
            what="withdrew the item" if ask.status == AskStatus.WITHDRAWN
            else decisions_describe(spec=AskSpec.from_payload(ask.payload), decisions=ask.decisions),
            at=ask.decided_at, applied=ask.applied_at is not None,
        )
        for ask in asks
    ]


def items_recently_decided(*, limit: int = 10) -> QuerySet[QueueItem]:
    return (
        _queue_items()
        .filter(status__in=[s for s in DECIDED_STATUSES if s != ItemStatus.WITHDRAWN])
        .select_related("decided_by")
        .order_by("-decided_at")[:limit]
    )


def items_needing_attention(*, limit: int = 50) -> QuerySet[QueueItem]:
    return _queue_items().filter(status=ItemStatus.NEEDS_ATTENTION).order_by("created_at", "id")[:limit]


# --- Service clients (/api/v1) -------------------------------------------------------


def client_item_get(*, client_id: int, public_id: UUID | str) -> QueueItem | None:
    """One of the client's own items; a client never sees another's (or a moderator-made) item."""
    try:
        return QueueItem.objects.select_related("decided_by").prefetch_related(_ASKS).get(
            public_id=UUID(str(public_id)), submitted_by_id=client_id
        )
    except (QueueItem.DoesNotExist, ValueError):
        return None


def client_items_page(
    *, client_id: int, after_id: int, limit: int, status: str | None = None, source: str | None = None,
    external_id: str | None = None, decided_after: datetime | None = None, graph: str | None = None,
) -> tuple[list[QueueItem], int | None]:
    """A page of the client's items in id order after ``after_id``, and the id to continue after.

    Keyset, not OFFSET: items inserted while a client pages get higher ids, so they
    never shift the items already paged (no duplicates, no skips).
    """
    items = QueueItem.objects.filter(submitted_by_id=client_id, id__gt=after_id)
    if status:
        items = items.filter(status=status)
    if source:
        items = items.filter(source=source)
    if external_id:
        items = items.filter(external_id=external_id)
    if decided_after:
        items = items.filter(decided_at__gt=decided_after)
    if graph:
        items = items.filter(graph=graph)
    page = list(items.select_related("decided_by").prefetch_related(_ASKS).order_by("id")[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    return page, (page[-1].id if more else None)
