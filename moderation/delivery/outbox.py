"""Recording deliveries in the transaction that made the event (the transactional outbox).

A delivery row and its task are written with the decision (or the new item), so a
committed event is always delivered and a rolled-back one never is, whatever happens
to the process after the commit.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from moderation.delivery.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint, WebhookEvent
from moderation.delivery.sending import delivery_send
from moderation.graphs.asks import AskSpec, ask_resume_langchain
from moderation.graphs.passthrough import ask_external
from moderation.items.models import ItemStatus
from moderation.records.outcomes import ask_edits, ask_what

if TYPE_CHECKING:
    from moderation.items.models import QueueItem, ReviewAsk
    from moderation.records.models import OutcomeReport


def item_payload(*, item: QueueItem, ask: ReviewAsk | None = None) -> dict:
    """What every item event says about its item (the body stays out: the sender has it).

    ``ask``: the ask whose decision settled the item; its interrupt id, LangChain
    decisions, their description, what its edits changed and the reject's reason code go into ``decision``.
    """
    data = {
        "id": str(item.public_id),
        "title": item.title,
        "source": item.source,
        "graph": item.graph,
        "status": item.status,
        "created_at": item.created_at.isoformat() if item.created_at else None,
        "team": item.team.slug if item.team_id else None,
        "policy": item.policy or None,
        "decision": None,
        "external": ask_external(graph=item.graph, graph_input=item.graph_input),
    }
    if item.decided_at is not None and item.decided_by is not None:
        data["decision"] = {
            "status": item.status,
            "by": item.decided_by.get_username(),
            "at": item.decided_at.isoformat(),
            "note": item.decision_note,
        }
        if ask is not None:
            data["decision"].update(
                ask=ask.interrupt_id,
                decisions=ask.decisions,
                what=ask_what(ask),
                edits=ask_edits(ask),
                reason=ask.reason,
                resume=ask_resume_langchain(spec=AskSpec.from_payload(ask.payload), decisions=ask.decisions),
                **({"tally": ask.tally} if ask.tally else {}),
            )
    return data


def delivery_record(*, event: str, item: QueueItem, payload: dict) -> list[WebhookDelivery]:
    """One delivery per active endpoint subscribed to ``event`` that may see ``item``; call it
    inside the event's transaction.

    Those are the operators' endpoints (no owner) and, for an item an API client submitted,
    that client's own (``moderation.delivery.endpoints``): never another client's.
    The caller holds the item's row lock (or has just inserted the row), so the item's
    sequence numbers are handed out in the order its events happen.
    """
    if item.is_lab:  # the race lab's items are the lab's business, not other systems'
        return []
    audience = Q(owner__isnull=True)
    if item.submitted_by_id is not None:
        audience |= Q(owner_id=item.submitted_by_id)
    endpoints = [e for e in WebhookEndpoint.objects.filter(audience, active=True) if event in e.events]
    if not endpoints:
        return []
    last = WebhookDelivery.objects.filter(item_public_id=item.public_id).aggregate(last=Max("sequence"))["last"]
    sequence = (last or 0) + 1
    return [
        _delivery_write(
            endpoint=endpoint,
            event=event,
            item_public_id=item.public_id,
            sequence=sequence,
            data={**payload, "sequence": sequence},
        )
        for endpoint in endpoints
    ]


def item_settled_record(*, item: QueueItem, ask: ReviewAsk) -> list[WebhookDelivery]:
    """The webhooks for an item ``ask``'s decision just settled in this transaction: cancelled if its submitter withdrew it."""
    event = WebhookEvent.ITEM_CANCELLED if item.status == ItemStatus.WITHDRAWN else WebhookEvent.ITEM_DECIDED
    return delivery_record(event=event, item=item, payload=item_payload(item=item, ask=ask))


def item_voted_record(*, item: QueueItem, ask: ReviewAsk, tally: dict) -> list[WebhookDelivery]:
    """The webhooks for a counted vote that left its quorum ask open, in the vote's transaction."""
    payload = {**item_payload(item=item), "ask": ask.interrupt_id, "tally": tally}
    return delivery_record(event=WebhookEvent.ITEM_VOTED, item=item, payload=payload)


def item_escalated_record(*, item: QueueItem) -> list[WebhookDelivery]:
    """The webhooks for an item handed to its team's supervisors at a deadline, in that transaction."""
    payload = {**item_payload(item=item), "escalated_at": item.escalated_at.isoformat(), "priority": item.priority}
    return delivery_record(event=WebhookEvent.ITEM_ESCALATED, item=item, payload=payload)


def item_applied_record(*, item: QueueItem, applied: list[str]) -> list[WebhookDelivery]:
    """The webhooks for the worker's record of an apply (``moderation.review.apply``), in that record's transaction.

    ``applied``: the interrupt ids the graph took decisions for; ``applied_result`` says
    what it did next, with its summary and errors (``moderation.graphs.outcome.applied_result_build``).
    """
    payload = {**item_payload(item=item), "applied": applied, "applied_result": item.applied_result}
    return delivery_record(event=WebhookEvent.ITEM_APPLIED, item=item, payload=payload)


def outcome_payload(*, report: OutcomeReport) -> dict:
    """An agent's outcome report as the API and the ``item.outcome`` webhook say it."""
    return {"status": report.status, "message": report.message, "reported_at": report.reported_at.isoformat()}


def item_outcome_record(*, item: QueueItem, report: OutcomeReport) -> list[WebhookDelivery]:
    """The webhooks for the outcome its agent reported (``moderation.review.outcomes``), in that report's transaction."""
    payload = {**item_payload(item=item), "outcome": outcome_payload(report=report)}
    return delivery_record(event=WebhookEvent.ITEM_OUTCOME, item=item, payload=payload)


def endpoint_ping(*, endpoint: WebhookEndpoint) -> WebhookDelivery:
    """A ``webhook.ping`` for one endpoint (active or not), delivered like any event."""
    return _delivery_write(
        endpoint=endpoint,
        event=WebhookEvent.PING,
        item_public_id=None,
        sequence=0,
        data={"endpoint": endpoint.name},
    )


def delivery_redeliver(*, delivery: WebhookDelivery) -> bool:
    """Send a delivered or failed delivery again (same webhook-id); False if it is still pending."""
    with transaction.atomic():
        delivery = WebhookDelivery.objects.select_for_update().get(pk=delivery.pk)
        if delivery.status == DeliveryStatus.PENDING:
            return False
        now = timezone.now()
        delivery.status = DeliveryStatus.PENDING
        delivery.next_attempt_at = now
        delivery.retry_until = now + timedelta(seconds=settings.WEBHOOK_RETRY_FOR)
        delivery.save(update_fields=["status", "next_attempt_at", "retry_until"])
        delivery_send.enqueue(delivery.pk)
    return True


def _delivery_write(*, endpoint: WebhookEndpoint, event: str, item_public_id, sequence: int, data: dict) -> WebhookDelivery:
    now = timezone.now()
    with transaction.atomic():
        delivery = WebhookDelivery.objects.create(
            endpoint=endpoint,
            event=event,
            item_public_id=item_public_id,
            sequence=sequence,
            payload={"type": event, "timestamp": now.isoformat(), "data": data},
            next_attempt_at=now,
            retry_until=now + timedelta(seconds=settings.WEBHOOK_RETRY_FOR),
        )
        # The task row is in the same transaction: it exists exactly when the delivery does.
        delivery_send.enqueue(delivery.pk)
    return delivery
