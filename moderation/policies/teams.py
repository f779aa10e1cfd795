"""Who may decide an item: its team's moderators (and supervisors everywhere), never its requester.

Memberships change only through ``team_member_add`` / ``team_member_remove``, and the
guard reads a voter's membership with ``member_lock`` under the item's row lock, taking
the membership row's lock too (``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite's
IMMEDIATE transactions serialize all writers). A removal and a vote therefore commit in
one order: a vote judged first is counted and the removal waits for it; a vote judged
after the removal committed is refused. Never half of each.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Permission
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from moderation.models import AskStatus, QueueItem, ReviewAsk
from moderation.policies.models import Team, TeamMembership
from moderation.policies.rules import Policy, PolicyInvalid, policy_parse, policy_satisfiable_check, tally_build

SUPERVISE_PERMISSION = "moderation.supervise_teams"
DECIDE_CODENAME = "decide_item"


class NotAMember(Exception):
    """The user may not decide this item (not in its team, or its requester)."""


def user_is_supervisor(*, user: AbstractBaseUser) -> bool:
    return bool(user.is_active and user.has_perm(SUPERVISE_PERMISSION))


def _deciders() -> QuerySet:
    """Active users holding the decide permission (through a group, directly, or as superuser)."""
    perm = Permission.objects.filter(codename=DECIDE_CODENAME, content_type__app_label="moderation")
    return get_user_model().objects.filter(
        Q(is_superuser=True) | Q(groups__permissions__in=perm) | Q(user_permissions__in=perm), is_active=True
    ).distinct()


def eligible_count(*, team_id: int | None, requester_id: int | None) -> int:
    """Moderators who may vote on an item of ``team_id`` requested by ``requester_id``."""
    deciders = _deciders()
    if team_id is not None:
        deciders = deciders.filter(team_memberships__team_id=team_id, team_memberships__removed_at__isnull=True)
    if requester_id is not None:
        deciders = deciders.exclude(pk=requester_id)
    return deciders.count()


def member_lock(*, team_id: int, user: AbstractBaseUser) -> bool:
    """Is ``user`` a member of the team now? Locks the membership row until the caller's transaction ends."""
    return TeamMembership.objects.select_for_update().filter(team_id=team_id, user=user, removed_at__isnull=True).exists()


def decide_right_check(*, team_id: int | None, requester_id: int | None, user: AbstractBaseUser) -> None:
    """Under the item's row lock: raise NotAMember unless ``user`` may decide the item."""
    if requester_id is not None and requester_id == user.pk:
        raise NotAMember("you requested this item, so someone else must decide it (four eyes)")
    if team_id is None or user_is_supervisor(user=user):
        return
    if not member_lock(team_id=team_id, user=user):
        name = Team.objects.filter(pk=team_id).values_list("name", flat=True).first()
        raise NotAMember(f"you are not a moderator of the team {name}, which this item belongs to")


def team_member_add(*, team: Team, user: AbstractBaseUser) -> TeamMembership:
    with transaction.atomic():
        live = TeamMembership.objects.select_for_update().filter(team=team, user=user, removed_at__isnull=True).first()
        return live or TeamMembership.objects.create(team=team, user=user, added_at=timezone.now())


def team_member_remove(*, team: Team, user: AbstractBaseUser) -> bool:
    """End ``user``'s membership; False if they were not a member.

    The time is taken after the row lock is held, so it is later than every vote the
    membership allowed (see the module docstring).
    """
    with transaction.atomic():
        live = TeamMembership.objects.select_for_update().filter(team=team, user=user, removed_at__isnull=True).first()
        if live is None:
            return False
        live.removed_at = timezone.now()
        live.save(update_fields=["removed_at"])
        return True


def team_policy(*, team: Team) -> Policy:
    return Policy(approvals=team.approvals, majority=team.majority, veto=team.veto,
                  deadline_seconds=team.deadline_seconds, on_deadline=team.on_deadline)


def team_check(*, team: Team) -> None:
    """A team's own policy must be reachable by its members (PolicyInvalid otherwise); for the admin."""
    if not team_policy(team=team).is_quorum:
        return
    policy_satisfiable_check(policy=team_policy(team=team), eligible=eligible_count(team_id=team.pk, requester_id=None),
                             team=f"team {team.name}")


def team_for_item(*, slug: str | None, source: str, graph: str) -> Team | None:
    """The team an item belongs to: named, else by its source, else by its graph, else none."""
    if slug:
        team = Team.objects.filter(slug=slug).first()
        if team is None:
            raise PolicyInvalid(f"no team {slug!r}", field="team")
        return team
    teams = list(Team.objects.all())
    return next((t for t in teams if source in t.sources), None) or next((t for t in teams if graph in t.graphs), None)


def item_policy_resolve(
    *, slug: str | None, source: str, graph: str, policy: object, requester: AbstractBaseUser | None,
) -> tuple[Team | None, Policy]:
    """The team and policy of a new item (the submitter's policy over its team's), checked to be satisfiable."""
    team = team_for_item(slug=slug, source=source, graph=graph)
    resolved = policy_parse(policy, base=team_policy(team=team) if team else None)
    if resolved.on_deadline == "escalate" and (team is None or team.escalate_to_id is None):
        raise PolicyInvalid("escalate needs a team with a team to escalate to", field="policy.on_deadline")
    if resolved.is_quorum:  # a single decision waits for whoever joins, as it always did
        eligible = eligible_count(team_id=team.pk if team else None, requester_id=requester.pk if requester else None)
        policy_satisfiable_check(policy=resolved, eligible=eligible, team=f"team {team.name}" if team else "this site")
    return team, resolved


def ask_tally_read(*, item: QueueItem, ask: ReviewAsk) -> dict[str, Any] | None:
    """An ask's tally for readers outside the guard (the API); None when votes are not counted.

    A resolved ask shows the tally the guard froze at resolution (``ReviewAsk.tally``); an
    open quorum ask the votes counted so far, read without locks: a snapshot that a vote
    committing meanwhile makes old, never a tally the guard would not have seen. Reads
    ``ask.votes`` (prefetch them with their voters for a page of items).
    """
    if ask.status != AskStatus.PENDING:
        return ask.tally or None
    policy = policy_parse(item.policy)
    if not policy.is_quorum:
        return None
    votes = [(v.voter.get_username(), v.vote, v.cast_at) for v in sorted(ask.votes.all(), key=lambda v: (v.cast_at, v.pk))]
    eligible = eligible_count(team_id=item.team_id, requester_id=item.requested_by_id)
    return tally_build(policy=policy, votes=votes, eligible=eligible, resolution=None)
