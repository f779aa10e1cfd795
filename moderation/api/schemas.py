"""What /api/v1 accepts and answers: pydantic models, also the source of the OpenAPI schema."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from ninja import Schema
from pydantic import ConfigDict, Field

from moderation.models import PRIORITY_MAX, PRIORITY_MIN, AskStatus, QueueItem, ReviewAsk
from moderation.outcomes import ask_what
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
    # A REVIEWQUEUE_GRAPHS name (the moderation graph by default), checked by the service,
    # which lists the registered ones when it is unknown.
    graph: str | None = Field(default=None, min_length=1, max_length=64)
    # Merged into the graph's start state; its limits are metadata's, checked by the service.
    input: dict[str, Any] = Field(default_factory=dict)


class BatchItemIn(ItemIn):
    # Per item, since a batch has no one header for all.
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=KEY_MAX_LENGTH)


class DecisionOut(Schema):
    status: str
    by: str
    at: datetime
    note: str


class AskOut(Schema):
    """One interrupt of the item's graph, in LangChain's HITL request format, and its decision."""

    id: str  # LangGraph's Interrupt.id
    round: int
    status: str
    action_requests: list[dict[str, Any]]
    review_configs: list[dict[str, Any]]
    decided_by: str | None
    decided_at: datetime | None
    # LangChain decisions, one per action: {"type": "approve" | "edit" | "reject" | "respond", ...}
    decisions: list[dict[str, Any]]
    what: str  # the decisions in words: "edited refund (amount 120 → 80)"
    reason: str  # the reason code of a reject ("" for none): one of the admin's ReasonCode codes
    applied: bool  # the worker has resumed the graph with the decision

    @classmethod
    def of(cls, ask: ReviewAsk) -> AskOut:
        decided = ask.status != AskStatus.PENDING
        return cls(
            id=ask.interrupt_id, round=ask.round, status=ask.status,
            action_requests=ask.payload["action_requests"], review_configs=ask.payload["review_configs"],
            decided_by=ask.decided_by.get_username() if decided else None, decided_at=ask.decided_at,
            decisions=ask.decisions, what=ask_what(ask) if decided else "", reason=ask.reason,
            applied=ask.applied_at is not None,
        )


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
    graph: str
    asks: list[AskOut]
    # "" idle, "applying" (a decision waits for the worker), "failed" (needs manage.py recover)
    apply_state: str
    applied_result: dict[str, Any]
    # Kept for clients written before asks: the first open ask's request ({} when none is open).
    review_request: dict[str, Any]

    @classmethod
    def of(cls, item: QueueItem) -> ItemOut:
        decision = None
        if item.decided_by_id is not None:
            decision = DecisionOut(
                status=item.status, by=item.decided_by.username, at=item.decided_at, note=item.decision_note
            )
        asks = list(item.asks.all())
        first_open = next((a for a in asks if a.status == AskStatus.PENDING), None)
        return cls(
            id=item.public_id, title=item.title, source=item.source, status=item.status,
            external_id=item.external_id, metadata=item.metadata, priority=item.priority,
            created_at=item.created_at, decided_at=item.decided_at, decision=decision,
            graph=item.graph, asks=[AskOut.of(a) for a in asks], apply_state=item.apply_state,
            applied_result=item.applied_result, review_request=first_open.payload if first_open else {},
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
