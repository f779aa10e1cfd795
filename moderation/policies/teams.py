"""Who may decide an item: its team's moderators (and supervisors everywhere), never its requester.

Memberships change only through ``team_member_add`` / ``team_member_remove``, and the
guard reads a voter's membership with ``member_lock`` under the item's row lock, taking
the membership row's lock too (``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite's
IMMEDIATE transactions serialize all writers). A removal and a vote therefore commit in
one order: a vote judged first is counted and the removal waits for it; a vote judged
after the removal committed is refused. Never half of each.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission, User
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from moderation.core.permissions import user_can_decide
from moderation.items.models import AskStatus, QueueItem, ReviewAsk
from moderation.policies.models import Team, TeamMembership
from moderation.policies.rules import (
    Policy,
    PolicyInvalid,
    policy_parse,
    policy_satisfiable_check,
    policy_weakenings,
    tally_build,
)

SUPERVISE_PERMISSION = "moderation.supervise_teams"
DECIDE_CODENAME = "decide_item"


class NotAMember(Exception):
    """The user may not decide this item (not in its team, or its requester)."""


def user_is_supervisor(*, user: User) -> bool:
    return bool(user.is_active and user.has_perm(SUPERVISE_PERMISSION))


def _deciders() -> QuerySet[User]:
    """Active users holding the decide permission (through a group, directly, or as superuser)."""
    perm = Permission.objects.filter(codename=DECIDE_CODENAME, content_type__app_label="moderation")
    return (
        get_user_model()
        .objects.filter(Q(is_superuser=True) | Q(groups__permissions__in=perm) | Q(user_permissions__in=perm), is_active=True)
        .distinct()
    )


def eligible_voters(*, team_id: int | None, requester_id: int | None) -> QuerySet[User]:
    """Moderators who may vote on an item of ``team_id`` requested by ``requester_id``."""
    deciders = _deciders()
    if team_id is not None:
        deciders = deciders.filter(team_memberships__team_id=team_id, team_memberships__removed_at__isnull=True)
    if requester_id is not None:
        deciders = deciders.exclude(pk=requester_id)
    return deciders


def eligible_count(*, team_id: int | None, requester_id: int | None) -> int:
    return eligible_voters(team_id=team_id, requester_id=requester_id).count()


def member_lock(*, team_id: int, user: User) -> bool:
    """Is ``user`` a member of the team now? Locks the membership row until the caller's transaction ends."""
    return TeamMembership.objects.select_for_update().filter(team_id=team_id, user=user, removed_at__isnull=True).exists()


def user_team_ids(*, user: User) -> list[int]:
    """The teams ``user`` is a member of now: read once per user object (a page asks for every row)."""
    teams = getattr(user, "_team_ids", None)
    if teams is None:
        teams = list(TeamMembership.objects.filter(user_id=user.pk, removed_at__isnull=True).values_list("team_id", flat=True))
        user._team_ids = teams  # type: ignore[attr-defined]  # a cache on this user object
    return teams


def decide_right_check(*, team_id: int | None, requester_id: int | None, user: User) -> None:
    """Under the item's row lock: raise NotAMember unless ``user`` may decide the item."""
    refusal = _decide_refusal(team_id=team_id, requester_id=requester_id, user=user, lock=True)
    if refusal:
        raise NotAMember(refusal)


def decide_right_read(*, team_id: int | None, requester_id: int | None, user: User) -> bool:
    """May ``user`` decide an item of ``team_id`` requested by ``requester_id``? The guard's rule, the decide
    permission included, read without locks: for claims (``moderation.records.claims``), which steer who reads
    what; the guard judges each decision with ``decide_right_check``."""
    return not _decide_refusal_read(team_id=team_id, requester_id=requester_id, user=user)


def item_decide_refusal(*, item: QueueItem, user: User) -> str:
    """Why ``user`` may not decide ``item``, in words for its pages ("" if they may): the guard's rule, read
    without locks, so a page offers a decision only to those the guard would let make it."""
    return _decide_refusal_read(team_id=item.team_id, requester_id=item.requested_by_id, user=user)


def _decide_refusal_read(*, team_id: int | None, requester_id: int | None, user: User) -> str:
    if not user_can_decide(user=user):
        return "you are not a moderator"
    return _decide_refusal(team_id=team_id, requester_id=requester_id, user=user, lock=False)


def four_eyes_refusal(*, requester_id: int | None, user: User) -> str:
    """The four-eyes rule: nobody decides an item requested on their behalf. Why ``user`` may not ("" if they may)."""
    if requester_id is not None and requester_id == user.pk:
        return "you requested this item, so someone else must decide it (four eyes)"
    return ""


def _decide_refusal(*, team_id: int | None, requester_id: int | None, user: User, lock: bool) -> str:
    """Why ``user`` may not decide the item ("" if they may); ``lock``: take the membership row's lock (the guard's)."""
    if refusal := four_eyes_refusal(requester_id=requester_id, user=user):
        return refusal
    if team_id is None or user_is_supervisor(user=user):
        return ""
    live = member_lock(team_id=team_id, user=user) if lock else team_id in user_team_ids(user=user)
    if live:
        return ""
    name = Team.objects.filter(pk=team_id).values_list("name", flat=True).first()
    return f"you are not a moderator of the team {name}, which this item belongs to"


def team_member_add(*, team: Team, user: User) -> TeamMembership:
    with transaction.atomic():
        live = TeamMembership.objects.select_for_update().filter(team=team, user=user, removed_at__isnull=True).first()
        return live or TeamMembership.objects.create(team=team, user=user, added_at=timezone.now())


def team_member_remove(*, team: Team, user: User) -> bool:
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
    return Policy(
        approvals=team.approvals,
        majority=team.majority,
        veto=team.veto,
        deadline_seconds=team.deadline_seconds,
        on_deadline=team.on_deadline,
    )


def team_check(*, team: Team, adding: Iterable[int] = (), removing: Iterable[int] = ()) -> None:
    """A team's own policy must be reachable by its members (PolicyInvalid otherwise); for the admin and ``manage.py team``.

    ``adding`` / ``removing``: user pks about to join / leave, so a change is judged before it is made.
    """
    if not team_policy(team=team).is_quorum:
        return
    members = set(eligible_voters(team_id=team.pk, requester_id=None).values_list("pk", flat=True)) if team.pk else set()
    members |= set(_deciders().filter(pk__in=list(adding)).values_list("pk", flat=True))
    members -= set(removing)
    policy_satisfiable_check(policy=team_policy(team=team), eligible=len(members), team=f"team {team.name}")


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
    *,
    slug: str | None,
    source: str,
    graph: str,
    policy: object,
    requester: User | None,
) -> tuple[Team | None, Policy]:
    """The team and policy of a new item (the submitter's policy over its team's), checked to be satisfiable
    and, unless the team has ``allow_weaker_policies``, no weaker than the team's (``policy_weakenings``;
    an item of no team: than the default policy)."""
    team = team_for_item(slug=slug, source=source, graph=graph)
    base = team_policy(team=team) if team else Policy()
    resolved = policy_parse(policy, base=base)
    if resolved.on_deadline == "escalate" and (team is None or team.escalate_to_id is None):
        raise PolicyInvalid("escalate needs a team with a team to escalate to", field="policy.on_deadline")
    weaker = [] if team is not None and team.allow_weaker_policies else policy_weakenings(base=base, asked=resolved)
    if weaker:
        owner = f"team {team.name} (unless the team allows weaker policies)" if team else "an item of no team"
        raise PolicyInvalid(
            f"a submitter may make the policy of {owner} stricter, never weaker: " + "; ".join(why for _, why in weaker),
            field=weaker[0][0],
        )
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


@dataclass(frozen=True)
class TeamSpec:
    """Changes to a team; None leaves a field as it is (or at its default, for a new team)."""

    name: str | None = None
    approvals: int | None = None
    majority: bool | None = None
    veto: bool | None = None
    deadline_seconds: int | None = None  # 0: no deadline
    on_deadline: str | None = None  # "": nothing
    escalate_to: str | None = None  # a team's slug; "": none
    sources: list[str] | None = None
    graphs: list[str] | None = None
    allow_weaker_policies: bool | None = None
    add: Sequence[str] = ()  # usernames
    remove: Sequence[str] = ()


def team_save(*, slug: str, spec: TeamSpec) -> tuple[Team, bool]:
    """Create or update the team ``slug`` and its members, all or nothing; returns (team, created).

    Refused with PolicyInvalid (a malformed policy, an unknown team or user, a quorum its
    members after the change could never reach) or ValidationError (a bad slug or name),
    changing nothing. Members join and leave through ``team_member_add`` / ``team_member_remove``.
    """
    with transaction.atomic():
        team = Team.objects.select_for_update().filter(slug=slug).first()
        created = team is None
        if team is None:
            team = Team(slug=slug, name=spec.name or slug.replace("-", " ").capitalize())
        for field in ("name", "approvals", "majority", "veto", "on_deadline", "sources", "graphs", "allow_weaker_policies"):
            if getattr(spec, field) is not None:
                setattr(team, field, getattr(spec, field))
        if spec.deadline_seconds is not None:
            team.deadline_seconds = spec.deadline_seconds or None
        if spec.escalate_to is not None:
            team.escalate_to = _escalation_target(slug=slug, target=spec.escalate_to)
        policy_parse(team_policy(team=team).as_json())  # the same bounds an item's policy has
        if team.on_deadline == "escalate" and team.escalate_to is None:
            raise PolicyInvalid("escalate needs a team to escalate to (--escalate-to)", field="escalate_to")
        team.full_clean(exclude=["members"])
        users = {name: _user(name) for name in (*spec.add, *spec.remove)}
        team_check(team=team, adding=[users[n].pk for n in spec.add], removing=[users[n].pk for n in spec.remove])
        team.save()
        for name in spec.add:
            team_member_add(team=team, user=users[name])
        for name in spec.remove:
            team_member_remove(team=team, user=users[name])
    return team, created


def _escalation_target(*, slug: str, target: str) -> Team | None:
    if not target:
        return None
    if target == slug:
        raise PolicyInvalid("a team cannot escalate to itself", field="escalate_to")
    team = Team.objects.filter(slug=target).first()
    if team is None:
        raise PolicyInvalid(f"no team {target!r} to escalate to: create it first", field="escalate_to")
    return team


def _user(username: str) -> User:
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise PolicyInvalid(f"no user named {username!r}", field="members")
    return user
