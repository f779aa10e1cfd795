from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from moderation.core.permissions import DECIDE_PERMISSION, MODERATORS_GROUP, moderator_set, user_can_decide


class Command(BaseCommand):
    help = (
        f"Make an existing user a moderator (the '{MODERATORS_GROUP}' group, which holds {DECIDE_PERMISSION}), "
        "or with --remove take that away."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--remove", action="store_true", help="take the user out of the moderators group")

    def handle(self, *args, **options):
        username = options["username"]
        try:
            user = moderator_set(username=username, moderator=not options["remove"])
        except get_user_model().DoesNotExist:
            raise CommandError(
                f"no user named {username!r}: create it first (manage.py createsuperuser, or the admin's Users page)"
            ) from None
        if not options["remove"]:
            self.stdout.write(f"{username} is a moderator: they can approve and reject items.")
        elif user_can_decide(user=user):
            self.stdout.write(
                f"{username} is out of the {MODERATORS_GROUP} group but can still decide "
                f"(a superuser, or {DECIDE_PERMISSION} given directly or through another group)."
            )
        else:
            self.stdout.write(f"{username} is no longer a moderator.")
        if not user.is_active:
            self.stdout.write(f"note: {username} is inactive and cannot log in.")
