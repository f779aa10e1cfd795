"""/team/: supervisors see every team, a lead their own; the page's numbers, its CSV and its CSP."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from moderation.policies.models import Team
from moderation.review.decisions import item_decide
from moderation.review.items import item_create


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def decided(payments, alice, bob):
    other = Team.objects.create(slug="shop", name="Shop")
    item = item_create(title="Refund", body="Order.", source="shop", team="payments")
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve").won
    assert not item_decide(item_public_id=item.public_id, reviewer=bob, decision="reject").won
    return other


@pytest.mark.django_db
def test_a_supervisor_sees_a_teams_numbers_charts_and_the_same_numbers_in_csv(decided, payments, carol):
    carol.user_permissions.add(Permission.objects.get(codename="supervise_teams"))
    client = _client(carol)
    page = client.get("/team/", {"team": "payments", "days": "7"})
    assert page.status_code == 200
    html = page.content.decode()
    assert re.search(r'id="t-decided">1<', html)
    assert html.count('class="chart-svg"') == 4  # time to decision, decisions, races/misses/escalations, per moderator
    assert "<title>" in html and 'class="bar-a"' in html
    # The CSP holds: no inline script or style anywhere on the page.
    assert not re.search(r"<script(?![^>]*\bsrc=)", html) and " style=" not in html and "<style" not in html
    assert "Content-Security-Policy" in page.headers
    export = client.get("/team/export.csv", {"team": "payments", "days": "7"})
    rows = list(csv.reader(io.StringIO(export.content.decode())))
    assert rows[0][:2] == ["day", "decisions"] and len([r for r in rows[1:8]]) == 7
    assert sum(int(r[1]) for r in rows[1:8]) == 1
    assert ["alice", "1", "0"] in rows
    assert client.get("/team/export.csv", {"team": "payments", "days": "5"}).status_code == 400
    assert b"days must be one of 7, 30, 90" in client.get("/team/export.csv", {"days": "5"}).content


@pytest.mark.django_db
def test_a_lead_sees_their_own_team_only_and_a_moderator_nothing(decided, payments, alice, make_moderator):
    alice.user_permissions.add(Permission.objects.get(codename="lead_team"))
    client = _client(alice)
    page = client.get("/team/", {"team": "shop"}).content.decode()
    assert "No team “shop” you may see; showing Payments." in page
    assert 'value="shop"' not in page and 'value="-"' not in page
    assert client.get("/team/export.csv", {"team": "shop"}).status_code == 400
    assert 'id="team-link"' in client.get("/").content.decode()
    zoe = _client(make_moderator("zoe"))
    assert zoe.get("/team/").status_code == 403
    assert 'id="team-link"' not in zoe.get("/").content.decode()  # no link to a page she may not open


@pytest.mark.django_db
def test_the_team_export_defuses_names_a_spreadsheet_would_run_as_formulas(payments, carol, make_moderator):
    """CSV injection: a moderator's name is text people chose, written like the decided export's cells."""
    from moderation.policies.teams import team_member_add

    carol.user_permissions.add(Permission.objects.get(codename="supervise_teams"))
    names = ["=cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "+1"]
    for name in names:
        moderator = make_moderator(name)
        team_member_add(team=payments, user=moderator)
        item = item_create(title=f"Refund by {name}", body="Order.", source="shop", team="payments")
        assert item_decide(item_public_id=item.public_id, reviewer=moderator, decision="approve").won
    rows = list(csv.reader(io.StringIO(_client(carol).get("/team/export.csv", {"team": "payments"}).content.decode())))
    assert {r[0] for r in rows if r[1:] == ["1", "0"]} == {"'" + name for name in names}
    assert rows[1][1].isdigit()  # numbers stay numbers


@pytest.mark.django_db
def test_the_charts_have_a_key_every_moderator_and_a_week_by_default(payments, alice, carol, monkeypatch):
    """Issue 40.9: no legend (colour only), and a moderator who only lost races left out of "Decisions per moderator"."""
    from moderation.tests.records.test_teamstats import race_lose

    item = item_create(title="Refund", body="Order.", source="shop", team="payments")
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve").won
    race_lose(item=item, user=carol, monkeypatch=monkeypatch)
    carol.user_permissions.add(Permission.objects.get(codename="supervise_teams"))
    client = _client(carol)
    page = client.get("/team/", {"team": "payments"})
    assert page.context["filters"].days == 7 and len(page.context["stats"].days) == 7
    figures = re.findall(r'<figure class="chart">(.*?)</figure>', page.content.decode(), re.S)
    keys = [re.findall(r'<rect width="12" height="12" class="(bar-\w)"/></svg>([^<]+)</li>', f) for f in figures]
    assert keys == [
        [("bar-a", "p50"), ("bar-b", "p90")],
        [("bar-a", "decisions")],
        [("bar-a", "lost races"), ("bar-b", "deadline misses"), ("bar-c", "escalations")],
        [("bar-a", "decisions"), ("bar-b", "lost races")],
    ]
    per_moderator = figures[-1]
    assert re.findall(r'class="chart-label">(\w+)</text>', per_moderator) == ["alice", "carol"]
    assert "<title>carol: lost races 1</title>" in per_moderator
    rows = list(csv.reader(io.StringIO(client.get("/team/export.csv", {"team": "payments"}).content.decode())))
    assert ["carol", "0", "1"] in rows
