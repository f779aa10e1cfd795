from collections.abc import Sequence

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group, Permission
from django.db import transaction

DECIDE_PERMISSION = "moderation.decide_item"
MODERATORS_GROUP = "moderators"
# Sees the team page (/team/) of the teams they are a member of (moderation.records.teamstats).
LEAD_PERMISSION = "moderation.lead_team"


def user_can_view(*, user: AbstractBaseUser | AnonymousUser) -> bool:
    """Any active login may follow the queue (read-only); deciding needs ``user_can_decide``."""
    return bool(user.is_authenticated and user.is_active)


def user_can_decide(*, user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.is_authenticated and user.is_active and user.has_perm(DECIDE_PERMISSION))


class UnknownUsers(ValueError):
    def __init__(self, usernames: list[str]) -> None:
        self.usernames = usernames
        super().__init__(f"no user named {', '.join(map(repr, usernames))}")


def team_leads_set(*, usernames: Sequence[str], lead: bool) -> list[AbstractBaseUser]:
    """Give the users ``LEAD_PERMISSION`` directly, or take it away.

    All or nothing: ``UnknownUsers`` naming every unknown username, and nobody changed.
    The users are returned fresh, in the order given (the permission cache is per instance).
    """
    users = {user.username: user for user in get_user_model().objects.filter(username__in=usernames)}
    unknown = [name for name in dict.fromkeys(usernames) if name not in users]
    if unknown:
        raise UnknownUsers(unknown)
    app_label, codename = LEAD_PERMISSION.split(".")
    permission = Permission.objects.get(content_type__app_label=app_label, codename=codename)
    with transaction.atomic():
        for user in users.values():
            if lead:
                user.user_permissions.add(permission)
            else:
                user.user_permissions.remove(permission)
    fresh = get_user_model().objects.in_bulk([user.pk for user in users.values()])
    return [fresh[users[name].pk] for name in dict.fromkeys(usernames)]


def moderators_set(*, usernames: Sequence[str], moderator: bool) -> list[AbstractBaseUser]:
    """Put the users in the moderators group (which holds the decide permission) or take them out.

    All or nothing: ``UnknownUsers`` naming every unknown username, and nobody changed.
    The users are returned fresh, in the order given (the permission cache is per instance).
    """
    users = {user.username: user for user in get_user_model().objects.filter(username__in=usernames)}
    unknown = [name for name in dict.fromkeys(usernames) if name not in users]
    if unknown:
        raise UnknownUsers(unknown)
    group = Group.objects.get(name=MODERATORS_GROUP)
    with transaction.atomic():
        if moderator:
            group.user_set.add(*users.values())
        else:
            group.user_set.remove(*users.values())
    fresh = get_user_model().objects.in_bulk([user.pk for user in users.values()])
    return [fresh[users[name].pk] for name in dict.fromkeys(usernames)]
