"""What happened to decided items: the Decided page, each item's timeline, the CSV export.

Read-only, like ``moderation.records.selectors``. The Decided page pages by keyset on
(decided_at, id), newest first: no COUNT, no OFFSET, so page 400 costs what page 1 does
and items decided while someone pages never shift what they have seen (no duplicates).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from datetime import date, datetime, time, timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Exists, OuterRef, Prefetch, Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from moderation.core.cursors import CursorInvalid, cursor_make, cursor_read
from moderation.core.text import TextInvalid, text_check
from moderation.graphs.asks import PAST, ActionEdit, AskSpec, ask_edits_diff, decisions_describe
from moderation.items.models import DECIDED_STATUSES, QueueItem, Requested, ReviewAsk
from moderation.records.models import AttemptOrigin, AttemptOutcome, DecisionAttempt, OutcomeReport
from moderation.records.selectors import items_visible_q


@dataclass(frozen=True)
class DecidedFilters:
    status: str = ""
    decided_by: str = ""  # a username
    source: str = ""
    graph: str = ""
    reason: str = ""  # a reason code: items with an ask decided for it
    since: date | None = None  # decided on or after this day (local time)
    until: date | None = None  # decided on or before this day

    def as_query(self) -> dict[str, str]:
        """The filters as query parameters (empty ones left out), for links that keep them."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {name: value.isoformat() if isinstance(value, date) else value for name, value in values.items() if value}


def decided_filters_read(*, data: Mapping[str, str]) -> tuple[DecidedFilters, dict[str, str]]:
    """Filters from query parameters, and an error per parameter that could not be read (then ignored)."""
    errors: dict[str, str] = {}
    text = {name: (data.get(name) or "").strip()[:200] for name in ("status", "decided_by", "source", "graph", "reason")}
    for name, value in text.items():
        try:
            text_check(text=value, field=name)
        except TextInvalid as exc:
            errors[name], text[name] = str(exc), ""
    if text["status"] and text["status"] not in DECIDED_STATUSES:
        errors["status"] = f"not a decided status: {text['status']}"
        text["status"] = ""
    days: dict[str, date | None] = {}
    for name in ("since", "until"):
        raw = (data.get(name) or "").strip()
        try:
            days[name] = parse_date(raw) if raw else None
        except ValueError:
            days[name] = None
        if raw and days[name] is None:
            errors[name] = "enter a date as YYYY-MM-DD"
    return DecidedFilters(**text, **days), errors


def decided_items(*, filters: DecidedFilters) -> QuerySet[QueueItem]:
    items = QueueItem.objects.filter(is_lab=False, status__in=DECIDED_STATUSES)
    if filters.status:
        items = items.filter(status=filters.status)
    if filters.decided_by:
        items = items.filter(decided_by__username=filters.decided_by)
    if filters.source:
        items = items.filter(source=filters.source)
    if filters.graph:
        items = items.filter(graph=filters.graph)
    if filters.reason:
        items = items.filter(Exists(ReviewAsk.objects.filter(item=OuterRef("pk"), reason=filters.reason)))
    if filters.since:
        items = items.filter(decided_at__gte=_day_start(filters.since))
    if filters.until:
        items = items.filter(decided_at__lt=_day_start(filters.until + timedelta(days=1)))
    return items


def _day_start(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min), timezone.get_current_timezone())


# --- keyset pages --------------------------------------------------------------------------------


_CURSOR_SALT = "moderation.decided.cursor"


def cursor_encode(item: QueueItem) -> str:
    assert item.decided_at is not None  # a decided item's
    return cursor_make(key=[item.decided_at.isoformat(), item.pk], salt=_CURSOR_SALT)


def cursor_decode(cursor: str) -> tuple[datetime, int]:
    try:
        moment, pk = cursor_read(token=cursor, salt=_CURSOR_SALT)
        decided_at = parse_datetime(moment)
        if decided_at is None or decided_at.tzinfo is None or type(pk) is not int:
            raise ValueError(moment)
        return decided_at, pk
    except (ValueError, TypeError):  # CursorInvalid is a ValueError
        raise CursorInvalid("this page link is not valid; start again from the newest") from None


@dataclass(frozen=True)
class DecidedPage:
    items: list[QueueItem]
    older: str | None  # cursor of the next page (older items), if there is one
    newer: str | None  # cursor of the previous page (newer items), if there is one


def decided_page(
    *,
    filters: DecidedFilters,
    per_page: int,
    after: str | None = None,
    before: str | None = None,
    viewer: AbstractBaseUser | None = None,
) -> DecidedPage:
    """One page of decided items ``viewer`` may see, newest first: after ``after`` (older) or before ``before`` (newer).

    Each item carries ``reasons``: the reason codes its asks were decided with.
    """
    items = decided_items(filters=filters).filter(items_visible_q(viewer=viewer))
    if before:
        decided_at, pk = cursor_decode(before)
        rows = list(
            _with_reasons(
                items.filter(Q(decided_at__gt=decided_at) | Q(decided_at=decided_at, pk__gt=pk)).order_by("decided_at", "id")
            )[: per_page + 1]
        )
        more_newer = len(rows) > per_page
        rows = rows[:per_page][::-1]
        return DecidedPage(
            items=rows,
            older=cursor_encode(rows[-1]) if rows else None,
            newer=cursor_encode(rows[0]) if rows and more_newer else None,
        )
    if after:
        decided_at, pk = cursor_decode(after)
        items = items.filter(Q(decided_at__lt=decided_at) | Q(decided_at=decided_at, pk__lt=pk))
    rows = list(_with_reasons(items.order_by("-decided_at", "-id"))[: per_page + 1])
    more_older = len(rows) > per_page
    rows = rows[:per_page]
    return DecidedPage(
        items=rows,
        older=cursor_encode(rows[-1]) if more_older else None,
        newer=cursor_encode(rows[0]) if after and rows else None,
    )


def _with_reasons(items: QuerySet[QueueItem]) -> QuerySet[QueueItem]:
    reasoned = ReviewAsk.objects.exclude(reason="").only("item_id", "reason", "decided_at").order_by("decided_at", "id")
    return items.select_related("decided_by").prefetch_related(Prefetch("asks", queryset=reasoned, to_attr="reasoned_asks"))


# --- an item's timeline ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TimelineEntry:
    """One thing that happened to an item: created, an attempt (won, lost, refused, or a vote counted),
    an escalation, a decision applied, or its agent's outcome report."""

    kind: str  # created | attempt | escalated | applied | outcome (an agent's report: outcome done/failed, note its message)
    at: datetime
    after_created: float  # seconds
    who: str = ""
    requested: str = ""
    what: str = ""  # the attempt's decisions in words
    outcome: str = ""
    winner: str = ""
    after_winner: float | None = None  # a lost attempt: seconds after the winner's decision
    reason: str = ""
    note: str = ""
    detail: str = ""
    origin: str = ""
    ask: str = ""
    round: int | None = None
    seq: int | None = None
    tally: str = ""  # the winning vote of a quorum ask: the tally it resolved with
    edits: tuple[ActionEdit, ...] = ()  # an attempt's edits: what each changed in the proposed arguments

    @property
    def verb(self) -> str:
        """What was asked for, without the decisions' messages (a reject's message is the reviewer's note)."""
        return {Requested.WITHDRAW: "withdrew the item", Requested.MIXED: "decided"}.get(
            self.requested, PAST.get(self.requested, self.requested)
        )

    @property
    def after_created_words(self) -> str:
        return duration_words(self.after_created)

    @property
    def after_winner_words(self) -> str:
        return duration_words(self.after_winner) if self.after_winner is not None else ""


def item_timeline(*, item: QueueItem) -> list[TimelineEntry]:
    """Everything the log and the asks say about ``item``, oldest first."""
    created = item.created_at
    entries = [TimelineEntry(kind="created", at=created, after_created=0.0)]
    attempts = DecisionAttempt.objects.filter(item=item).select_related("reviewer", "winner", "ask").order_by("seq")
    for attempt in attempts:
        entries.append(_attempt_entry(attempt, created=created))
    if item.escalated_at is not None:
        entries.append(
            TimelineEntry(
                kind="escalated",
                at=item.escalated_at,
                after_created=_seconds(created, item.escalated_at),
                who=item.team.name if item.team_id else "",
            )
        )
    for ask in item.asks.exclude(applied_at=None).order_by("applied_at", "id"):
        entries.append(
            TimelineEntry(
                kind="applied",
                at=ask.applied_at,
                after_created=_seconds(created, ask.applied_at),
                who="worker",
                ask=ask.interrupt_id,
                round=ask.round,
            )
        )
    report = OutcomeReport.objects.filter(item=item).select_related("reported_by").first()
    if report is not None:
        entries.append(
            TimelineEntry(
                kind="outcome",
                at=report.reported_at,
                after_created=_seconds(created, report.reported_at),
                who=report.reported_by.name,
                outcome=report.status,
                note=report.message,
            )
        )
    # Stable: an attempt and its own apply keep their order when recorded in the same instant.
    return sorted(entries, key=lambda e: e.at)


def _attempt_entry(attempt: DecisionAttempt, *, created: datetime) -> TimelineEntry:
    after_winner = None
    if attempt.outcome == AttemptOutcome.LOST and attempt.winner_decided_at is not None:
        after_winner = _seconds(attempt.winner_decided_at, attempt.requested_at)
    return TimelineEntry(
        kind="attempt",
        at=attempt.requested_at,
        after_created=_seconds(created, attempt.requested_at),
        who=attempt.reviewer.get_username(),
        requested=attempt.requested,
        what=attempt_what(attempt),
        outcome=attempt.outcome,
        winner=attempt.winner.get_username() if attempt.winner_id else "",
        after_winner=after_winner,
        reason=attempt.reason,
        note=attempt.note,
        detail=attempt.detail,
        origin=AttemptOrigin(attempt.origin).label if attempt.origin else "",
        ask=attempt.ask.interrupt_id if attempt.ask_id else "",
        round=attempt.ask.round if attempt.ask_id else None,
        seq=attempt.seq,
        tally=attempt.ask.tally.get("summary", "") if attempt.outcome == AttemptOutcome.WON and attempt.ask_id else "",
        edits=tuple(ask_edits_diff(spec=AskSpec.from_payload(attempt.ask.payload), decisions=attempt.decisions))
        if attempt.ask_id and attempt.decisions and attempt.requested != Requested.WITHDRAW
        else (),
    )


def attempt_what(attempt: DecisionAttempt) -> str:
    """The attempt's own decisions in words (whether or not it won)."""
    if attempt.requested == Requested.WITHDRAW:
        return "withdrew the item"
    if attempt.ask_id and attempt.decisions:
        return decisions_describe(spec=AskSpec.from_payload(attempt.ask.payload), decisions=attempt.decisions)
    return PAST.get(attempt.requested, attempt.requested)


def _seconds(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds())


def duration_words(seconds: float) -> str:
    """ "0.4 s", "12 s", "3 min 5 s", "2 h 10 min", "3 d 4 h"."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    for unit, size, smaller, small in (("d", 86400, "h", 3600), ("h", 3600, "min", 60), ("min", 60, "s", 1)):
        if whole >= size:
            rest = (whole % size) // small
            return f"{whole // size} {unit}" + (f" {rest} {smaller}" if rest else "")
    return f"{whole} s"


# --- CSV export ---------------------------------------------------------------------------------

CSV_HEADER = [
    "item",
    "title",
    "source",
    "graph",
    "item_status",
    "item_created_at",
    "item_decided_at",
    "attempt",
    "ask",
    "round",
    "reviewer",
    "requested",
    "what",
    "reason",
    "note",
    "outcome",
    "winner",
    "detail",
    "origin",
    "requested_at",
    "recorded_at",
]


def decided_csv_rows(*, filters: DecidedFilters, viewer: AbstractBaseUser | None) -> Iterator[list[Any]]:
    """The header, then every attempt on the filtered items ``viewer`` may see (newest item first, its attempts in order).

    Streamed from one query in chunks, so an export of the whole history never sits in memory.
    Values as they are: the writer (``moderation.core.csvsafe``) makes them cells.
    """
    yield CSV_HEADER
    attempts = (
        DecisionAttempt.objects.filter(item__in=decided_items(filters=filters).filter(items_visible_q(viewer=viewer)))
        .select_related("item", "reviewer", "winner", "ask")
        .order_by("-item__decided_at", "-item_id", "seq")
    )
    for attempt in attempts.iterator(chunk_size=500):
        item = attempt.item
        yield [
            item.public_id,
            item.title,
            item.source,
            item.graph,
            item.status,
            item.created_at,
            item.decided_at,
            attempt.seq,
            attempt.ask.interrupt_id if attempt.ask_id else "",
            attempt.ask.round if attempt.ask_id else "",
            attempt.reviewer.get_username(),
            attempt.requested,
            attempt_what(attempt),
            attempt.reason,
            attempt.note,
            attempt.outcome,
            attempt.winner.get_username() if attempt.winner_id else "",
            attempt.detail,
            attempt.origin,
            attempt.requested_at,
            attempt.recorded_at,
        ]
