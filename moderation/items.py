"""Creating queue items: each gets its own graph thread, paused at review."""

from __future__ import annotations

import uuid

from django.db import transaction

from moderation import events
from moderation.graph import graph_start
from moderation.models import QueueItem


def item_create(*, title: str, body: str, source: str) -> QueueItem:
    """Create an item and run its graph to the review interrupt.

    Raises ValidationError (and creates nothing) for an empty or oversized field.

    The row and the graph start share one transaction: if the graph cannot start, no
    item appears. A graph started for a row that then fails to commit is an orphan
    thread nobody can reach, which is harmless.
    """
    return _item_start(title=title, body=body, source=source, is_lab=False)


def lab_item_create(*, title: str, body: str) -> QueueItem:
    """A race-lab item (``is_lab``): the only way to make one; moderation.lab is its only caller."""
    return _item_start(title=title, body=body, source="racelab", is_lab=True)


def _item_start(*, title: str, body: str, source: str, is_lab: bool) -> QueueItem:
    public_id = uuid.uuid4()
    item = QueueItem(
        public_id=public_id, title=title, body=body, source=source, thread_id=f"item-{public_id}", is_lab=is_lab
    )
    item.full_clean(exclude=["thread_id", "review_request"])
    with transaction.atomic():
        item.review_request = graph_start(
            thread_id=item.thread_id, item_id=str(public_id), title=title, body=body, source=source
        )
        item.save(force_insert=True)
        events.after_commit(lambda: events.item_created_broadcast(item=item))
    return item

