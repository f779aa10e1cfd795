"""The team page (/team/) and its CSV: numbers from moderation.records.teamstats, charts from moderation.web.charts."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from moderation.core.csvsafe import CsvSafeWriter
from moderation.records.teamstats import (
    PERIODS,
    TEAM_NONE,
    team_csv_rows,
    team_filters_read,
    team_stats_read,
    teams_visible,
)
from moderation.web.charts import bar_chart, duration_words


def _read(request: HttpRequest):
    teams, no_team = teams_visible(user=request.user)
    if not teams and not no_team:
        raise PermissionDenied("the team page is for supervisors and team leads")
    filters, errors = team_filters_read(data=request.GET, teams=teams, no_team=no_team)
    stats = team_stats_read(team=filters.team, days=filters.days, today=timezone.localdate())
    return teams, no_team, filters, errors, stats


@login_required
@require_GET
def team(request: HttpRequest) -> HttpResponse:
    teams, no_team, filters, errors, stats = _read(request)
    days = [row.day.strftime("%d %b") for row in stats.days]
    charts = [
        bar_chart(
            title="Time to decision (p50, p90)",
            labels=days,
            unit=duration_words,
            series=[("p50", "bar-a", [r.p50 for r in stats.days]), ("p90", "bar-b", [r.p90 for r in stats.days])],
        ),
        bar_chart(
            title="Decisions",
            labels=days,
            unit=lambda v: f"{v:.0f}",
            series=[("decisions", "bar-a", [r.decided for r in stats.days])],
        ),
        bar_chart(
            title="Lost races, deadline misses and escalations",
            labels=days,
            unit=lambda v: f"{v:.0f}",
            series=[
                ("lost races", "bar-a", [r.lost_races for r in stats.days]),
                ("deadline misses", "bar-b", [r.deadline_misses for r in stats.days]),
                ("escalations", "bar-c", [r.escalations for r in stats.days]),
            ],
        ),
    ]
    if stats.moderators:
        charts.append(
            bar_chart(
                title="Decisions per moderator",
                labels=[m.name for m in stats.moderators],
                unit=lambda v: f"{v:.0f}",
                every_label=True,
                series=[
                    ("decisions", "bar-a", [m.decided for m in stats.moderators]),
                    ("lost races", "bar-b", [m.lost_races for m in stats.moderators]),
                ],
            )
        )
    return render(
        request,
        "moderation/team.html",
        {
            "stats": stats,
            "totals": stats.totals,
            "charts": charts,
            "teams": teams,
            "no_team": no_team,
            "team_none": TEAM_NONE,
            "filters": filters,
            "errors": errors,
            "periods": PERIODS,
            "oldest": duration_words(stats.oldest_pending_seconds),
            "p50": duration_words(stats.totals.p50),
            "p90": duration_words(stats.totals.p90),
            "export_url": "export.csv?" + urlencode(filters.as_query()),
        },
    )


@login_required
@require_GET
def team_export(request: HttpRequest) -> HttpResponse:
    _, _, filters, errors, stats = _read(request)
    if errors:  # a file of other numbers than asked for would be worse than none
        return HttpResponse("\n".join(errors.values()) + "\n", status=400, content_type="text/plain; charset=utf-8")
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    name = filters.team.slug if filters.team else "no-team"
    response["Content-Disposition"] = f'attachment; filename="team-{name}-{stats.since}-{stats.until}.csv"'
    CsvSafeWriter(response).writerows(team_csv_rows(stats=stats))
    return response
