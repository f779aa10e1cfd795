"""Webhook endpoints, their deliveries and each delivery's attempts.

Imported by ``moderation.models`` (app label ``moderation``); kept in their own module
because nothing in the guard reads them.
"""

import base64
import secrets
import uuid

from django.core.exceptions import ValidationError
from django.db import models

from moderation.delivery.targets import webhook_url_validate


class WebhookEvent(models.TextChoices):
    ITEM_CREATED = "item.created", "item.created"
    ITEM_DECIDED = "item.decided", "item.decided"
    ITEM_CANCELLED = "item.cancelled", "item.cancelled"
    # The worker ran the item's graph on from a decision (moderation.review.apply).
    ITEM_APPLIED = "item.applied", "item.applied"
    # Approval policies (moderation.policies): a counted vote that left the ask open, and
    # an item handed to its team's supervisors at a deadline.
    ITEM_VOTED = "item.voted", "item.voted"
    ITEM_ESCALATED = "item.escalated", "item.escalated"
    # The remote agent that submitted the item reported what it did with the decision.
    ITEM_OUTCOME = "item.outcome", "item.outcome"
    # Sent only by the admin's "send test ping"; an endpoint never subscribes to it.
    PING = "webhook.ping", "webhook.ping"


SUBSCRIBABLE_EVENTS = [
    WebhookEvent.ITEM_CREATED, WebhookEvent.ITEM_DECIDED, WebhookEvent.ITEM_CANCELLED, WebhookEvent.ITEM_APPLIED,
    WebhookEvent.ITEM_VOTED, WebhookEvent.ITEM_ESCALATED, WebhookEvent.ITEM_OUTCOME,
]


def webhook_secret_new() -> str:
    """A Standard Webhooks secret: ``whsec_`` and 32 random bytes in base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def webhook_msg_id_new() -> str:
    return f"msg_{uuid.uuid4().hex}"


def events_validate(value: object) -> None:
    if not isinstance(value, list) or not value:
        raise ValidationError("events must be a non-empty list of event types")
    unknown = [e for e in value if e not in SUBSCRIBABLE_EVENTS]
    if unknown:
        raise ValidationError(
            f"unknown event types {unknown!r}; choose from {', '.join(SUBSCRIBABLE_EVENTS)}"
        )


class WebhookEndpoint(models.Model):
    name = models.CharField(max_length=100, unique=True)
    url = models.URLField(max_length=2000, validators=[webhook_url_validate],
                          help_text="http:// or https:// URL that receives POSTed events; a public address, "
                                    "or one in WEBHOOK_ALLOWED_NETWORKS")
    secret = models.CharField(max_length=100, default=webhook_secret_new, editable=False)
    events = models.JSONField(default=list, validators=[events_validate])
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


class WebhookDelivery(models.Model):
    """One event for one endpoint: written in the transaction that made the event (the outbox)."""

    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=32, choices=WebhookEvent.choices)
    # The ``webhook-id`` header: the same on every retry, so receivers can de-duplicate.
    msg_id = models.CharField(max_length=40, unique=True, default=webhook_msg_id_new, editable=False)
    payload = models.JSONField()
    # Not a foreign key: deliveries outlive items (the race lab deletes its own).
    item_public_id = models.UUIDField(null=True, blank=True, db_index=True)
    # The event's place among its item's events; one is sent only after the one before it
    # (same item and endpoint) was delivered or failed.
    sequence = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    # When the next attempt is due; while an attempt runs, the end of its lease.
    next_attempt_at = models.DateTimeField()
    retry_until = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        verbose_name_plural = "webhook deliveries"
        indexes = [
            models.Index(fields=["endpoint", "item_public_id", "sequence"], name="delivery_item_order"),
            models.Index(fields=["status", "next_attempt_at"], name="delivery_due"),
        ]

    def __str__(self) -> str:
        return f"{self.event} → {self.endpoint_id} ({self.msg_id})"


class DeliveryAttempt(models.Model):
    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log")
    at = models.DateTimeField(auto_now_add=True)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField()
    error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["at"]
