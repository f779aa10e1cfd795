"""Teams, their members, and the votes cast on quorum items (see ``moderation.policies``)."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q


class OnDeadline(models.TextChoices):
    NOTHING = "", "Nothing (wait)"
    APPROVE = "approve", "Approve"
    REJECT = "reject", "Reject"
    ESCALATE = "escalate", "Escalate"


APPROVALS_MAX = 50


class Team(models.Model):
    """A group of moderators with their own items and their own approval policy.

    An item belongs to at most one team (``QueueItem.team``): named on submit, else the
    first team whose ``sources`` hold its source, else the first whose ``graphs`` hold its
    graph; an item of no team may be decided by any moderator, as before teams existed.
    The policy is copied onto each item when it is created (``QueueItem.policy``), so
    editing a team never changes the rules of a vote already under way.
    """

    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=100)
    approvals = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(APPROVALS_MAX)],
        help_text="Distinct moderators who must approve (1: the first decision settles the item).",
    )
    majority = models.BooleanField(default=False, help_text="Approve with more than half the team, instead of a fixed number.")
    veto = models.BooleanField(default=False, help_text="One rejection ends the vote.")
    deadline_seconds = models.PositiveIntegerField(null=True, blank=True, help_text="Default time an ask may wait.")
    on_deadline = models.CharField(max_length=16, choices=OnDeadline.choices, blank=True, default=OnDeadline.NOTHING)
    escalate_to = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    sources = models.JSONField(default=list, blank=True, help_text="Item sources that belong to this team.")
    graphs = models.JSONField(default=list, blank=True, help_text="Graphs whose items belong to this team.")
    allow_weaker_policies = models.BooleanField(
        default=False,
        help_text="Let a submitter's policy be weaker than this team's (fewer approvals, no veto, a deadline that "
        "approves sooner...). Off: a submitter may only make it stricter.",
    )
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="TeamMembership", related_name="teams")

    class Meta:
        app_label = "moderation"
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(condition=Q(approvals__gte=1, approvals__lte=APPROVALS_MAX), name="team_approvals_range"),
            models.CheckConstraint(
                condition=~Q(on_deadline=OnDeadline.ESCALATE) | Q(escalate_to__isnull=False),
                name="team_escalates_somewhere",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class TeamMembership(models.Model):
    """One moderator's membership of a team, from ``added_at`` until ``removed_at``.

    Removal stamps ``removed_at`` rather than deleting, under the row lock the guard also
    takes (``moderation.policies.teams``), so every vote can be checked against the moment
    its voter's membership ended.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="team_memberships")
    added_at = models.DateTimeField()
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "moderation"
        constraints = [
            models.UniqueConstraint(fields=["team", "user"], condition=Q(removed_at__isnull=True), name="one_live_membership"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} in {self.team_id}"


class VoteKind(models.TextChoices):
    APPROVE = "approve", "Approve"
    REJECT = "reject", "Reject"


class TallyWhy(models.TextChoices):
    """Why a quorum ask resolved: its tally's ``why``, written by the guard and read by the API's schema."""

    QUORUM = "quorum", "Enough approvals"
    VETO = "veto", "Vetoed"
    IMPOSSIBLE = "impossible", "Approval no longer possible"
    DEADLINE = "deadline", "The policy's default, when time ran out"


class Vote(models.Model):
    """A moderator's current vote on one ask of a quorum item; one per moderator.

    Changed in place until the ask resolves (the attempts log keeps every cast); written
    only by the guard, under the item's row lock.
    """

    ask = models.ForeignKey("moderation.ReviewAsk", on_delete=models.CASCADE, related_name="votes")
    voter = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    vote = models.CharField(max_length=16, choices=VoteKind.choices)
    note = models.TextField(blank=True, default="")
    reason = models.CharField(max_length=32, blank=True, default="")
    cast_at = models.DateTimeField()
    # The item's team when the vote was cast (an escalation moves the item, not the vote):
    # what the voter's membership is checked against (moderation.lab.history).
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.PROTECT, related_name="+")

    class Meta:
        app_label = "moderation"
        ordering = ["cast_at", "id"]
        constraints = [models.UniqueConstraint(fields=["ask", "voter"], name="one_vote_per_voter")]
        # The team page's agreement reads one team's votes of a period (moderation.records.teamstats).
        indexes = [models.Index(fields=["team", "cast_at"], name="vote_team_cast_idx")]

    def __str__(self) -> str:
        return f"{self.voter_id} {self.vote} on {self.ask_id}"
