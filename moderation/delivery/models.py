"""Webhook endpoints, their deliveries and each delivery's attempts, and the service clients
(``ApiClient``) whose endpoints and items they may be."""

import base64
import secrets
import uuid

from django.conf import settings
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

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
    WebhookEvent.ITEM_CREATED,
    WebhookEvent.ITEM_DECIDED,
    WebhookEvent.ITEM_CANCELLED,
    WebhookEvent.ITEM_APPLIED,
    WebhookEvent.ITEM_VOTED,
    WebhookEvent.ITEM_ESCALATED,
    WebhookEvent.ITEM_OUTCOME,
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
        raise ValidationError(f"unknown event types {unknown!r}; choose from {', '.join(SUBSCRIBABLE_EVENTS)}")


class WebhookEndpoint(models.Model):
    """Where events are POSTed. An operator's (no ``owner``) gets every item's events; an API
    client's own (``owner``, see ``moderation.delivery.endpoints``) only those of the items it submitted."""

    name = models.CharField(max_length=100)
    url = models.URLField(
        max_length=2000,
        validators=[webhook_url_validate],
        help_text="http:// or https:// URL that receives POSTed events; a public address, or one in WEBHOOK_ALLOWED_NETWORKS",
    )
    secret = models.CharField(max_length=100, default=webhook_secret_new, editable=False)
    events = models.JSONField(default=list, validators=[events_validate])
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    owner = models.ForeignKey(
        "moderation.ApiClient",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="webhook_endpoints",
        help_text="the API client whose items' events it receives; empty: an operator's endpoint, every item's events",
    )

    class Meta:
        constraints = [
            # A client names its endpoints in its own namespace: one client cannot learn another's names.
            models.UniqueConstraint(fields=["name"], condition=Q(owner__isnull=True), name="webhook_endpoint_name_unique"),
            models.UniqueConstraint(
                fields=["owner", "name"], condition=Q(owner__isnull=False), name="webhook_endpoint_name_unique_per_client"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.owner})" if self.owner_id else self.name


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


# --- Service clients (the /api/v1 HTTP API) ----------------------------------------


class ApiScope(models.TextChoices):
    ITEMS_WRITE = "items:write", "Submit and cancel items"
    ITEMS_READ = "items:read", "Read items and their decisions"


class ApiClient(models.Model):
    """A system that talks to /api/v1 (see moderation.api.clients).

    Acts through a service account of its own (``user``: unusable password, no groups)
    so whatever must name a user (the attempts log of a cancel) names the client.
    """

    # A username's characters: the service account is named ``api.<name>``.
    name = models.CharField(max_length=100, unique=True, validators=[UnicodeUsernameValidator()])
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="api_client", editable=False)
    scopes = models.JSONField(default=list)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name

    def has_scope(self, scope: str) -> bool:
        return self.is_active and scope in self.scopes


class ApiToken(models.Model):
    """One bearer token of a client, stored as the SHA-256 of the token (never the token).

    Tokens are 32 random bytes, so a plain hash is enough: nothing to brute-force.
    """

    client = models.ForeignKey(ApiClient, on_delete=models.CASCADE, related_name="tokens")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    # The first characters, so an operator can tell tokens apart in the admin.
    prefix = models.CharField(max_length=12, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.client})"
