from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group

DECIDE_PERMISSION = "moderation.decide_item"
MODERATORS_GROUP = "moderators"


def user_can_view(*, user: AbstractBaseUser | AnonymousUser) -> bool:
    """Any active login may follow the queue (read-only); deciding needs ``user_can_decide``."""
    return bool(user.is_authenticated and user.is_active)


def user_can_decide(*, user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.is_authenticated and user.is_active and user.has_perm(DECIDE_PERMISSION))


def moderator_set(*, username: str, moderator: bool) -> AbstractBaseUser:
    """Put the user in the moderators group (which holds the decide permission) or take them out.

    Raises the user model's DoesNotExist for an unknown username.
    """
    user = get_user_model().objects.get(username=username)
    group = Group.objects.get(name=MODERATORS_GROUP)
    if moderator:
        user.groups.add(group)
    else:
        user.groups.remove(group)
    return get_user_model().objects.get(pk=user.pk)  # fresh: the permission cache is per instance
