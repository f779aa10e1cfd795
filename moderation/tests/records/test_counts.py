"""Counter rows (moderation.records.counts): exact after every status change, under concurrency, and repaired by recover."""

from __future__ import annotations

import io
import threading
import time
from datetime import timedelta

import pytest
from channels.layers import InMemoryChannelLayer
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import F, Sum
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from moderation.items.models import ItemStatus, QueueItem
from moderation.lab.harness import race_threads
from moderation.records.audit import audit_items_purge
from moderation.records.counts import SHARDS, counts_actual, counts_recount
from moderation.records.models import DecidedDayCounter, PendingCounter, QueueCounter
from moderation.records.selectors import queue_counts
from moderation.review import recovery
from moderation.review.apply import item_apply
from moderation.review.decisions import item_decide, item_withdraw
from moderation.review.items import item_create, lab_item_create
from moderation.review.reconcile import item_reconcile
from moderation.tests.graphs_support import REFUND_GRAPH
from moderation.tests.races import guard_held_assert

pytestmark = [pytest.mark.postgres_variant, pytest.mark.usefixtures("test_graphs")]


def _counters() -> dict[tuple, int]:
    """The counters summed over their shards, keyed like ``counts_actual``, zeros left out."""
    statuses = QueueCounter.objects.values("graph", "status").annotate(t=Sum("n")).order_by()
    summed = {("status", r["graph"], r["status"]): r["t"] for r in statuses}
    days = DecidedDayCounter.objects.values("day", "graph").annotate(t=Sum("n")).order_by()
    summed |= {("day", r["day"], r["graph"]): r["t"] for r in days}
    pending = PendingCounter.objects.values("team_key", "graph", "band").annotate(t=Sum("n")).order_by()
    summed |= {("pending", r["team_key"], r["graph"], r["band"]): r["t"] for r in pending}
    return {k: v for k, v in summed.items() if v}


def _exact() -> dict[tuple, int]:
    """Assert the counters equal a real COUNT, and that queue_counts reads the same; return the counts."""
    actual = counts_actual()
    assert _counters() == actual
    today = timezone.localdate(timezone.now(), timezone.get_default_timezone())
    assert queue_counts().pending == QueueItem.objects.filter(is_lab=False, status=ItemStatus.PENDING).count()
    assert queue_counts().decided_today == sum(n for k, n in actual.items() if k[0] == "day" and k[1] == today)
    return actual


def _status(graph: str = "moderation", status: str = ItemStatus.PENDING) -> int:
    return _counters().get(("status", graph, status), 0)


@pytest.mark.django_db
def test_a_new_item_counts_as_pending_in_its_queue_and_a_lab_item_not_at_all(make_item):
    make_item()
    item_create(title="Refund", body="Order A-1001.", source="shop", graph=REFUND_GRAPH)
    lab_item_create(title="Lab one", body="Raced by the lab.")
    _exact()
    assert (_status(), _status(REFUND_GRAPH)) == (1, 1)
    counts = queue_counts()
    assert (counts.pending, counts.decided_today, counts.pending_by_graph) == (2, 0, {"moderation": 1, REFUND_GRAPH: 1})


@pytest.mark.django_db
@pytest.mark.parametrize(("decision", "status"), [("approve", ItemStatus.APPROVED), ("reject", ItemStatus.REJECTED)])
def test_a_decision_moves_the_item_from_pending_to_its_status_and_to_today(alice, bob, make_item, decision, status):
    item, other = make_item(), make_item()
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decision=decision).won
    assert not item_decide(item_public_id=item.public_id, reviewer=bob, decision="approve").won  # the loser changes nothing
    _exact()
    assert (_status(), _status(status=status)) == (1, 1)
    assert (queue_counts().pending, queue_counts().decided_today) == (1, 1)
    assert queue_counts(now=timezone.now() + timedelta(days=1)).decided_today == 0
    assert other.status == ItemStatus.PENDING


@pytest.mark.django_db
def test_an_edit_counts_under_edited_in_its_own_queue(alice):
    item = item_create(title="Refund", body="Order A-1001.", source="shop", graph=REFUND_GRAPH)
    edit = [
        {"type": "edit", "edited_action": {"name": "refund", "args": {"order_id": "A-1001", "amount": 80, "currency": "EUR"}}}
    ]
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decisions=edit).won
    _exact()
    assert (_status(REFUND_GRAPH), _status(REFUND_GRAPH, ItemStatus.EDITED)) == (0, 1)


@pytest.mark.django_db
def test_a_withdrawal_counts_as_decided_today(alice, make_item):
    item = make_item()
    item_withdraw(item_public_id=item.public_id, by=alice, reason="sent by mistake")
    _exact()
    assert (_status(), _status(status=ItemStatus.WITHDRAWN), queue_counts().decided_today) == (0, 1, 1)


@pytest.mark.django_db
def test_a_new_round_puts_the_item_back_to_pending_and_out_of_today(alice, settings):
    settings.REVIEWQUEUE_APPLY_INLINE = False  # the worker's half runs below, when the test says
    item = item_create(title="Refund", body="Order A-1001.", source="shop", graph=REFUND_GRAPH)
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decisions=[{"type": "respond", "message": "ask first"}]).won
    assert (_status(REFUND_GRAPH, ItemStatus.ANSWERED), queue_counts().decided_today) == (1, 1)
    item_apply(item_id=item.pk)  # the graph proposes again: a second round
    item.refresh_from_db()
    assert item.status == ItemStatus.PENDING
    _exact()
    assert (_status(REFUND_GRAPH), _status(REFUND_GRAPH, ItemStatus.ANSWERED), queue_counts().decided_today) == (1, 0, 0)


@pytest.mark.django_db
def test_needs_attention_and_back_to_pending_move_the_count(make_item):
    item = make_item()
    thread_id = item.thread_id
    QueueItem.objects.filter(pk=item.pk).update(thread_id="no-such-thread")
    [done] = item_reconcile(key=str(item.public_id))[1]
    assert done.startswith("needs attention")
    _exact()
    assert (_status(), _status(status=ItemStatus.NEEDS_ATTENTION)) == (0, 1)
    QueueItem.objects.filter(pk=item.pk).update(thread_id=thread_id)
    assert item_reconcile(key=str(item.public_id))[1] == ["graph is waiting for review again: back to pending"]
    _exact()
    assert (_status(), _status(status=ItemStatus.NEEDS_ATTENTION)) == (1, 0)


@pytest.mark.django_db
def test_an_item_recover_cannot_repair_moves_to_needs_attention(make_item, monkeypatch):
    make_item()

    def broken(*, key):
        raise RuntimeError("checkpoint unreadable")

    monkeypatch.setattr(recovery, "item_reconcile", broken)
    assert recovery.items_recover().failed == 1
    _exact()
    assert (_status(), _status(status=ItemStatus.NEEDS_ATTENTION)) == (0, 1)


@pytest.mark.django_db
def test_lab_items_are_never_counted_and_their_purge_leaves_the_counts_alone(alice, make_item):
    real = make_item()
    lab = [lab_item_create(title=f"Lab {i}", body="Raced.") for i in range(3)]
    item_decide(item_public_id=lab[0].public_id, reviewer=alice, decision="approve")
    item_decide(item_public_id=real.public_id, reviewer=alice, decision="approve")
    before = _exact()
    audit_items_purge(items=QueueItem.objects.filter(is_lab=True))
    assert not QueueItem.objects.filter(is_lab=True).exists()
    assert _exact() == before


@pytest.mark.django_db
def test_purging_a_counted_item_takes_it_out_of_the_counts(alice, make_item):
    kept, decided, pending = make_item(), make_item(), make_item()
    item_decide(item_public_id=decided.public_id, reviewer=alice, decision="reject")
    audit_items_purge(items=QueueItem.objects.filter(pk__in=[decided.pk, pending.pk]))
    _exact()
    assert (_status(), _status(status=ItemStatus.REJECTED), queue_counts().decided_today) == (1, 0, 0)
    assert kept.status == ItemStatus.PENDING


@pytest.mark.django_db
def test_changes_spread_over_the_shards_and_the_read_sums_them(make_item):
    for i in range(40):
        make_item(title=f"item {i}")
    shards = set(QueueCounter.objects.filter(status=ItemStatus.PENDING).values_list("shard", flat=True))
    assert len(shards) > 1 and shards <= set(range(SHARDS))
    assert queue_counts().pending == 40


@pytest.mark.django_db
def test_recover_counts_repairs_drift_and_says_so(alice, make_item):
    for _ in range(3):
        make_item()
    item_decide(item_public_id=make_item().public_id, reviewer=alice, decision="approve")
    QueueCounter.objects.filter(pk=QueueCounter.objects.filter(status=ItemStatus.PENDING).first().pk).update(n=F("n") + 9)
    DecidedDayCounter.objects.all().delete()
    today = timezone.localdate(timezone.now(), timezone.get_default_timezone())

    out = io.StringIO()
    call_command("recover", "--counts", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines == [
        f"decided on {today.isoformat()} (moderation): counter 0, actual 1 — repaired",
        "pending (moderation): counter 12, actual 3 — repaired",
        "recover --counts: 2 counter(s) repaired.",
    ]
    _exact()
    assert (queue_counts().pending, queue_counts().decided_today) == (3, 1)

    out = io.StringIO()
    call_command("recover", "--counts", stdout=out)
    assert out.getvalue().strip() == "recover --counts: every counter matches a real COUNT."


class _Recording(InMemoryChannelLayer):
    sent: list[dict] = []

    async def group_send(self, group, message):
        _Recording.sent.append(message)


@pytest.mark.django_db(transaction=True)
def test_a_decision_and_its_events_carry_the_counts_without_counting_anything(settings, alice, make_item):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"{__name__}._Recording"}}
    _Recording.sent = []
    make_item()
    with CaptureQueriesContext(connection) as created:
        item = make_item()
    with CaptureQueriesContext(connection) as decided:
        assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve").won
    assert [(m["type"], m["counts"]) for m in _Recording.sent if m["type"] != "item.applied"] == [
        ("item.created", {"pending": 1, "decided_today": 0}),
        ("item.created", {"pending": 2, "decided_today": 0}),
        ("item.decided", {"pending": 1, "decided_today": 1}),
        ("item.decided", {"pending": 1, "decided_today": 1}),
    ]
    counting = [q["sql"] for q in created.captured_queries + decided.captured_queries if "COUNT(" in q["sql"].upper()]
    assert counting == []
    assert any("moderation_queuecounter" in q["sql"] for q in decided.captured_queries)  # the counts were read


@pytest.mark.django_db(transaction=True)
def test_eight_reviewers_racing_fifty_items_leave_no_drift_while_recount_runs_beside_them(make_moderator, make_item):
    users = [make_moderator().username for _ in range(8)]
    items = [str(make_item(title=f"race {i}").public_id) for i in range(50)]
    racing = threading.Event()
    recounts: list[list] = []

    def recount_meanwhile():
        # A recount while decisions commit must find nothing to repair (and so must not "repair" a right count).
        try:
            while racing.is_set():
                recounts.append(counts_recount())
                time.sleep(0.05)  # SQLite: leave the one write lock to the reviewers between recounts
        finally:
            connection.close()

    racing.set()
    recounter = threading.Thread(target=recount_meanwhile)
    recounter.start()
    try:
        # Every reviewer asks for something else where it can, so the winners spread over statuses.
        report = race_threads(
            strategy="guarded",
            items=items,
            usernames=users,
            delay=0.0,
            decisions=["approve", "reject", "withdraw", "approve"] * 2,
        )
    finally:
        racing.clear()
        recounter.join()
    guard_held_assert(report, items=items, reviewers=8)
    assert recounts and all(drifts == [] for drifts in recounts), [d for d in recounts if d]
    actual = _exact()
    decided = sum(n for k, n in actual.items() if k[0] == "status" and k[2] != ItemStatus.PENDING)
    assert (queue_counts().pending, queue_counts().decided_today, decided) == (0, 50, 50)


@pytest.mark.django_db(transaction=True)
def test_migration_0016_starts_the_counters_from_a_real_count():
    before, after = ("moderation", "0012_webhook_item_applied"), ("moderation", "0016_queue_counters")
    executor = MigrationExecutor(connection)
    executor.migrate([before])
    executor.loader.build_graph()
    apps = executor.loader.project_state([before]).apps
    alice = apps.get_model("auth", "User").objects.create(username="alice")
    Item = apps.get_model("moderation", "QueueItem")
    yesterday = timezone.now() - timedelta(days=1)
    for n, (status, decided_at, is_lab) in enumerate(
        [
            ("pending", None, False),
            ("pending", None, False),
            ("approved", timezone.now(), False),
            ("rejected", yesterday, False),
            ("approved", timezone.now(), True),
        ]
    ):
        Item.objects.create(
            title="t",
            body="b",
            source="s",
            thread_id=f"item-{n}",
            status=status,
            is_lab=is_lab,
            decided_by=alice if decided_at else None,
            decided_at=decided_at,
        )
    MigrationExecutor(connection).migrate([after])
    call_command("migrate", "moderation", verbosity=0)  # leave the schema as the suite expects
    _exact()
    assert (queue_counts().pending, queue_counts().decided_today) == (2, 1)
    assert _counters()[("status", "moderation", "rejected")] == 1
