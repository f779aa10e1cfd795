"""Queue counts kept in counter rows, written in the transaction of every status change.

Each status change moves its item's count in ``QueueCounter``, ``DecidedDayCounter`` and, for a
pending item, ``PendingCounter`` (what /metrics reports), in the changing transaction
(``counts_apply``), so a reader sums a few rows and the counts are exact at every commit.
Race-lab items are not counted.

Each change adds to one of ``SHARDS`` rows picked at random, so concurrent commits on
PostgreSQL do not queue on one row's lock; a read sums the shards (one shard may be negative).
The write is one ``INSERT ... ON CONFLICT DO UPDATE SET n = n + excluded.n`` per table.
``counts_recount`` (``manage.py recover --counts``) repairs drift from out-of-band writes. Why:
contributors/architecture.md.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime

from django.db import connection, models, transaction
from django.db.models import Count, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from moderation.items.models import ItemStatus, QueueItem
from moderation.records.models import DecidedDayCounter, PendingCounter, QueueCounter

SHARDS = 8
# Priority bands of the pending counts: one escalation (ESCALATION_PRIORITY_STEP, 10) takes
# an item of the default priority 0 to "high".
HIGH_PRIORITY = 10
NO_TEAM = 0  # PendingCounter.team_key of an item of no team (a key column, so not NULL)


def priority_band(priority: int) -> str:
    return "high" if priority >= HIGH_PRIORITY else "low" if priority < 0 else "normal"


@dataclass(frozen=True)
class Counted:
    """What one item counts towards."""

    graph: str
    status: str
    decided_day: date | None
    team_key: int = NO_TEAM
    band: str = "normal"


def counted_day(at: datetime) -> date:
    # The default time zone, not the request's: every writer must put an item on the same day.
    return at.astimezone(timezone.get_default_timezone()).date()


def item_counted(item: QueueItem) -> Counted | None:
    """What ``item`` counts towards as it is now; None for a race-lab item (never counted)."""
    if item.is_lab:
        return None
    return Counted(
        graph=item.graph,
        status=item.status,
        decided_day=counted_day(item.decided_at) if item.decided_at else None,
        team_key=item.team_id or NO_TEAM,
        band=priority_band(item.priority),
    )


def counts_apply(*, before: Counted | None, after: Counted | None) -> None:
    """Move one item's count from ``before`` to ``after`` (None: not counted, e.g. not yet created).

    Call inside the transaction that writes the change; nothing is written when nothing counted changed.
    """
    counts_apply_many(changes=[(before, after)])


def counts_apply_many(*, changes: Iterable[tuple[Counted | None, Counted | None]]) -> None:
    """``counts_apply`` for many items at once (a batch's rows): still one statement per table."""
    statuses: Counter[tuple[str, str]] = Counter()
    days: Counter[tuple[date, str]] = Counter()
    pending: Counter[tuple[int, str, str]] = Counter()
    for before, after in changes:
        for counted, sign in ((before, -1), (after, 1)):
            if counted is not None:
                statuses[(counted.graph, counted.status)] += sign
                if counted.decided_day is not None:
                    days[(counted.decided_day, counted.graph)] += sign
                if counted.status == ItemStatus.PENDING:
                    pending[(counted.team_key, counted.graph, counted.band)] += sign
    _add(statuses=statuses, days=days, pending=pending)


def counts_forget(*, items: QuerySet[QueueItem]) -> None:
    """Take ``items`` out of the counts; call in the transaction that deletes them."""
    statuses: Counter[tuple[str, str]] = Counter()
    days: Counter[tuple[date, str]] = Counter()
    pending: Counter[tuple[int, str, str]] = Counter()
    rows = items.filter(is_lab=False).values_list("graph", "status", "decided_at", "team_id", "priority")
    for graph, status, decided_at, team_id, priority in rows:
        statuses[(graph, status)] -= 1
        if decided_at is not None:
            days[(counted_day(decided_at), graph)] -= 1
        if status == ItemStatus.PENDING:
            pending[(team_id or NO_TEAM, graph, priority_band(priority))] -= 1
    _add(statuses=statuses, days=days, pending=pending)


def _add(
    *,
    statuses: Counter[tuple[str, str]],
    days: Counter[tuple[date, str]],
    pending: Counter[tuple[int, str, str]],
) -> None:
    shard = random.randrange(SHARDS)
    # Sorted: two transactions touching the same rows lock them in the same order (no deadlock).
    status_rows = sorted((graph, status, shard, n) for (graph, status), n in statuses.items() if n)
    day_rows = sorted((connection.ops.adapt_datefield_value(day), graph, shard, n) for (day, graph), n in days.items() if n)
    counter_rows_add(QueueCounter, ("graph", "status", "shard"), status_rows)
    counter_rows_add(DecidedDayCounter, ("day", "graph", "shard"), day_rows)
    pending_rows = sorted((team, graph, band, shard, n) for (team, graph, band), n in pending.items() if n)
    counter_rows_add(PendingCounter, ("team_key", "graph", "band", "shard"), pending_rows)


def counter_rows_add(model: type[models.Model], key: tuple[str, ...], rows: list[tuple]) -> None:
    """Add each row's last value (``n``) to the counter row of its key (created on first use): one statement."""
    if not rows:
        return
    qn = connection.ops.quote_name
    table = qn(model._meta.db_table)
    columns = ", ".join(qn(c) for c in (*key, "n"))
    values = ", ".join(["(" + ", ".join(["%s"] * (len(key) + 1)) + ")"] * len(rows))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({columns}) VALUES {values} "
            f"ON CONFLICT ({', '.join(qn(c) for c in key)}) DO UPDATE SET {qn('n')} = {table}.{qn('n')} + excluded.{qn('n')}",
            [v for row in rows for v in row],
        )


@dataclass(frozen=True)
class CountsRead:
    by_status: dict[tuple[str, str], int]  # (graph, status) -> items
    decided_on_day: dict[str, int]  # graph -> items decided on the day asked for

    def status_total(self, status: str) -> int:
        return sum(n for (_, s), n in self.by_status.items() if s == status)


# Marks the decided-on-the-day rows in counts_read's one query (no item status is spelled so).
_DECIDED_ON_DAY = "(decided on the day)"


def counts_read(*, day: date) -> CountsRead:
    """Every (graph, status) count and the items decided on ``day``: one query over a few rows.

    Written out, as the upsert is: every live event and queue page reads it, and building
    the same union of two aggregates through the ORM cost several times what the
    database spends answering it.
    """
    qn = connection.ops.quote_name
    by_status, by_day = qn(QueueCounter._meta.db_table), qn(DecidedDayCounter._meta.db_table)
    graph, status, n = qn("graph"), qn("status"), qn("n")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {graph}, {status}, SUM({n}) FROM {by_status} GROUP BY {graph}, {status} "
            f"UNION ALL SELECT {graph}, %s, SUM({n}) FROM {by_day} WHERE {qn('day')} = %s GROUP BY {graph}",
            [_DECIDED_ON_DAY, connection.ops.adapt_datefield_value(day)],
        )
        rows = cursor.fetchall()
    counts: dict[tuple[str, str], int] = {}
    decided_on_day: dict[str, int] = {}
    for graph_name, kind, total in rows:
        # int(): PostgreSQL sums a bigint column as numeric.
        if kind == _DECIDED_ON_DAY:
            decided_on_day[graph_name] = int(total)
        else:
            counts[(graph_name, kind)] = int(total)
    return CountsRead(by_status=counts, decided_on_day=decided_on_day)


@dataclass(frozen=True)
class CountDrift:
    what: str
    counter: int
    actual: int

    def __str__(self) -> str:
        return f"{self.what}: counter {self.counter}, actual {self.actual}"


def counts_recount() -> list[CountDrift]:
    """Compare every counter with a real COUNT and set those that differ to it; return what differed.

    Safe while reviewers work: on PostgreSQL the counter tables are locked against writes
    first, so a change either committed before the COUNT (it is in both) or adds its
    delta after the repair; SQLite's write transaction holds the whole database.
    """
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                counters = (QueueCounter, DecidedDayCounter, PendingCounter)
                tables = ", ".join(connection.ops.quote_name(m._meta.db_table) for m in counters)
                cursor.execute(f"LOCK TABLE {tables} IN EXCLUSIVE MODE")
        counters = _counters_summed()
        actual = counts_actual()
        drifts = []
        for key in sorted(set(counters) | set(actual), key=str):
            if counters.get(key, 0) != actual.get(key, 0):
                drifts.append(CountDrift(what=_key_words(key), counter=counters.get(key, 0), actual=actual.get(key, 0)))
                _key_set(key, actual.get(key, 0))
    return drifts


def counts_actual() -> dict[tuple, int]:
    """The real COUNTs, keyed like ``_counters_summed``: ("status", graph, status), ("day", day, graph)
    and ("pending", team_key, graph, band)."""
    items = QueueItem.objects.filter(is_lab=False).order_by()
    actual: dict[tuple, int] = {
        ("status", row["graph"], row["status"]): row["total"]
        for row in items.values("graph", "status").annotate(total=Count("id"))
    }
    days = (
        items.filter(decided_at__isnull=False)
        .annotate(day=TruncDate("decided_at", tzinfo=timezone.get_default_timezone()))
        .values("day", "graph")
        .annotate(total=Count("id"))
    )
    actual.update({("day", row["day"], row["graph"]): row["total"] for row in days})
    pending: Counter[tuple] = Counter()
    for row in items.filter(status=ItemStatus.PENDING).values("team_id", "graph", "priority").annotate(total=Count("id")):
        pending[("pending", row["team_id"] or NO_TEAM, row["graph"], priority_band(row["priority"]))] += row["total"]
    actual.update(pending)
    return actual


def _counters_summed() -> dict[tuple, int]:
    summed = {
        ("status", row["graph"], row["status"]): row["total"]
        for row in QueueCounter.objects.values("graph", "status").annotate(total=Sum("n")).order_by()
    }
    days = DecidedDayCounter.objects.values("day", "graph").annotate(total=Sum("n")).order_by()
    summed.update({("day", row["day"], row["graph"]): row["total"] for row in days})
    pending = PendingCounter.objects.values("team_key", "graph", "band").annotate(total=Sum("n")).order_by()
    summed.update({("pending", row["team_key"], row["graph"], row["band"]): row["total"] for row in pending})
    return summed


def _key_words(key: tuple) -> str:
    if key[0] == "status":
        return f"{key[2]} ({key[1]})"
    if key[0] == "pending":
        return f"pending of team {key[1] or 'none'}, {key[3]} priority ({key[2]})"
    return f"decided on {key[1].isoformat()} ({key[2]})"


def _key_set(key: tuple, value: int) -> None:
    if key[0] == "status":
        _, graph, status = key
        QueueCounter.objects.filter(graph=graph, status=status).delete()
        if value:
            QueueCounter.objects.create(graph=graph, status=status, shard=0, n=value)
    elif key[0] == "pending":
        _, team_key, graph, band = key
        PendingCounter.objects.filter(team_key=team_key, graph=graph, band=band).delete()
        if value:
            PendingCounter.objects.create(team_key=team_key, graph=graph, band=band, shard=0, n=value)
    else:
        _, day, graph = key
        DecidedDayCounter.objects.filter(day=day, graph=graph).delete()
        if value:
            DecidedDayCounter.objects.create(day=day, graph=graph, shard=0, n=value)
