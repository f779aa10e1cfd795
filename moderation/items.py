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
    public_id = uuid.uuid4()
    item = QueueItem(public_id=public_id, title=title, body=body, source=source, thread_id=f"item-{public_id}")
    item.full_clean(exclude=["thread_id", "review_request"])
    with transaction.atomic():
        item.review_request = graph_start(
            thread_id=item.thread_id, item_id=str(public_id), title=title, body=body, source=source
        )
        item.save(force_insert=True)
        transaction.on_commit(lambda: events.item_created_broadcast(item=item))
    return item



CONTENT_FIELDS = ("title", "body", "source")


class ItemNotEditable(Exception):
    """The item is no longer pending: its content is what was (or is being) decided."""


def item_content_edit(*, item_pk: int, changes: dict[str, str]) -> dict[str, str]:
    """Change a pending item's title, body or source; return the values they replaced.

    Checked under the row lock, so an edit can never land on an item decided meanwhile
    (the audit log signs the content each decision was made on).
    """
    unknown = sorted(set(changes) - set(CONTENT_FIELDS))
    if unknown:
        raise ValueError(f"only {', '.join(CONTENT_FIELDS)} can be edited, not {', '.join(unknown)}")
    with transaction.atomic():
        item = QueueItem.objects.select_for_update().get(pk=item_pk)
        if not item.is_pending:
            raise ItemNotEditable(f"the item is {item.status}; its content can no longer change")
        before = {field: getattr(item, field) for field in changes}
        for field, value in changes.items():
            setattr(item, field, value)
        item.full_clean(exclude=["thread_id", "review_request"])
        if changes:
            item.save(update_fields=list(changes))
    return before
