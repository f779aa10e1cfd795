"""The team page's numbers (/team/): pre-aggregated per team and day, so a page costs the same at 1M decided items.

Each judged attempt adds to ``TeamDayCounter`` in the guard's transaction (as the queue
counters do, ``moderation.records.counts``, sharded the same way): the winner's decision,
its time to decision as a histogram bucket, a lost race, a deadline's default decision (a
miss); an escalation adds in its own transaction. A page reads one team's rows of the
period through the table's key (team first): days x (moderators' decisions and lost races
+ buckets + 2) rows, not the items. p50/p90 are estimated from the buckets, interpolating within one, as
Prometheus' ``histogram_quantile`` does.

Agreement (quorum teams only) is Fleiss' kappa over the asks of the period on which at
least two of the team voted, from their final votes (``Vote``, through
``vote_team_cast_idx``), capped at the ``KAPPA_MAX_ASKS`` latest: the page says how many
items it rests on.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Sum
from django.utils import timezone

from moderation.core.permissions import LEAD_PERMISSION
from moderation.items.models import ItemStatus, QueueItem
from moderation.policies.models import Team, Vote
from moderation.policies.teams import team_policy, user_is_supervisor
from moderation.records.counts import NO_TEAM, SHARDS, counted_day, counter_rows_add
from moderation.records.models import AttemptOrigin, AttemptOutcome, DecisionAttempt, PendingCounter, TeamDayCounter

# Time-to-decision buckets (upper bounds, seconds); the last one catches everything longer.
WAIT_BUCKETS = (10, 30, 60, 120, 300, 600, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 86400, 2 * 86400, 7 * 86400, 30 * 86400)
KAPPA_MAX_ASKS = 5000
PERIODS = (7, 30, 90)
# A week: every day gets its own labelled bars; a month and a quarter are one choice away.
DEFAULT_PERIOD = 7


def wait_bucket(seconds: float) -> int:
    return next((bound for bound in WAIT_BUCKETS if seconds <= bound), WAIT_BUCKETS[-1])


def teamstats_attempt_record(*, attempt: DecisionAttempt, item: QueueItem) -> None:
    """Tally a judged attempt; call in its transaction (the guard's, holding the item's row lock)."""
    if item.is_lab:
        return
    day = counted_day(attempt.recorded_at)
    rows: Counter[tuple[str, str]] = Counter()
    if attempt.outcome == AttemptOutcome.WON:
        rows[("decided", str(attempt.reviewer_id))] += 1
        waited = (attempt.winner_decided_at - item.created_at).total_seconds() if attempt.winner_decided_at else 0
        rows[("wait", str(wait_bucket(waited)))] += 1
        if attempt.origin == AttemptOrigin.DEADLINE:
            rows[("deadline_miss", "")] += 1
    elif (
        attempt.outcome == AttemptOutcome.LOST and attempt.winner_decided_at and attempt.requested_at <= attempt.winner_decided_at
    ):
        # Per loser: a moderator who only lost races still did the work, and shows on the page.
        rows[("lost_race", str(attempt.reviewer_id))] += 1
    _add(team_key=item.team_id or NO_TEAM, day=day, rows=rows)


def teamstats_escalation_record(*, team_id: int | None, at: datetime) -> None:
    """Tally an escalation against the team the item left; call in the escalation's transaction."""
    _add(team_key=team_id or NO_TEAM, day=counted_day(at), rows=Counter({("escalation", ""): 1}))


def _add(*, team_key: int, day: date, rows: Counter[tuple[str, str]]) -> None:
    shard = random.randrange(SHARDS)
    values = sorted(
        (team_key, connection.ops.adapt_datefield_value(day), kind, key, shard, n) for (kind, key), n in rows.items() if n
    )
    counter_rows_add(TeamDayCounter, ("team_key", "day", "kind", "key", "shard"), values)


@dataclass
class DayRow:
    day: date
    decided: int = 0
    p50: float | None = None
    p90: float | None = None
    lost_races: int = 0
    deadline_misses: int = 0
    escalations: int = 0
    waits: Counter = field(default_factory=Counter)


@dataclass(frozen=True)
class ModeratorRow:
    name: str
    decided: int
    lost_races: int


@dataclass(frozen=True)
class Agreement:
    kappa: float | None  # None: fewer than two items with two votes
    items: int


@dataclass(frozen=True)
class TeamStats:
    team: Team | None  # None: items of no team
    since: date
    until: date
    days: list[DayRow]
    moderators: list[ModeratorRow]  # everyone who decided or lost a race, most decisions first
    agreement: Agreement | None  # None: not a quorum team
    pending: int
    oldest_pending_seconds: float | None

    @property
    def totals(self) -> DayRow:
        total = DayRow(day=self.until)
        for row in self.days:
            total.decided += row.decided
            total.lost_races += row.lost_races
            total.deadline_misses += row.deadline_misses
            total.escalations += row.escalations
            total.waits.update(row.waits)
        total.p50, total.p90 = wait_quantile(total.waits, 0.5), wait_quantile(total.waits, 0.9)
        return total


def wait_quantile(waits: Counter, q: float) -> float | None:
    """The ``q`` quantile of the bucketed waits, interpolated linearly within its bucket (None: no decisions)."""
    total = sum(waits.values())
    if not total:
        return None
    rank, seen, lower = q * total, 0, 0
    for bound in WAIT_BUCKETS:
        n = waits.get(bound, 0)
        if n and seen + n >= rank:
            return lower + (bound - lower) * (rank - seen) / n
        seen += n
        lower = bound
    return float(WAIT_BUCKETS[-1])


def team_stats_read(*, team: Team | None, days: int, today: date) -> TeamStats:
    """The team page's numbers for the ``days`` days up to ``today``: a range read of the team's counter rows."""
    since = today - timedelta(days=days - 1)
    team_key = team.pk if team else NO_TEAM
    rows = (
        TeamDayCounter.objects.filter(team_key=team_key, day__gte=since, day__lte=today)
        .values("day", "kind", "key")
        .annotate(n=Sum("n"))
        .order_by()
    )
    by_day = {since + timedelta(days=i): DayRow(day=since + timedelta(days=i)) for i in range(days)}
    per_moderator: Counter[int] = Counter()
    lost_by: Counter[int] = Counter()
    for row in rows:
        day, kind, n = by_day[row["day"]], row["kind"], int(row["n"])
        if kind == "decided":
            day.decided += n
            per_moderator[int(row["key"])] += n
        elif kind == "wait":
            day.waits[int(row["key"])] += n
        elif kind == "lost_race":
            day.lost_races += n
            if row["key"]:  # rows from before losers were named carry none
                lost_by[int(row["key"])] += n
        elif kind == "deadline_miss":
            day.deadline_misses += n
        elif kind == "escalation":
            day.escalations += n
    for day in by_day.values():
        day.p50, day.p90 = wait_quantile(day.waits, 0.5), wait_quantile(day.waits, 0.9)
    people = {pk for pk, n in (per_moderator + lost_by).items() if n}
    names = dict(get_user_model().objects.filter(pk__in=people).values_list("pk", "username"))
    moderators = sorted(
        (ModeratorRow(name=names.get(pk, f"#{pk}"), decided=per_moderator[pk], lost_races=lost_by[pk]) for pk in people),
        key=lambda m: (-m.decided, -m.lost_races, m.name),
    )
    quorum = team is not None and team_policy(team=team).is_quorum
    pending, oldest = _backlog(team_id=team.pk if team else None)
    return TeamStats(
        team=team,
        since=since,
        until=today,
        days=list(by_day.values()),
        moderators=moderators,
        agreement=team_agreement(team=team, since=since, until=today) if quorum else None,
        pending=pending,
        oldest_pending_seconds=oldest,
    )


def _backlog(*, team_id: int | None) -> tuple[int, float | None]:
    pending = PendingCounter.objects.filter(team_key=team_id or NO_TEAM).aggregate(n=Sum("n"))["n"] or 0
    oldest = (
        QueueItem.objects.filter(status=ItemStatus.PENDING, is_lab=False, team_id=team_id)
        .order_by("created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    return int(pending), (timezone.now() - oldest).total_seconds() if oldest else None


def team_agreement(*, team: Team, since: date, until: date) -> Agreement:
    """Fleiss' kappa (approve/reject) over the asks of the period with at least two votes by the team."""
    votes = (
        Vote.objects.filter(team=team, cast_at__gte=_day_start(since), cast_at__lt=_day_start(until + timedelta(days=1)))
        .order_by("-cast_at")
        .values_list("ask_id", "vote")[: KAPPA_MAX_ASKS * 10]
    )
    per_ask: dict[int, Counter] = defaultdict(Counter)
    for ask_id, vote in votes:
        if len(per_ask) >= KAPPA_MAX_ASKS and ask_id not in per_ask:
            continue
        per_ask[ask_id][vote] += 1
    rated = [c for c in per_ask.values() if sum(c.values()) >= 2]
    return Agreement(kappa=fleiss_kappa(rated), items=len(rated))


def _day_start(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=timezone.get_default_timezone())


def fleiss_kappa(items: list[Counter]) -> float | None:
    """Fleiss' kappa of items rated by two or more raters each (the number may vary per item); None below two items.

    1: the raters always agree; 0: no more than chance; below 0: less than chance. When every
    vote of every item is the same, chance agreement is 1 too and the kappa is taken as 1.
    """
    if len(items) < 2:
        return None
    agreement = sum(
        (sum(n * n for n in c.values()) - sum(c.values())) / (sum(c.values()) * (sum(c.values()) - 1)) for c in items
    ) / len(items)
    totals: Counter = Counter()
    for c in items:
        totals.update(c)
    all_votes = sum(totals.values())
    chance = sum((n / all_votes) ** 2 for n in totals.values())
    if chance == 1:
        return 1.0
    return (agreement - chance) / (1 - chance)


TEAM_NONE = "-"  # the team filter's value for items of no team (supervisors only)


def teams_visible(*, user) -> tuple[list[Team], bool]:
    """The teams whose page ``user`` may see, and whether they may see the items of no team too:
    supervisors every team; a lead (``moderation.lead_team``) the teams they are a member of now."""
    if user_is_supervisor(user=user):
        return list(Team.objects.order_by("name")), True
    if user.is_active and user.has_perm(LEAD_PERMISSION):
        return list(Team.objects.filter(memberships__user=user, memberships__removed_at__isnull=True).order_by("name")), False
    return [], False


@dataclass(frozen=True)
class TeamFilters:
    team: Team | None
    days: int

    def as_query(self) -> dict[str, str]:
        return {"team": self.team.slug if self.team else TEAM_NONE, "days": str(self.days)}


def team_filters_read(*, data, teams: list[Team], no_team: bool) -> tuple[TeamFilters, dict[str, str]]:
    """The page's filters from a query string; each bad one is named in the errors and replaced by its default."""
    errors: dict[str, str] = {}
    by_slug = {t.slug: t for t in teams}
    default = teams[0] if teams else None
    slug = data.get("team", "")
    if slug == TEAM_NONE and no_team:
        team = None
    elif slug in by_slug:
        team = by_slug[slug]
    else:
        team = default
        if slug:
            errors["team"] = f"No team “{slug}” you may see; showing {default.name if default else 'items of no team'}."
    raw_days = data.get("days", "")
    days = DEFAULT_PERIOD
    if raw_days:
        if raw_days.isdigit() and int(raw_days) in PERIODS:
            days = int(raw_days)
        else:
            errors["days"] = f"days must be one of {', '.join(map(str, PERIODS))}; showing {DEFAULT_PERIOD}."
    return TeamFilters(team=team, days=days), errors


def team_csv_rows(*, stats: TeamStats):
    """The CSV of the page's numbers: one row per day, then one per moderator, then the backlog and agreement.

    Values as they are (numbers as numbers): the writer (``moderation.core.csvsafe``) makes them cells."""
    yield ["day", "decisions", "p50_seconds", "p90_seconds", "lost_races", "deadline_misses", "escalations"]
    for row in stats.days:
        yield [
            row.day.isoformat(),
            row.decided,
            _num(row.p50),
            _num(row.p90),
            row.lost_races,
            row.deadline_misses,
            row.escalations,
        ]
    yield []
    yield ["moderator", "decisions", "lost_races"]
    yield from ([m.name, m.decided, m.lost_races] for m in stats.moderators)
    yield []
    yield ["pending", stats.pending]
    yield ["oldest_pending_seconds", _num(stats.oldest_pending_seconds)]
    if stats.agreement is not None:
        yield ["fleiss_kappa", _num(stats.agreement.kappa, digits=3), "items", stats.agreement.items]


def _num(value: float | None, *, digits: int = 0) -> float | int | None:
    return None if value is None else round(value, digits) if digits else round(value)
