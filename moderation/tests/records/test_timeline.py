"""The Decided page (filters, keyset pages), an item's timeline, and the staff's CSV export."""

import csv
import io
import re
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from moderation.items.models import AskStatus, ItemStatus, QueueItem, ReviewAsk
from moderation.records.models import AttemptOrigin, ReasonCode
from moderation.records.timeline import DecidedFilters, decided_filters_read, decided_page, duration_words
from moderation.review.decisions import item_decide
from moderation.review.items import item_create

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)


def _decided(*, by, status=ItemStatus.APPROVED, at=None, source="test", graph="moderation", title="", reason="", lab=False):
    """A decided row as the guard leaves it, without running a graph (the page reads only rows)."""
    item = QueueItem.objects.create(
        title=title or f"item {uuid.uuid4().hex[:6]}",
        body="b",
        source=source,
        graph=graph,
        thread_id=uuid.uuid4().hex,
        status=status,
        decided_by=by,
        decided_at=at or NOW,
        is_lab=lab,
    )
    if reason:
        ReviewAsk.objects.create(
            item=item,
            interrupt_id="i1",
            payload={},
            status=AskStatus.DECIDED,
            decided_by=by,
            decided_at=item.decided_at,
            reason=reason,
        )
    return item


def _page_titles(response) -> list[str]:
    return re.findall(r'<tr id="decided-[^"]+" data-item="[^"]+">\s*<td><a href="[^"]+">([^<]+)</a>', response.content.decode())


def test_filters_narrow_by_status_decider_source_graph_reason_and_days(alice, bob):
    _decided(by=alice, title="a-approved", at=NOW - timedelta(days=3))
    _decided(by=bob, status=ItemStatus.REJECTED, title="b-rejected-spam", reason="spam", at=NOW - timedelta(days=1))
    _decided(by=alice, source="forum", graph="refund_agent", title="a-forum", at=NOW)
    _decided(by=alice, title="lab", lab=True)
    QueueItem.objects.create(title="pending", body="b", source="test", thread_id=uuid.uuid4().hex)

    def titles(**kwargs):
        return sorted(i.title for i in decided_page(filters=DecidedFilters(**kwargs), per_page=50).items)

    assert titles() == ["a-approved", "a-forum", "b-rejected-spam"]
    assert titles(status="rejected") == ["b-rejected-spam"]
    assert titles(decided_by="alice") == ["a-approved", "a-forum"]
    assert titles(source="forum") == titles(graph="refund_agent") == ["a-forum"]
    assert titles(reason="spam") == ["b-rejected-spam"]
    today = timezone.localdate(NOW)
    assert titles(since=today - timedelta(days=1)) == ["a-forum", "b-rejected-spam"]
    assert titles(until=today - timedelta(days=1)) == ["a-approved", "b-rejected-spam"]


def test_unreadable_filters_are_named_and_ignored():
    filters, errors = decided_filters_read(data={"status": "pending", "since": "yesterday", "until": "2026-02-30", "source": "x"})
    assert filters == DecidedFilters(source="x")
    assert set(errors) == {"status", "since", "until"}


@pytest.mark.postgres_variant
def test_a_nul_in_a_text_filter_is_named_and_ignored_on_both_backends(alice):
    """PostgreSQL failed the filter's query with a 500."""
    alice.is_staff = True  # the export is staff's
    alice.save()
    http = Client()
    http.force_login(alice)
    for name in ("decided_by", "source", "graph", "reason"):
        for url in ("/decided/", "/decided/export.csv"):
            assert http.get(url, {name: "a\x00"}).status_code == 200, (name, url)
        filters, errors = decided_filters_read(data={name: "a\x00", "status": "approved"})
        assert filters == DecidedFilters(status="approved") and "NUL" in errors[name]


def test_keyset_pages_walk_every_item_once_in_constant_queries_without_count_or_offset(alice, bob, settings):
    settings.DECIDED_PAGE_SIZE = 3
    # Two pairs decided in the same instant: the id breaks the tie, so no page boundary loses one.
    moments = [NOW - timedelta(seconds=s) for s in (0, 5, 5, 9, 12, 12, 20, 30)]
    items = [
        _decided(by=alice if n % 2 else bob, at=at, title=f"t{n}", reason="spam" if n == 3 else "")
        for n, at in enumerate(moments)
    ]
    expected = [i.title for i in sorted(items, key=lambda i: (i.decided_at, i.pk), reverse=True)]
    http = Client()
    http.force_login(alice)
    seen, counts, url = [], [], "/decided/"
    while url:
        with CaptureQueriesContext(connection) as queries:
            response = http.get(url)
        assert response.status_code == 200
        sql = " ".join(q["sql"].upper() for q in queries.captured_queries)
        assert "COUNT(" not in sql and "OFFSET" not in sql
        counts.append(len(queries.captured_queries))
        seen += _page_titles(response)
        if len(seen) == 3:
            # Decided meanwhile: newer than every page still to come, so it never shifts them.
            _decided(by=alice, at=timezone.now() + timedelta(seconds=1), title="late")
        match = re.search(r'<a href="(\?[^"]+)" rel="next">', response.content.decode())
        url = "/decided/" + match.group(1).replace("&amp;", "&") if match else ""
    assert seen == expected
    assert len(set(counts)) == 1, counts
    # And back: the last page's "Newer" link gives the page before it.
    newer = re.search(r'<a href="(\?[^"]+)" rel="prev">', response.content.decode()).group(1).replace("&amp;", "&")
    assert _page_titles(http.get("/decided/" + newer)) == expected[3:6]


def test_pages_keep_the_filters_and_a_forged_cursor_starts_again(alice, settings):
    settings.DECIDED_PAGE_SIZE = 1
    for n in range(3):
        _decided(by=alice, source="forum", title=f"f{n}", at=NOW - timedelta(seconds=n))
    _decided(by=alice, source="other", title="o")
    http = Client()
    http.force_login(alice)
    page = http.get("/decided/", {"source": "forum"}).content.decode()
    older = re.search(r'<a href="(\?[^"]+)" rel="next">', page).group(1).replace("&amp;", "&")
    assert "source=forum" in older
    assert _page_titles(http.get("/decided/" + older)) == ["f1"]
    response = http.get("/decided/", {"after": "not-a-cursor"})
    assert response.status_code == 200 and "start again from the newest" in response.content.decode()
    assert _page_titles(response) == ["o"]


def test_the_queue_links_to_the_decided_page(alice):
    http = Client()
    http.force_login(alice)
    assert 'href="/decided/"' in http.get("/").content.decode()


def _raced_item(make_item, alice, bob):
    ReasonCode.objects.get_or_create(code="spam", defaults={"label": "Spam or advertising"})
    ReasonCode.objects.update_or_create(code="abuse", defaults={"label": "Abusive", "active": True})
    item = make_item(title="Cheap watches")
    item_decide(
        item_public_id=item.public_id,
        reviewer=alice,
        decision="reject",
        reason="spam",
        note="alice's words",
        origin=AttemptOrigin.DASHBOARD,
    )
    item_decide(
        item_public_id=item.public_id,
        reviewer=bob,
        decision="reject",
        reason="abuse",
        note="bob's words",
        origin=AttemptOrigin.API,
    )
    return item


def test_the_timeline_shows_won_and_lost_attempts_with_notes_reasons_origin_and_timing(alice, bob, make_item):
    item = _raced_item(make_item, alice, bob)
    http = Client()
    http.force_login(bob)
    assert f'href="/items/{item.public_id}/history"' in http.get(f"/items/{item.public_id}/").content.decode()
    page = http.get(f"/items/{item.public_id}/history").content.decode()
    won = page[page.index('id="attempt-1"') : page.index('id="attempt-2"')]
    lost = page[page.index('id="attempt-2"') :]
    assert "<strong>alice</strong>: rejected publish" in won and "won" in won and "from the Dashboard" in won
    assert "Spam or advertising" in won and "alice&#x27;s words" in won and "after it was created" in won
    assert "lost</span> to <strong>alice</strong>" in lost and "after the winning decision" in lost
    assert "Abusive" in lost and "bob&#x27;s words" in lost and "from the API" in lost
    assert page.index("<strong>Created</strong>") < page.index('id="attempt-1"')


def test_a_view_only_account_sees_who_decided_but_not_their_notes(alice, bob, make_item, make_viewer):
    item = _raced_item(make_item, alice, bob)
    http = Client()
    http.force_login(make_viewer())
    page = http.get(f"/items/{item.public_id}/history").content.decode()
    assert "<strong>alice</strong>" in page and "Spam or advertising" in page
    assert "alice&#x27;s words" not in page and "bob&#x27;s words" not in page


def _csv(response) -> list[dict[str, str]]:
    body = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(body)))


def test_staff_export_the_filtered_history_as_csv_one_row_per_attempt(alice, bob, make_item, make_moderator):
    raced = _raced_item(make_item, alice, bob)
    approved = make_item(title='=HYPERLINK("http://evil")')
    item_decide(item_public_id=approved.public_id, reviewer=bob, decision="approve")
    staff = make_moderator("carol")
    staff.is_staff = True
    staff.save()
    http = Client()
    http.force_login(staff)
    response = http.get("/decided/export.csv", {"status": "rejected"})
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("text/csv") and "attachment" in response["Content-Disposition"]
    rows = _csv(response)
    assert [(r["item"], r["reviewer"], r["outcome"], r["reason"], r["note"], r["origin"]) for r in rows] == [
        (str(raced.public_id), "alice", "won", "spam", "alice's words", "dashboard"),
        (str(raced.public_id), "bob", "lost", "abuse", "bob's words", "api"),
    ]
    assert rows[1]["winner"] == "alice" and rows[0]["item_status"] == "rejected"
    everything = _csv(http.get("/decided/export.csv"))
    assert len(everything) == 3
    # A cell a spreadsheet would run as a formula is defused.
    assert [r["title"] for r in everything if r["item"] == str(approved.public_id)] == ['\'=HYPERLINK("http://evil")']


def test_staff_export_only_what_their_teams_may_see_unless_they_supervise(payments, alice, bob, make_item, make_moderator):
    secret = item_create(title="Refund for the CEO", body="Order 7.", source="shop", team="payments")
    item_decide(item_public_id=secret.public_id, reviewer=alice, decision="reject", note="alice's words")
    public = make_item(title="A post")
    item_decide(item_public_id=public.public_id, reviewer=bob, decision="approve")
    staff = make_moderator("dave")
    staff.is_staff = True
    staff.save()
    http = Client()
    http.force_login(staff)
    assert [r["title"] for r in _csv(http.get("/decided/export.csv"))] == ["A post"]
    staff.user_permissions.add(Permission.objects.get(codename="supervise_teams"))
    http.force_login(staff)
    assert {r["title"] for r in _csv(http.get("/decided/export.csv"))} == {"A post", "Refund for the CEO"}


def test_only_staff_may_export(alice, client):
    assert client.get("/decided/export.csv").status_code == 302  # to the login page
    client.force_login(alice)
    assert client.get("/decided/export.csv").status_code == 403
    assert "decided-export" not in client.get("/decided/").content.decode()


@pytest.mark.parametrize(
    "seconds, words", [(0.42, "0.4 s"), (12, "12 s"), (185, "3 min 5 s"), (7800, "2 h 10 min"), (90000, "1 d 1 h")]
)
def test_duration_words(seconds, words):
    assert duration_words(seconds) == words
