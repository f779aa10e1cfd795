"""The item and its asks: the rows every layer above reads and writes, and the enums of their states.

An item (``QueueItem``) is one piece of content or one agent's proposed action; each interrupt its
graph raises is a ``ReviewAsk``. What the guard records about them lives in ``moderation.records``.
"""

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.validators import ProhibitNullCharactersValidator
from django.db import models
from django.db.models import Q


class Requested(models.TextChoices):
    """What an attempt asks for: a moderator's decision (LangChain's four types, or
    ``mixed`` for an ask of several actions decided differently), or the submitter's withdrawal."""

    APPROVE = "approve", "Approve"
    REJECT = "reject", "Reject"
    EDIT = "edit", "Edit"
    RESPOND = "respond", "Respond"
    MIXED = "mixed", "Mixed"
    WITHDRAW = "withdraw", "Withdraw"


class ItemStatus(models.TextChoices):
    # Accepted, its graph not yet run to its first ask: a task worker starts it
    # (moderation.review.starts); nobody can decide it until then.
    STARTING = "starting", "Starting"
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    # Its submitter took it back; settled like a decision, with the withdrawing user as winner.
    WITHDRAWN = "withdrawn", "Withdrawn"
    EDITED = "edited", "Edited"
    ANSWERED = "answered", "Answered"
    # Several actions of one ask, decided differently (see each ask's decisions).
    DECIDED = "decided", "Decided"
    # The graph accepted a decision but could not finish; an operator runs `recover`.
    NEEDS_ATTENTION = "needs_attention", "Needs attention"
    # Accepted queued, then its graph raised at its start (the submitter's input, as a
    # 422 is for a start "now"): final, no winner, nothing to decide (moderation.review.starts).
    REFUSED = "refused", "Refused"


# Settled: the item has a winner and a time, and every later attempt loses to it.
DECIDED_STATUSES = (
    ItemStatus.APPROVED,
    ItemStatus.REJECTED,
    ItemStatus.WITHDRAWN,
    ItemStatus.EDITED,
    ItemStatus.ANSWERED,
    ItemStatus.DECIDED,
)


UNDECIDED_STATUSES = (ItemStatus.STARTING, ItemStatus.PENDING, ItemStatus.NEEDS_ATTENTION)


# PostgreSQL text cannot hold NUL and SQLite can: refusing it everywhere keeps the two
# backends alike and stops a NUL from failing a write after the graph was resumed.
NO_NUL = ProhibitNullCharactersValidator()


PRIORITY_MIN, PRIORITY_MAX = -1000, 1000

# The queue's priority order (README, "Using the dashboard"): an item is served as if it
# had arrived earlier by these amounts. One priority point outweighs the whole risk scale
# (100 points, 5 h), so a submitter's priority always beats the pre-screen; within a
# priority, a risk-100 item overtakes risk-0 items that arrived up to 5 h before it, and
# an item that has waited longer than that gap is served first again (aging).
RANK_PRIORITY_STEP = timedelta(hours=6)
RANK_RISK_STEP = timedelta(minutes=3)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def queue_rank(*, priority: int, risk: int, created_at: datetime) -> int:
    """When the item counts as having arrived, in microseconds since 1970: smallest first.

    Fixed at creation: waiting time needs no rewrite, because every item ages at the same
    rate and the order of ``created - head start`` is the order of ``waited + head start``.
    Whole microseconds keep it exact, so equal ranks fall back to id (the older item).
    """
    head_start = priority * RANK_PRIORITY_STEP + risk * RANK_RISK_STEP
    return (created_at - head_start - _EPOCH) // _MICROSECOND


class QueueRankField(models.BigIntegerField):
    """``queue_rank`` of its row, recomputed on every save (``bulk_create`` included), so no
    path that writes an item's priority or risk can leave its place in the queue stale."""

    def pre_save(self, model_instance: models.Model, add: bool) -> int:
        value = queue_rank(priority=model_instance.priority, risk=model_instance.risk, created_at=model_instance.created_at)
        setattr(model_instance, self.attname, value)
        return value

    def deconstruct(self) -> tuple[str, str, list[Any], dict[str, Any]]:
        # The column is a plain bigint and the rank is computed in Python: migrations need not import this class.
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.BigIntegerField", args, kwargs


STATUS_FOR_DECISION: dict[str, ItemStatus] = {
    Requested.APPROVE: ItemStatus.APPROVED,
    Requested.REJECT: ItemStatus.REJECTED,
    Requested.WITHDRAW: ItemStatus.WITHDRAWN,
    Requested.EDIT: ItemStatus.EDITED,
    Requested.RESPOND: ItemStatus.ANSWERED,
    Requested.MIXED: ItemStatus.DECIDED,
}
DECISION_FOR_STATUS = {status: requested for requested, status in STATUS_FOR_DECISION.items()}


class ApplyState(models.TextChoices):
    IDLE = "", "Idle"
    # A decision is recorded and its resume is queued for the worker.
    APPLYING = "applying", "Applying"
    # The graph failed after the decision; ``recover`` (or a later retry) runs it on.
    FAILED = "failed", "Failed"


# Risk bands as the queue's legend and filter name them: [low, high) bounds, None for open.
RISK_BANDS = {"low": (None, 20), "medium": (20, 50), "high": (50, None)}


class QueueItem(models.Model):
    """A piece of content (or an agent's proposed action) and the graph that asks about it.

    Its LangGraph run (the graph ``graph`` names in ``REVIEWQUEUE_GRAPHS``) lives in the
    checkpointer under ``thread_id``. Each interrupt it raises is a ``ReviewAsk``; the
    item is pending while one is open, and its ``status`` / ``decided_by`` are those of
    the latest decision that left no ask open. ``apply_state`` tells whether the worker
    has yet run the graph on from that decision (``moderation.review.apply``).
    """

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    title = models.CharField(max_length=200, validators=[NO_NUL])
    body = models.TextField(validators=[NO_NUL])
    source = models.CharField(max_length=100, validators=[NO_NUL])
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    status = models.CharField(max_length=16, choices=ItemStatus.choices, default=ItemStatus.PENDING)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="decided_items"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True, default="", validators=[NO_NUL])
    thread_id = models.CharField(max_length=64, unique=True, editable=False)
    review_request = models.JSONField(default=dict, blank=True)
    graph = models.CharField(max_length=64, default="moderation", editable=False)
    # Merged over {item_id, title, body, source} as the graph's start state.
    graph_input = models.JSONField(default=dict, blank=True, editable=False)
    # Copied from the graph's state at start (the moderation pre-screen), for the queue.
    risk = models.SmallIntegerField(default=0, editable=False)
    flags = models.JSONField(default=list, blank=True, editable=False)
    apply_state = models.CharField(max_length=16, choices=ApplyState.choices, blank=True, default=ApplyState.IDLE, editable=False)
    # What the graph did after the latest decision: finished, asked again, or failed.
    applied_result = models.JSONField(default=dict, blank=True, editable=False)
    attention = models.TextField(blank=True, default="")
    # Head of this item's keyed attempts chain, written only by moderation.records.audit.
    attempt_count = models.PositiveIntegerField(default=0)
    audit_head = models.CharField(max_length=64, blank=True, default="")
    # A race-lab item (moderation.lab): hidden from the queue and deleted, attempts and all,
    # by the lab's clean-up. Only the lab sets it (items.lab_item_create); no form, admin
    # or command can, so no real item can be made to look like one.
    is_lab = models.BooleanField(default=False, editable=False)
    # Set by the /api/v1 submit (moderation.review.submissions); see "Service clients" below.
    external_id = models.CharField(max_length=200, null=True, blank=True, validators=[NO_NUL])
    metadata = models.JSONField(default=dict, blank=True)
    priority = models.SmallIntegerField(default=0)
    submitted_by = models.ForeignKey(
        "ApiClient", null=True, blank=True, on_delete=models.PROTECT, related_name="items", editable=False
    )
    idempotency_key = models.CharField(max_length=200, null=True, blank=True, editable=False, validators=[NO_NUL])
    # SHA-256 of what was submitted under the key: a retry with other content is refused.
    submission_digest = models.CharField(max_length=64, blank=True, default="", editable=False)
    # After created_at, priority and risk: its pre_save reads them once they are final.
    rank = QueueRankField(default=0, editable=False)
    # Approval policy (moderation.policies): the team whose moderators decide it (none: any
    # moderator), the rules copied from the team or the submit at creation, and the
    # person it was requested by, who may never decide it (four eyes).
    team = models.ForeignKey("Team", null=True, blank=True, on_delete=models.PROTECT, related_name="items", editable=False)
    policy = models.JSONField(default=dict, blank=True, editable=False)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="requested_items",
        editable=False,
    )
    escalated_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            # ``is_lab`` is in both indexes because every queue read excludes race-lab items:
            # counts and deep pages then never visit the table rows they skip.
            models.Index(fields=["status", "created_at", "id", "is_lab"], name="item_status_created_lab_idx"),
            models.Index(fields=["decided_at", "is_lab"], name="item_decided_at_lab_idx"),
            # The queue's default (priority) order, walked by cursor; oldest/newest-first walk the first one.
            models.Index(fields=["status", "is_lab", "rank", "id"], name="item_status_lab_rank_idx"),
            # /metrics' oldest pending item of each team: one seek per team; pending rows only.
            models.Index(
                fields=["team", "created_at"], condition=Q(status="pending", is_lab=False), name="item_pending_team_age_idx"
            ),
        ]
        permissions = [
            ("decide_item", "Can approve or reject queue items"),
            ("supervise_teams", "Can decide the items of every team"),
            ("lead_team", "Can see the team page (/team/) of the teams they are a member of"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=ItemStatus.values),
                name="item_status_valid",
            ),
            models.CheckConstraint(
                condition=(
                    Q(status__in=[*UNDECIDED_STATUSES, ItemStatus.REFUSED], decided_by__isnull=True, decided_at__isnull=True)
                    | Q(status__in=DECIDED_STATUSES, decided_by__isnull=False, decided_at__isnull=False)
                ),
                name="item_decided_iff_winner",
            ),
            models.UniqueConstraint(
                fields=["submitted_by", "external_id"],
                condition=Q(external_id__isnull=False),
                name="item_external_id_unique_per_client",
            ),
            models.UniqueConstraint(
                fields=["submitted_by", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="item_idempotency_key_unique_per_client",
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=PRIORITY_MIN, priority__lte=PRIORITY_MAX), name="item_priority_range"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.title} ({self.status})"

    @property
    def risk_band(self) -> str:
        return next(
            name
            for name, (low, high) in RISK_BANDS.items()
            if (low is None or self.risk >= low) and (high is None or self.risk < high)
        )

    @property
    def is_pending(self) -> bool:
        return self.status == ItemStatus.PENDING

    @property
    def is_decided(self) -> bool:
        return self.status in DECIDED_STATUSES


class AskStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DECIDED = "decided", "Decided"
    # Its item was withdrawn: answered with a rejection by the withdrawing account.
    WITHDRAWN = "withdrawn", "Withdrawn"


class ReviewAsk(models.Model):
    """One interrupt of an item's graph, identified by LangGraph's ``Interrupt.id``.

    ``payload`` is the ask normalised to LangChain's HITL request
    (``moderation.graphs.asks``). Decided once: the database allows one winning attempt
    per ask, and the row is written only under its item's row lock. ``applied_at`` is
    set by the worker once the graph has taken the decision.
    """

    item = models.ForeignKey(QueueItem, on_delete=models.PROTECT, related_name="asks")
    interrupt_id = models.CharField(max_length=64)
    round = models.PositiveIntegerField(default=1)
    position = models.PositiveSmallIntegerField(default=0)
    payload = models.JSONField()
    status = models.CharField(max_length=16, choices=AskStatus.choices, default=AskStatus.PENDING)
    decisions = models.JSONField(default=list, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="decided_asks"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True, default="", validators=[NO_NUL])
    # The winner's ReasonCode.code for a reject (kept as text: a code retired later still reads).
    reason = models.CharField(max_length=32, blank=True, default="")
    applied_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # When the task worker settles or escalates it (moderation.review.deadlines); null: it waits.
    deadline_at = models.DateTimeField(null=True, blank=True)
    # A quorum ask's votes when it resolved, as the graph was resumed with them.
    tally = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["round", "position", "id"]
        constraints = [
            models.UniqueConstraint(fields=["item", "interrupt_id"], name="ask_interrupt_unique_per_item"),
            models.CheckConstraint(
                condition=(
                    Q(status=AskStatus.PENDING, decided_by__isnull=True, decided_at__isnull=True, applied_at__isnull=True)
                    | Q(~Q(status=AskStatus.PENDING), decided_by__isnull=False, decided_at__isnull=False)
                ),
                name="ask_decided_iff_winner",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "applied_at"], name="ask_unapplied_idx"),
            models.Index(fields=["status", "deadline_at"], name="ask_deadline_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.item_id}/{self.interrupt_id} ({self.status})"

    @property
    def is_pending(self) -> bool:
        return self.status == AskStatus.PENDING
