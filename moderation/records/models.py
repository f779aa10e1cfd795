"""What the guard writes and reads besides the item (``moderation.records``): the attempts log and
the audit ledger, outcome reports, reason codes, counters, claims, relayed events and worker beats."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from moderation.items.models import NO_NUL, ItemStatus, QueueItem, Requested


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
        max_length=64,
        blank=True,
        default="",
        help_text='A graph name (asks submitted over the API run under "ask"); empty: the team\'s other graphs.',
    )
    offer = models.CharField(
        max_length=8,
        choices=ReasonOffer.choices,
        default=ReasonOffer.ALL,
        help_text="The codes the reject form offers and a reject may name.",
    )
    codes = models.JSONField(default=list, blank=True, help_text='With "only the codes listed": those codes.')
    required = models.BooleanField(
        default=False,
        help_text="A reject must name one of the codes; its code then goes in front of the message the graph receives.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "graph"], name="reason_rule_one_per_team_graph"),
            models.CheckConstraint(condition=~Q(offer=ReasonOffer.NONE, required=True), name="reason_rule_none_not_required"),
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
    winner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
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
            models.UniqueConstraint(fields=["ask"], condition=Q(outcome=AttemptOutcome.WON), name="one_winning_attempt_per_ask"),
            # Attempts from before asks existed (ask is null): still one winner per item.
            models.UniqueConstraint(
                fields=["item"],
                condition=Q(outcome=AttemptOutcome.WON, ask__isnull=True),
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


class RelayedEvent(models.Model):
    """A live event made in a process without sockets, for the server to pass on.

    Only without Redis; see ``moderation.records.relay``. Kept a minute, then pruned.
    """

    # [[group, message], ...]: what the process would have sent to the channel layer.
    sends = models.JSONField()
    made_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["made_at"], name="relayedevent_made_at_idx")]


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
    reported_by = models.ForeignKey("ApiClient", on_delete=models.PROTECT, related_name="+")
    reported_at = models.DateTimeField()
    key_id = models.CharField(max_length=16)
    mac = models.CharField(max_length=64)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(status__in=OutcomeStatus.values), name="outcome_status_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.item_id}: {self.status}"


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


class LabAccount(models.Model):
    """Marks a user the race lab created for one run (moderation.lab.runner).

    Its table belongs to this app's migrations, which run whether the lab is installed or not,
    so the model is here, not in the lab: the lab reads it, nothing else does.

    The lab's clean-up deletes only users with this row, never one picked by name, so a
    real account can never be taken for a lab reviewer, or be changed or removed by the lab.
    """

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="lab_account")
    run = models.UUIDField(editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"lab reviewer {self.user_id} of run {self.run}"
