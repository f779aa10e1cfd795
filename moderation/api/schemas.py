"""What /api/v1 accepts and answers: pydantic models, also the source of the OpenAPI schema."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from ninja import Schema
from pydantic import ConfigDict, Field

from moderation.models import PRIORITY_MAX, PRIORITY_MIN, QueueItem
from moderation.submissions import KEY_MAX_LENGTH

BATCH_MAX_ITEMS = 500


class Strict(Schema):
    # An unknown field is a client's bug (a typo drops data silently otherwise): refused.
    model_config = ConfigDict(extra="forbid")


class ItemIn(Strict):
    title: str = Field(min_length=1, max_length=200)
    # Its length limit is ITEM_BODY_MAX_LENGTH, checked by the service with the limit named.
    body: str = Field(min_length=1)
    source: str = Field(min_length=1, max_length=100)
    external_id: str | None = Field(default=None, min_length=1, max_length=KEY_MAX_LENGTH)
    metadata: dict[str, Any] = Field(default_factory=dict)
    priority: int = Field(default=0, ge=PRIORITY_MIN, le=PRIORITY_MAX)


class BatchItemIn(ItemIn):
    # Per item, since a batch has no one header for all.
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=KEY_MAX_LENGTH)


class DecisionOut(Schema):
    status: str
    by: str
    at: datetime
    note: str


class ItemOut(Schema):
    id: UUID
    title: str
    source: str
    status: str
    external_id: str | None
    metadata: dict[str, Any]
    priority: int
    created_at: datetime
    decided_at: datetime | None
    decision: DecisionOut | None
    review_request: dict[str, Any]

    @classmethod
    def of(cls, item: QueueItem) -> ItemOut:
        decision = None
        if item.decided_by_id is not None:
            decision = DecisionOut(
                status=item.status, by=item.decided_by.username, at=item.decided_at, note=item.decision_note
            )
        return cls(
            id=item.public_id, title=item.title, source=item.source, status=item.status,
            external_id=item.external_id, metadata=item.metadata, priority=item.priority,
            created_at=item.created_at, decided_at=item.decided_at, decision=decision,
            # The graph's question while it waits; nothing once decided.
            review_request=item.review_request if item.is_pending else {},
        )


class ErrorOut(Schema):
    error: str
    message: str


class CancelIn(Strict):
    # A decision's note and a withdrawal's reason share the guard's limit (DECISION_NOTE_MAX_LENGTH).
    reason: str = ""


class CancelLost(ErrorOut):
    winner: str
    status: str
    decided_at: datetime


class ItemPage(Schema):
    items: list[ItemOut]
    next_cursor: str | None


class BatchIn(Strict):
    items: list[dict[str, Any]] = Field(min_length=1, max_length=BATCH_MAX_ITEMS)


class BatchOutcome(Schema):
    index: int
    outcome: Literal["created", "existing", "invalid"]
    item: ItemOut | None = None
    error: str | None = None
    message: str | None = None


class BatchOut(Schema):
    results: list[BatchOutcome]
