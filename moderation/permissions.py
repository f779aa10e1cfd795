from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

DECIDE_PERMISSION = "moderation.decide_item"
MODERATORS_GROUP = "moderators"


def user_can_decide(*, user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.is_authenticated and user.is_active and user.has_perm(DECIDE_PERMISSION))
