"""The queue page: its priority order, filters, search and cursor pages (moderation.records.selectors)."""

import uuid
from datetime import timedelta
from urllib.parse import parse_qs

import pytest
from django.core import signing
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from django.utils.text import Truncator

from moderation.core.cursors import CursorInvalid
from moderation.items.models import ItemStatus, QueueItem, queue_rank
from moderation.records.selectors import (
    QUEUE_ORDERS,
    QueueFilters,
    _queue_filtered,
    items_recently_decided,
    queue_cursor_read,
    queue_pending,
)

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_variant]

T0 = timezone.now().replace(microsecond=0) - timedelta(days=2)


def _row(*, title="A post", body="Some text.", source="test", priority=0, risk=0, flags=(), graph="moderation", created=None):
    """A bare pending row (no graph thread): the queue page reads only rows and their open asks."""
    item = QueueItem.objects.create(
        title=title,
        body=body,
        source=source,
        priority=priority,
        risk=risk,
        flags=list(flags),
        graph=graph,
        thread_id=f"t-{uuid.uuid4()}",
    )
    if created is not None:
        item.created_at = created
        item.save()
    return item


def _titles(page):
    return [item.title for item in page.object_list]


def _first_page(**filters):
    return queue_pending(filters=QueueFilters(**filters), cursor=None, per_page=50)


def _decide(item, user):
    QueueItem.objects.filter(pk=item.pk).update(status=ItemStatus.APPROVED, decided_by=user, decided_at=timezone.now())


# --- The order --------------------------------------------------------------------------


def test_rank_is_arrival_moved_earlier_by_priority_and_risk():
    assert queue_rank(priority=0, risk=0, created_at=T0) - queue_rank(priority=0, risk=100, created_at=T0) == 5 * 3600 * 10**6
    assert queue_rank(priority=0, risk=0, created_at=T0) - queue_rank(priority=1, risk=0, created_at=T0) == 6 * 3600 * 10**6


def test_risk_100_outranks_risk_0_submitted_at_the_same_time():
    _row(title="harmless", risk=0, created=T0)
    _row(title="spam", risk=100, created=T0)
    assert _titles(_first_page()) == ["spam", "harmless"]


def test_priority_beats_the_whole_risk_scale():
    _row(title="risky", risk=100, created=T0)
    _row(title="asked first", priority=1, risk=0, created=T0 + timedelta(minutes=1))
    _row(title="held back", priority=-1, risk=100, created=T0 - timedelta(hours=1))
    assert _titles(_first_page()) == ["asked first", "risky", "held back"]


def test_waiting_overtakes_risk_once_it_exceeds_the_head_start():
    # Risk 100 is a 5 h head start: 6 h of waiting beats it, 4 h does not.
    _row(title="waited 6 h", risk=0, created=T0 - timedelta(hours=6))
    _row(title="waited 4 h", risk=0, created=T0 - timedelta(hours=4))
    _row(title="risky, new", risk=100, created=T0)
    assert _titles(_first_page()) == ["waited 6 h", "risky, new", "waited 4 h"]


def test_equal_ranks_serve_the_older_item_first():
    first = _row(title="first", created=T0)
    second = _row(title="second", created=T0)
    assert first.rank == second.rank and _titles(_first_page()) == ["first", "second"]


def test_rank_follows_a_later_change_of_priority():
    item = _row(title="bumped", created=T0)
    _row(title="other", risk=50, created=T0)
    item.priority = 2
    item.save()
    assert _titles(_first_page()) == ["bumped", "other"]


def test_bulk_created_rows_get_their_rank():
    [item] = QueueItem.objects.bulk_create([QueueItem(title="bulk", body="b", source="s", risk=40, thread_id="t-bulk")])
    item.refresh_from_db()
    assert item.rank == queue_rank(priority=0, risk=40, created_at=item.created_at)


def test_oldest_and_newest_first_ignore_priority_and_risk():
    _row(title="old", created=T0 - timedelta(hours=1))
    _row(title="new, urgent", priority=10, risk=100, created=T0)
    assert _titles(_first_page(order="oldest")) == ["old", "new, urgent"]
    assert _titles(_first_page(order="newest")) == ["new, urgent", "old"]
    assert _titles(_first_page()) == ["new, urgent", "old"]


# --- Filters and search -----------------------------------------------------------------


def test_filter_by_source():
    _row(title="from the forum", source="forum")
    _row(title="from the shop", source="shop")
    assert _titles(_first_page(source="shop")) == ["from the shop"]


def test_filter_by_flag_matches_a_whole_flag_on_this_backend():
    _row(title="loud", flags=["shouting", "1 link"])
    _row(title="mentions shouting", flags=["watch words: shouting match"])
    _row(title="plain")
    assert _titles(_first_page(flag="shouting")) == ["loud"]
    assert _titles(_first_page(flag="1 link")) == ["loud"]
    assert _titles(_first_page(flag="shout")) == []


@pytest.mark.parametrize(("band", "expected"), [("low", ["r0", "r19"]), ("medium", ["r20", "r49"]), ("high", ["r50", "r100"])])
def test_filter_by_risk_band(band, expected):
    for risk in (0, 19, 20, 49, 50, 100):
        _row(title=f"r{risk}", risk=risk, created=T0)
    assert sorted(_titles(_first_page(risk=band, order="oldest"))) == sorted(expected)
    # The row's band, as the queue shows it beside the number, is the filter's band.
    assert {item.risk_band for item in _first_page(risk=band, order="oldest").object_list} == {band}


def test_queue_page_names_each_risk_band_and_explains_them(client, alice):
    for risk in (19, 20, 50):
        _row(title=f"r{risk}", risk=risk)
    client.force_login(alice)
    html = client.get(reverse("moderation:queue")).content.decode()
    for risk, band in ((19, "low"), (20, "medium"), (50, "high")):
        assert f'<span class="risk risk-{band}">{risk}<span class="risk-band"> {band}</span></span>' in html
    assert 'id="risk-legend"' in html and "under 20" in html and "20–49" in html and "50 and over" in html


def test_filter_by_graph():
    _row(title="moderated")
    _row(title="agent refund", graph="refund_agent")
    assert _titles(_first_page(graph="refund_agent")) == ["agent refund"]
    assert _titles(_first_page(graph="moderation")) == ["moderated"]


def test_search_looks_at_title_and_body_and_keeps_the_order():
    _row(title="Refund request", risk=0, created=T0)
    _row(title="Order 7", body="The customer wants a REFUND of 20 EUR", risk=90, created=T0)
    _row(title="Shipping question", body="Where is my parcel?")
    assert _titles(_first_page(q="refund")) == ["Order 7", "Refund request"]
    assert _titles(_first_page(q="parcel")) == ["Shipping question"]
    assert _titles(_first_page(q="nothing like it")) == []


def test_filters_combine():
    _row(title="shop, risky", source="shop", risk=60, flags=["shouting"])
    _row(title="shop, calm", source="shop", risk=0, flags=["shouting"])
    _row(title="forum, risky", source="forum", risk=60, flags=["shouting"])
    assert _titles(_first_page(source="shop", risk="high", flag="shouting")) == ["shop, risky"]


def test_postgres_search_stems_words_and_uses_the_gin_index():
    if connection.vendor != "postgresql":
        pytest.skip("full-text search is PostgreSQL's; SQLite matches substrings")
    _many(2000)
    _row(title="Refunds", body="several")
    assert _titles(_first_page(q="refund")) == ["Refunds"]
    # The planner reaches for the index only if the query's expression is the indexed one.
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE moderation_queueitem")
    plan = _queue_filtered(QueueFilters(q="refund")).order_by("rank", "id")[:26].explain()
    assert "item_search_gin" in plan


@pytest.mark.parametrize("order", ["priority", "oldest", "newest"])
def test_sqlite_pages_and_recent_decisions_walk_an_index_without_sorting_the_queue(order):
    # SQLite cannot seek on ``NOT is_lab`` (Django's spelling of is_lab=False): it sorted
    # every pending row per page, 300 ms at a million (make bench). PostgreSQL plans it either way.
    if connection.vendor != "sqlite":
        pytest.skip("the plan text checked is SQLite's")
    _many(2000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    page = _queue_filtered(QueueFilters(order=order)).order_by(*QUEUE_ORDERS[order])[:26].explain()
    assert "TEMP B-TREE" not in page, page
    recent = items_recently_decided(limit=5).explain()
    assert "decided_at>?" in recent and "TEMP B-TREE" not in recent, recent


# --- Cursor pages -----------------------------------------------------------------------


def _walk(*, order="priority", per_page=25, between=None):
    """Every page from the first by its next cursor; ``between(page_number)`` runs between loads."""
    seen, cursor, number = [], None, 0
    while True:
        page = queue_pending(filters=QueueFilters(order=order), cursor=cursor, per_page=per_page)
        seen.extend(page.object_list)
        number += 1
        if page.next_cursor is None:
            return seen, number
        if between:
            between(number)
        cursor = queue_cursor_read(token=page.next_cursor, order=order)


def _many(n, *, start=T0):
    QueueItem.objects.bulk_create(
        QueueItem(
            title=f"bulk {i}",
            body="b",
            source="bulk",
            risk=(i * 37) % 101,
            priority=(i % 7) - 3,
            thread_id=f"t-many-{i}-{uuid.uuid4()}",
        )
        for i in range(n)
    )


@pytest.mark.parametrize("order", ["priority", "oldest", "newest"])
def test_pages_at_1000_items_cost_the_same_queries_and_cover_the_queue_once(order, django_assert_num_queries):
    _many(1000)
    filters = QueueFilters(order=order)
    with django_assert_num_queries(2):  # the page, its open asks
        page = queue_pending(filters=filters, cursor=None, per_page=25)
    pages = [page]
    while page.next_cursor:
        cursor = queue_cursor_read(token=page.next_cursor, order=order)
        with django_assert_num_queries(3) as captured:  # the page, whether one is before it, its open asks
            page = queue_pending(filters=filters, cursor=cursor, per_page=25)
        assert not any(word in q["sql"].upper() for q in captured.captured_queries for word in ("COUNT(", "OFFSET"))
        pages.append(page)
    ids = [item.id for p in pages for item in p.object_list]
    assert len(pages) == 40 and len(ids) == 1000 and len(set(ids)) == 1000
    expected = list(
        QueueItem.objects.order_by(
            *{"priority": ("rank", "id"), "oldest": ("created_at", "id"), "newest": ("-created_at", "-id")}[order]
        ).values_list("id", flat=True)
    )
    assert ids == expected


def test_the_view_runs_the_same_queries_on_every_page_after_the_first(client, alice, settings):
    _many(1000)
    settings.QUEUE_PAGE_SIZE = 25
    client.force_login(alice)
    url = reverse("moderation:queue")
    costs, params = [], {}
    for _ in range(40):
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url, params)
        assert response.status_code == 200
        costs.append(len(queries))
        nxt = response.context["next_query"]
        if nxt is None:
            break
        params = {k: v[0] for k, v in parse_qs(nxt).items()}
    # The second page also asks whether a page lies before it; the first one writes the
    # moderator's filters into the session (three queries: savepoint, update, release), once.
    assert len(costs) == 40 and len(set(costs[1:])) == 1 and costs[1] == costs[0] + 1 - 3
    assert not any("OFFSET" in q["sql"].upper() for q in queries.captured_queries)


def test_paging_while_items_arrive_and_are_decided_never_repeats_or_skips(alice):
    _many(1000)
    start = set(QueueItem.objects.values_list("id", flat=True))
    decided = set()

    def meanwhile(page_number):
        # New items land before and after the reader's place; items on pages read and unread are decided.
        _row(title=f"urgent {page_number}", priority=1000)
        _row(title=f"held {page_number}", priority=-1000)
        pending = list(QueueItem.objects.filter(status=ItemStatus.PENDING, id__in=start).order_by("rank", "id"))
        for item in (pending[0], pending[len(pending) // 2], pending[-1]):
            _decide(item, alice)
            decided.add(item.id)

    seen, pages = _walk(between=meanwhile)
    ids = [item.id for item in seen]
    assert len(ids) == len(set(ids))
    # Every original item still pending at the end was shown, exactly once.
    assert start - decided <= set(ids)
    # Items added behind the reader's place (held back) are reached; those ahead of it are not re-served.
    held = set(QueueItem.objects.filter(title__startswith="held").values_list("id", flat=True))
    assert held <= set(ids) and pages >= 40


def test_previous_page_returns_the_page_before_and_a_full_first_page(alice):
    _many(100)
    filters = QueueFilters()
    first = queue_pending(filters=filters, cursor=None, per_page=10)
    second = queue_pending(filters=filters, cursor=queue_cursor_read(token=first.next_cursor, order="priority"), per_page=10)
    third = queue_pending(filters=filters, cursor=queue_cursor_read(token=second.next_cursor, order="priority"), per_page=10)
    back = queue_pending(filters=filters, cursor=queue_cursor_read(token=third.previous_cursor, order="priority"), per_page=10)
    assert [i.id for i in back.object_list] == [i.id for i in second.object_list]
    assert back.previous_cursor and back.next_cursor
    # Items before page two were decided: "previous" now lands on a full first page, with none before it.
    for item in first.object_list[:5]:
        _decide(item, alice)
    start = queue_pending(filters=filters, cursor=queue_cursor_read(token=second.previous_cursor, order="priority"), per_page=10)
    assert len(start.object_list) == 10 and start.previous_cursor is None
    assert [i.id for i in start.object_list] == [i.id for i in first.object_list[5:]] + [i.id for i in second.object_list[:5]]


def test_a_next_page_whose_items_were_all_decided_shows_the_last_page(alice):
    _many(15)
    filters = QueueFilters(order="oldest")
    first = queue_pending(filters=filters, cursor=None, per_page=10)
    for item in QueueItem.objects.order_by("created_at", "id")[10:]:
        _decide(item, alice)
    page = queue_pending(filters=filters, cursor=queue_cursor_read(token=first.next_cursor, order="oldest"), per_page=10)
    assert [i.id for i in page.object_list] == [i.id for i in first.object_list]
    assert page.next_cursor is None and page.previous_cursor is None


def test_cursor_must_be_signed_and_for_the_order_in_use():
    _many(30)
    token = queue_pending(filters=QueueFilters(), cursor=None, per_page=10).next_cursor
    with pytest.raises(CursorInvalid):
        queue_cursor_read(token=token, order="oldest")
    with pytest.raises(CursorInvalid):
        queue_cursor_read(token=token[:-2] + "xx", order="priority")
    forged = signing.dumps({"o": "priority", "f": True, "k": ["1", 1]}, salt="other")
    with pytest.raises(CursorInvalid):
        queue_cursor_read(token=forged, order="priority")
    assert queue_cursor_read(token=token, order="priority").forward is True


# --- The page ---------------------------------------------------------------------------


def test_page_links_carry_the_filters_and_an_opaque_cursor(client, alice, settings):
    settings.QUEUE_PAGE_SIZE = 2
    for i in range(5):
        _row(title=f"shop {i}", source="shop", created=T0 + timedelta(minutes=i))
    _row(title="elsewhere", source="forum")
    client.force_login(alice)
    page1 = client.get(reverse("moderation:queue"), {"source": "shop", "order": "newest"})
    html = page1.content.decode()
    assert "Next page" in html and "Previous page" not in html
    params = parse_qs(page1.context["next_query"])
    assert params["source"] == ["shop"] and params["order"] == ["newest"] and params["cursor"]
    page2 = client.get(reverse("moderation:queue"), {k: v[0] for k, v in params.items()})
    assert _titles(page2.context["page"]) == ["shop 2", "shop 1"]
    assert "Previous page" in page2.content.decode()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"risk": "extreme"}, "risk must be one of low, medium, high"),
        ({"graph": "nope", "source": "shop"}, "graph must be one of"),
        ({"source": "x" * 101}, "source must be at most 100 characters"),
        ({"q": "nul\x00byte"}, "q must be at most 200 characters of text"),
        ({"flag": "a\x00"}, "flag must be at most 200 characters of text"),
        ({"order": "sideways"}, "Unknown order “sideways”"),
        ({"cursor": "not-a-cursor"}, "That page link is out of date or damaged"),
    ],
)
def test_bad_filters_and_cursors_show_a_message_and_the_whole_queue(client, alice, params, message):
    _row(title="shop item", source="shop", risk=0)
    _row(title="forum item", source="forum", risk=80)
    client.force_login(alice)
    response = client.get(reverse("moderation:queue"), params)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert _titles(response.context["page"]) == ["forum item", "shop item"]


def test_no_match_says_so_rather_than_an_empty_queue(client, alice):
    _row(title="only item")
    client.force_login(alice)
    html = client.get(reverse("moderation:queue"), {"q": "zebra"}).content.decode()
    assert "No pending item matches these filters." in html and "Nothing is waiting" not in html


@pytest.mark.django_db(transaction=True)
def test_migration_0015_ranks_the_items_already_queued():
    from django.core.management import call_command
    from django.db.migrations.executor import MigrationExecutor

    before, after = ("moderation", "0012_webhook_item_applied"), ("moderation", "0015_queue_rank")
    executor = MigrationExecutor(connection)
    executor.migrate([before])
    executor.loader.build_graph()
    Item = executor.loader.project_state([before]).apps.get_model("moderation", "QueueItem")
    old = Item.objects.create(title="t", body="b", source="s", thread_id="item-old", priority=3, risk=70)
    MigrationExecutor(connection).migrate([after])
    call_command("migrate", "moderation", verbosity=0)  # leave the schema as the suite expects
    item = QueueItem.objects.get(pk=old.pk)
    assert item.rank == queue_rank(priority=3, risk=70, created_at=item.created_at) != 0


def test_a_row_reads_only_the_start_of_a_long_body(client, alice, make_item):
    make_item(title="Long", body="word " * 30_000)  # 150,000 characters
    make_item(title="Exact", body="x" * 120)
    client.force_login(alice)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("moderation:queue"))
    rows = {i.title: i for i in response.context["page"].object_list}
    # 120 characters shown, the ellipsis among them, as Django's truncatechars:120 would cut it.
    assert rows["Long"].excerpt == ("word " * 24)[:119] + "…" == Truncator("word " * 30_000).chars(120)
    assert rows["Exact"].excerpt == "x" * 120  # at the limit: whole, no ellipsis
    assert f"<div>{rows['Long'].excerpt}</div>" in response.content.decode()
    assert "word " * 30 not in response.content.decode()  # not the whole body
    page_sql = next(q["sql"] for q in queries.captured_queries if "SUBSTR" in q["sql"].upper())
    columns = page_sql.upper().split("SUBSTR")[0]  # what the row query selects besides the excerpt
    assert '"BODY"' not in columns and '"REVIEW_REQUEST"' not in columns
