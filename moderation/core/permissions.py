from collections.abc import Sequence
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser, Group, Permission, User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import transaction

DECIDE_PERMISSION = "moderation.decide_item"
MODERATORS_GROUP = "moderators"
# Sees the team page (/team/) of the teams they are a member of (moderation.records.teamstats).
LEAD_PERMISSION = "moderation.lead_team"


def user_can_view(*, user: User | AnonymousUser) -> bool:
    """Any active login may follow the queue (read-only); deciding needs ``user_can_decide``."""
    return bool(user.is_authenticated and user.is_active)


def user_can_decide(*, user: User | AnonymousUser) -> bool:
    return bool(user.is_authenticated and user.is_active and user.has_perm(DECIDE_PERMISSION))


class UnknownUsers(ValueError):
    def __init__(self, usernames: list[str]) -> None:
        self.usernames = usernames
        super().__init__(f"no user named {', '.join(map(repr, usernames))}")


def team_leads_set(*, usernames: Sequence[str], lead: bool) -> list[User]:
    """Give the users ``LEAD_PERMISSION`` directly, or take it away.

    All or nothing: ``UnknownUsers`` naming every unknown username, and nobody changed.
    The users are returned fresh, in the order given (the permission cache is per instance).
    """
    users = _users_named(usernames)
    app_label, codename = LEAD_PERMISSION.split(".")
    permission = Permission.objects.get(content_type__app_label=app_label, codename=codename)
    with transaction.atomic():
        for user in users.values():
            if lead:
                user.user_permissions.add(permission)
            else:
                user.user_permissions.remove(permission)
    return _users_fresh(users, usernames)


def moderators_set(*, usernames: Sequence[str], moderator: bool) -> list[User]:
    """Put the users in the moderators group (which holds the decide permission) or take them out.

    All or nothing: ``UnknownUsers`` naming every unknown username, and nobody changed.
    The users are returned fresh, in the order given (the permission cache is per instance).
    """
    users = _users_named(usernames)
    group = Group.objects.get(name=MODERATORS_GROUP)
    with transaction.atomic():
        if moderator:
            group.user_set.add(*users.values())
        else:
            group.user_set.remove(*users.values())
    return _users_fresh(users, usernames)


def _users_named(usernames: Sequence[str]) -> dict[str, User]:
    """Each user by name; ``UnknownUsers`` naming every unknown one (so a caller changes all or nobody)."""
    users = {user.username: user for user in get_user_model().objects.filter(username__in=usernames)}
    unknown = [name for name in dict.fromkeys(usernames) if name not in users]
    if unknown:
        raise UnknownUsers(unknown)
    return users


def _users_fresh(users: dict[str, User], usernames: Sequence[str]) -> list[User]:
    """The users read again, in the order given (Django caches permissions per instance)."""
    fresh = get_user_model().objects.in_bulk([user.pk for user in users.values()])
    return [fresh[users[name].pk] for name in dict.fromkeys(usernames)]


class AccountRefused(ValueError):
    """The new account's username or password does not pass Django's checks; the messages say why."""


@dataclass(frozen=True)
class ModeratorAccount:
    user: User
    created: bool


def moderator_create(*, username: str, password: str) -> ModeratorAccount:
    """Make ``username`` a moderator, first creating the account with ``password`` if there is none.

    An existing account keeps its password (a second run of a provisioning script changes
    nothing). A new one's username and password go through the model's and the
    ``AUTH_PASSWORD_VALIDATORS`` checks first: ``AccountRefused``, and nothing created.
    One transaction; the unique username settles two runs at once (one creates, the other fails).
    """
    user_model = get_user_model()
    with transaction.atomic():
        user = user_model.objects.filter(username=username).first()
        created = user is None
        if user is None:
            user = user_model(username=username)
            try:
                user.full_clean(exclude=["password"])
                validate_password(password, user=user)
            except ValidationError as exc:
                raise AccountRefused(" ".join(exc.messages)) from None
            user.set_password(password)
            user.save()
        Group.objects.get(name=MODERATORS_GROUP).user_set.add(user)
    return ModeratorAccount(user=user_model.objects.get(pk=user.pk), created=created)
