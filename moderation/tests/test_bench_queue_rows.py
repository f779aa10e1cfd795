"""The bench's shortcut for a million pending rows (bench.inprocess._queue_rows_insert) writes rows the product reads as its own.

It bypasses the model, so a column added to QueueItem (issue 16's policy snapshot) breaks
it only when the bench runs; this keeps it honest on both backends.
"""

import pytest
from django.forms.models import model_to_dict

from bench.inprocess import _queue_rows_insert
from moderation.items.models import QueueItem, queue_rank
from moderation.records.selectors import queue_counts

# Transactional: on PostgreSQL the shortcut runs VACUUM, which refuses a transaction block.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_variant]

# What differs between any two items by nature, not by how they were written.
_OWN = {
    "id",
    "public_id",
    "title",
    "body",
    "source",
    "created_at",
    "thread_id",
    "review_request",
    "rank",
    "risk",
    "flags",
    "submission_digest",
    "audit_head",
}


def test_the_shortcut_rows_are_pending_items_like_those_item_create_makes(make_item, alice, client):
    real = make_item(title="made by item_create")
    _queue_rows_insert(30)

    bulk = list(QueueItem.objects.filter(source="bench-bulk").order_by("id"))
    assert len(bulk) == 30 and queue_counts().pending == 31  # the counters were brought to the COUNT
    for row in bulk:
        row.full_clean(exclude=["public_id", "thread_id"])
        assert row.rank == queue_rank(priority=row.priority, risk=row.risk, created_at=row.created_at)
    # Every column the model fills by itself matches a real item's.
    own = {k: v for k, v in model_to_dict(real).items() if k not in _OWN}
    shortcut = {k: v for k, v in model_to_dict(bulk[0]).items() if k not in _OWN}
    assert shortcut == own

    client.force_login(alice)
    page = client.get("/")
    assert page.status_code == 200 and b"bulk item" in page.content
