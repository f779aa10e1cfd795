import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.validators import ProhibitNullCharactersValidator
from django.db import models
from django.db.models import Q


class Decision(models.TextChoices):
    """What a reviewer asks for."""

    APPROVE = "approve", "Approve"
    REJECT = "reject", "Reject"


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
    ItemStatus.APPROVED, ItemStatus.REJECTED, ItemStatus.WITHDRAWN, ItemStatus.EDITED, ItemStatus.ANSWERED,
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
        value = queue_rank(
            priority=model_instance.priority, risk=model_instance.risk, created_at=model_instance.created_at
        )
        setattr(model_instance, self.attname, value)
        return value

    def deconstruct(self) -> tuple[str, str, list[Any], dict[str, Any]]:
        # The column is a plain bigint and the rank is computed in Python: migrations need not import this class.
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.BigIntegerField", args, kwargs

STATUS_FOR_DECISION: dict[str, ItemStatus] = {
    Requested.APPROVE: ItemStatus.APPROVED, Requested.REJECT: ItemStatus.REJECTED, Requested.WITHDRAW: ItemStatus.WITHDRAWN,
    Requested.EDIT: ItemStatus.EDITED, Requested.RESPOND: ItemStatus.ANSWERED, Requested.MIXED: ItemStatus.DECIDED,
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
    apply_state = models.CharField(
        max_length=16, choices=ApplyState.choices, blank=True, default=ApplyState.IDLE, editable=False
    )
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
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="requested_items",
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
            models.Index(fields=["team", "created_at"], condition=Q(status="pending", is_lab=False),
                         name="item_pending_team_age_idx"),
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
                    Q(status__in=[*UNDECIDED_STATUSES, ItemStatus.REFUSED], decided_by__isnull=True,
                      decided_at__isnull=True)
                    | Q(status__in=DECIDED_STATUSES, decided_by__isnull=False, decided_at__isnull=False)
                ),
                name="item_decided_iff_winner",
            ),
            models.UniqueConstraint(
                fields=["submitted_by", "external_id"], condition=Q(external_id__isnull=False),
                name="item_external_id_unique_per_client",
            ),
            models.UniqueConstraint(
                fields=["submitted_by", "idempotency_key"], condition=Q(idempotency_key__isnull=False),
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
            name for name, (low, high) in RISK_BANDS.items()
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


class ReasonKind(models.TextChoices):
    CONTENT = "content", "Content (posts, comments)"
    TOOL_CALL = "tool_call", "An agent's tool calls"
    ANY = "any", "Both"


class ReasonCode(models.Model):
    """Why an item was rejected, from a list the admin keeps (``moderation.records.reasons``).

    Decisions store the code, not a foreign key: retiring a code (``active`` off) keeps
    every decision that used it readable, and the signed attempts log never points at a
    row that can change.
    """

    code = models.SlugField(max_length=32, unique=True)
    label = models.CharField(max_length=100)
    active = models.BooleanField(default=True)
    ordering = models.PositiveSmallIntegerField(default=0)
    # Which items a rule of "every active code" offers it for: content, or an agent's tool calls.
    kind = models.CharField(max_length=16, choices=ReasonKind.choices, default=ReasonKind.CONTENT)

    class Meta:
        ordering = ["ordering", "code"]

    def __str__(self) -> str:
        return f"{self.code} ({self.label})"


class ReasonOffer(models.TextChoices):
    ALL = "all", "Every active code"
    LISTED = "listed", "Only the codes listed"
    NONE = "none", "No codes"


class ReasonRule(models.Model):
    """Which reason codes a reject may name, and whether it must, for one team's items
    (``graph`` empty) or one team's items of one graph (``moderation.records.reasons``)."""

    team = models.ForeignKey("Team", on_delete=models.CASCADE, related_name="reason_rules")
    graph = models.CharField(
        max_length=64, blank=True, default="",
        help_text="A graph name (asks submitted over the API run under \"ask\"); empty: the team's other graphs.",
    )
    offer = models.CharField(max_length=8, choices=ReasonOffer.choices, default=ReasonOffer.ALL,
                             help_text="The codes the reject form offers and a reject may name.")
    codes = models.JSONField(default=list, blank=True, help_text="With \"only the codes listed\": those codes.")
    required = models.BooleanField(default=False, help_text="A reject must name one of the codes; its code then "
                                                            "goes in front of the message the graph receives.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "graph"], name="reason_rule_one_per_team_graph"),
            models.CheckConstraint(condition=~Q(offer=ReasonOffer.NONE, required=True),
                                   name="reason_rule_none_not_required"),
            models.CheckConstraint(condition=Q(offer__in=ReasonOffer.values), name="reason_rule_offer_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.graph or '*'}: {self.offer}{' required' if self.required else ''}"


class AttemptOrigin(models.TextChoices):
    """Where an attempt came from."""

    DASHBOARD = "dashboard", "Dashboard"
    API = "api", "API"
    LAB = "lab", "Race lab"
    DEADLINE = "deadline", "Deadline"


class AttemptOutcome(models.TextChoices):
    WON = "won", "Won"
    LOST = "lost", "Lost"
    INVALID = "invalid", "Rejected as invalid"
    # A quorum vote counted without resolving its ask (moderation.policies).
    VOTED = "voted", "Voted"


class AppendOnlyError(Exception):
    pass


class AppendOnlyQuerySet(models.QuerySet):
    """Refuses bulk edits, which never call a model's save() or delete().

    The database refuses them too (triggers from migration 0007); this says so before
    the query is sent. The one sanctioned removal is ``moderation.records.audit.audit_items_purge``.
    """

    def update(self, **kwargs):
        raise AppendOnlyError(f"{self.model._meta.verbose_name_plural} are append-only")

    def delete(self):
        raise AppendOnlyError(f"{self.model._meta.verbose_name_plural} are append-only")

    def bulk_update(self, objs, fields, batch_size=None):
        raise AppendOnlyError(f"{self.model._meta.verbose_name_plural} are append-only")


class AppendOnlyModel(models.Model):
    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise AppendOnlyError(f"{self._meta.verbose_name_plural} are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError(f"{self._meta.verbose_name_plural} are append-only")


class DecisionAttempt(AppendOnlyModel):
    """One reviewer's attempt to decide an item, whatever came of it.

    Append-only (here, in the queryset and in database triggers) and HMAC-chained per
    item (``seq``, ``prev_hash``, ``entry_hash`` signed with key ``key_id``; the item
    row holds the chain's head), with every entry also in the global ``AuditLedgerEntry``
    chain, so ``manage.py verify_audit`` finds any edit, deletion, reordering or
    truncation. See ``moderation.records.audit``.
    """

    item = models.ForeignKey(QueueItem, on_delete=models.PROTECT, related_name="attempts")
    # The interrupt decided (null only for attempts recorded before asks existed).
    ask = models.ForeignKey("ReviewAsk", null=True, blank=True, on_delete=models.PROTECT, related_name="attempts")
    # The LangChain decisions this attempt asked for, one per action of its ask.
    decisions = models.JSONField(default=list, blank=True)
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="attempts")
    requested = models.CharField(max_length=16, choices=Requested.choices)
    note = models.TextField(blank=True, default="", validators=[NO_NUL])
    outcome = models.CharField(max_length=16, choices=AttemptOutcome.choices)
    # The item's winner at the moment this attempt was judged (the reviewer, if it won).
    winner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    winner_status = models.CharField(max_length=16, choices=ItemStatus.choices, blank=True, default="")
    winner_decided_at = models.DateTimeField(null=True, blank=True)
    detail = models.CharField(max_length=300, blank=True, default="")
    # The reviewer's reason code for a reject ("" for none, and for attempts from before codes).
    reason = models.CharField(max_length=32, blank=True, default="")
    origin = models.CharField(max_length=16, choices=AttemptOrigin.choices, blank=True, default="")
    requested_at = models.DateTimeField()
    recorded_at = models.DateTimeField()
    seq = models.PositiveIntegerField()
    prev_hash = models.CharField(max_length=64, blank=True, default="")
    entry_hash = models.CharField(max_length=64)
    key_id = models.CharField(max_length=16)
    # SHA-256 of the item's title, body and source when this attempt was judged, so a
    # later edit of what was decided shows.
    content_digest = models.CharField(max_length=64)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["item", "seq"], name="attempt_seq_unique_per_item"),
            models.UniqueConstraint(
                fields=["ask"], condition=Q(outcome=AttemptOutcome.WON), name="one_winning_attempt_per_ask"
            ),
            # Attempts from before asks existed (ask is null): still one winner per item.
            models.UniqueConstraint(
                fields=["item"], condition=Q(outcome=AttemptOutcome.WON, ask__isnull=True),
                name="one_winning_legacy_attempt_per_item",
            ),
            models.CheckConstraint(
                condition=Q(outcome__in=[AttemptOutcome.INVALID, AttemptOutcome.VOTED]) | Q(winner__isnull=False),
                name="attempt_names_winner",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.reviewer} {self.requested} {self.item_id}: {self.outcome}"


class LedgerKind(models.TextChoices):
    ATTEMPT = "attempt", "Attempt"
    # A sanctioned removal of an item and its log (race-lab clean-up).
    PURGE = "purge", "Purge"
    # A remote agent's report of what it did with the item's decision (``OutcomeReport``).
    OUTCOME = "outcome", "Outcome"


class AuditLedgerEntry(AppendOnlyModel):
    """The global anchor: every attempt (and every purge) in one HMAC chain across items.

    Holds item ids by value, not as foreign keys, so it outlives a deleted item and
    names it. See ``moderation.records.audit`` for how appends are serialized.
    """

    seq = models.PositiveBigIntegerField(unique=True)
    kind = models.CharField(max_length=16, choices=LedgerKind.choices)
    item_public_id = models.UUIDField()
    attempt_seq = models.PositiveIntegerField(default=0)
    entry_hash = models.CharField(max_length=64, blank=True, default="")
    recorded_at = models.DateTimeField()
    prev_mac = models.CharField(max_length=64, blank=True, default="")
    mac = models.CharField(max_length=64)
    key_id = models.CharField(max_length=16)

    class Meta:
        ordering = ["seq"]
        verbose_name_plural = "audit ledger entries"

    def __str__(self) -> str:
        return f"{self.seq} {self.kind} {self.item_public_id} #{self.attempt_seq}"


class LabAccount(models.Model):
    """Marks a user the race lab created for one run (moderation.lab.runner).

    The lab's clean-up deletes only users with this row, never one picked by name, so a
    real account can never be taken for a lab reviewer, or be changed or removed by the lab.
    """

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="lab_account")
    run = models.UUIDField(editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"lab reviewer {self.user_id} of run {self.run}"


class Presence(models.Model):
    """One open item page (one websocket) and when it last proved it is alive.

    See ``moderation.live.presence`` for why this lives in the database.
    """

    channel_name = models.CharField(max_length=200, unique=True)
    item = models.ForeignKey(QueueItem, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    last_seen = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["last_seen"], name="presence_last_seen_idx")]

    def __str__(self) -> str:
        return f"{self.user_id} on {self.item_id} at {self.last_seen:%H:%M:%S}"


class RelayedEvent(models.Model):
    """A live event made in a process without sockets, for the server to pass on.

    Only without Redis; see ``moderation.records.relay``. Kept a minute, then pruned.
    """

    # [[group, message], ...]: what the process would have sent to the channel layer.
    sends = models.JSONField()
    made_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["made_at"], name="relayedevent_made_at_idx")]


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
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="api_client", editable=False
    )
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


# --- Counts -----------------------------------------------------------------------
# Written only by moderation.records.counts, in the transaction of the change they count; read by
# summing a handful of rows, so a count costs the same at ten items as at a million.


class QueueCounter(models.Model):
    """Items of one graph in one status, split over ``SHARDS`` rows (``n`` may go below 0 on one shard; the sum is exact)."""

    graph = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=ItemStatus.choices)
    shard = models.PositiveSmallIntegerField()
    n = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["graph", "status", "shard"], name="queue_counter_key")]


class DecidedDayCounter(models.Model):
    """Items of one graph whose ``decided_at`` falls on ``day`` (in ``TIME_ZONE``), split over shards."""

    day = models.DateField()
    graph = models.CharField(max_length=64)
    shard = models.PositiveSmallIntegerField()
    n = models.BigIntegerField(default=0)

    class Meta:
        # ``day`` first: the read asks for one day.
        constraints = [models.UniqueConstraint(fields=["day", "graph", "shard"], name="decided_day_counter_key")]


class PendingCounter(models.Model):
    """Pending items of one team (``team_key`` 0: no team), graph and priority band, split over shards (read by /metrics)."""

    team_key = models.PositiveIntegerField()
    graph = models.CharField(max_length=64)
    band = models.CharField(max_length=8)
    shard = models.PositiveSmallIntegerField()
    n = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team_key", "graph", "band", "shard"], name="pending_counter_key")]


class TeamDayCounter(models.Model):
    """One day's tally of one team (``team_key`` 0: no team) for the team page (``moderation.records.teamstats``).

    ``kind``: ``decided`` (``key``: the winner's user id), ``wait`` (``key``: the upper bound in
    seconds of the time-to-decision bucket), ``lost_race``, ``deadline_miss``, ``escalation``.
    """

    team_key = models.PositiveIntegerField()
    day = models.DateField()
    kind = models.CharField(max_length=16)
    key = models.CharField(max_length=32, blank=True, default="")
    shard = models.PositiveSmallIntegerField()
    n = models.BigIntegerField(default=0)

    class Meta:
        # Team first: the page reads one team's days.
        constraints = [models.UniqueConstraint(fields=["team_key", "day", "kind", "key", "shard"], name="team_day_counter_key")]


# --- Claims (their rules: moderation.records.claims) -------------------------------
class ItemClaim(models.Model):
    """The one moderator currently reading an item, until ``expires_at``."""

    item = models.OneToOneField("moderation.QueueItem", on_delete=models.CASCADE, primary_key=True, related_name="claim")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    # When the holder last opened the item; a page's goodbye releases only claims taken before it opened.
    taken_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.item_id} claimed by {self.user_id} until {self.expires_at:%H:%M:%S}"


# --- Webhooks ---------------------------------------------------------------------
# Defined in moderation.delivery (below the guard); imported here so they belong to this app.
from moderation.delivery.models import DeliveryAttempt, WebhookDelivery, WebhookEndpoint  # noqa: E402, F401

# --- Approval policies -----------------------------------------------------------
# Defined in moderation.policies (below the guard); imported here so they belong to this app.
from moderation.policies.models import Team, TeamMembership, Vote  # noqa: E402, F401


class OutcomeStatus(models.TextChoices):
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


OUTCOME_MESSAGE_MAX_LENGTH = 500


class OutcomeReport(AppendOnlyModel):
    """What the remote agent that submitted an item reported it did with the decision
    (``POST /api/v1/items/{id}/outcome``, ``moderation.review.outcomes``).

    One per item, written once (the first report stands), signed (``mac`` with key
    ``key_id``) and entered in the global audit ledger, so ``verify_audit`` finds an
    edited or deleted report (``moderation.records.audit``).
    """

    item = models.OneToOneField(QueueItem, on_delete=models.PROTECT, related_name="outcome_report")
    status = models.CharField(max_length=8, choices=OutcomeStatus.choices)
    message = models.CharField(max_length=OUTCOME_MESSAGE_MAX_LENGTH, blank=True, default="", validators=[NO_NUL])
    reported_by = models.ForeignKey(ApiClient, on_delete=models.PROTECT, related_name="+")
    reported_at = models.DateTimeField()
    key_id = models.CharField(max_length=16)
    mac = models.CharField(max_length=64)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(status__in=OutcomeStatus.values), name="outcome_status_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.item_id}: {self.status}"


# --- LangGraph deployments (moderation.review.deployments) -----------------------
class Deployment(models.Model):
    """A LangGraph Server deployment whose interrupted threads reviewqueue reviews.

    Its items are submitted by its own service client (``client``: no token, so nobody
    can call the API as it), keyed by ``<thread id>:<interrupt id>`` as their
    ``external_id``: the database's one-item-per-key constraint
    (``item_external_id_unique_per_client``) is what makes a webhook and a sweep, or two
    workers, discovering one interrupt create one item.
    """

    name = models.SlugField(max_length=64, unique=True)
    url = models.URLField(max_length=500)
    # Sent as x-api-key; never shown back (the admin and the commands only say whether one is set).
    api_key = models.CharField(max_length=500, blank=True, default="", validators=[NO_NUL])
    # {graph or assistant id: {"match": "graph_id" | "assistant_id", "team": slug or null, "policy": {...}}}:
    # what is reviewed (threads whose metadata has that key and value), and who decides it.
    graphs = models.JSONField(default=dict)
    client = models.OneToOneField("ApiClient", on_delete=models.PROTECT, related_name="deployment", editable=False)
    # SHA-256 of the secret in its webhook URL (shown once, at registration).
    webhook_digest = models.CharField(max_length=64, editable=False)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # When the last sweep of its threads finished, and what went wrong with it, if anything.
    swept_at = models.DateTimeField(null=True, blank=True, editable=False)
    sweep_error = models.TextField(blank=True, default="", editable=False)

    def __str__(self) -> str:
        return f"{self.name} ({self.url})"


class DeploymentInterrupt(models.Model):
    """An interrupt of a deployment's thread, and the item that asks about it (``moderation.review.remote``).

    Written with the item's first asks (discovery) and, for a later round, before the item's
    own thread asks it: the database allows one item per interrupt, so a sweep racing the
    apply that opens a round cannot make a second item of the round's interrupts.
    """

    deployment = models.ForeignKey(Deployment, on_delete=models.PROTECT, related_name="interrupts")
    thread_id = models.CharField(max_length=128)
    interrupt_id = models.CharField(max_length=64)
    # Purged with its item (``audit_items_purge``).
    item = models.ForeignKey(QueueItem, on_delete=models.CASCADE, related_name="deployment_interrupts")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["deployment", "thread_id", "interrupt_id"],
                                    name="deployment_interrupt_asked_once"),
        ]

    def __str__(self) -> str:
        return f"{self.thread_id}:{self.interrupt_id} -> item {self.item_id}"


class WorkerBeat(models.Model):
    """A task worker's heartbeat (``manage.py db_worker``), written every ``WORKER_HEARTBEAT_INTERVAL`` seconds.

    What /readyz, the staff banner and the ``reviewqueue_workers_alive`` series read
    (``moderation.records.workers``). A worker stopped cleanly deletes its row; a killed
    one's row stops moving and is pruned after a day.
    """

    worker_id = models.CharField(max_length=200, unique=True)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    # Where its Prometheus series are served (0: not served).
    metrics_port = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField()
    beat_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.worker_id} ({self.host}:{self.pid}) at {self.beat_at:%H:%M:%S}"
