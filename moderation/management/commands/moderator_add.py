from django.core.management.base import BaseCommand, CommandError

from moderation.core.permissions import DECIDE_PERMISSION, MODERATORS_GROUP, UnknownUsers, moderators_set, user_can_decide


class Command(BaseCommand):
    help = (
        f"Make existing users moderators (the '{MODERATORS_GROUP}' group, which holds {DECIDE_PERMISSION}), "
        "or with --remove take that away. All or nothing: an unknown name changes nobody."
    )

    def add_arguments(self, parser):
        parser.add_argument("usernames", nargs="+", metavar="username")
        parser.add_argument("--remove", action="store_true", help="take the users out of the moderators group")

    def handle(self, *args, **options):
        try:
            users = moderators_set(usernames=options["usernames"], moderator=not options["remove"])
        except UnknownUsers as exc:
            raise CommandError(
                f"{exc}: create them first (manage.py createsuperuser, or the admin's Users page); nobody was changed"
            ) from None
        for user in users:
            self._report(user, removed=options["remove"])

    def _report(self, user, *, removed: bool) -> None:
        username = user.get_username()
        if not removed:
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
