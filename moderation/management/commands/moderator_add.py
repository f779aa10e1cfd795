import os
import sys
from pathlib import Path

from django.core.management.base import CommandError

from moderation.core.permissions import (
    DECIDE_PERMISSION,
    MODERATORS_GROUP,
    AccountRefused,
    UnknownUsers,
    moderator_create,
    moderators_set,
    user_can_decide,
)
from moderation.management.provisioning import ProvisioningCommand


class Command(ProvisioningCommand):
    help = (
        f"Make existing users moderators (the '{MODERATORS_GROUP}' group, which holds {DECIDE_PERMISSION}), "
        "or with --remove take that away. All or nothing: an unknown name changes nobody. With --password-from-env "
        "or --password-file, one user is created first if missing, with that password, without a prompt."
    )

    def add_arguments(self, parser):
        parser.add_argument("usernames", nargs="+", metavar="username")
        parser.add_argument("--remove", action="store_true", help="take the users out of the moderators group")
        password = parser.add_mutually_exclusive_group()
        # Never the password itself: a command line is seen by every user of the host (ps) and kept in shell history.
        password.add_argument(
            "--password-from-env",
            metavar="VARIABLE",
            help="create the user if missing, with the password held in this environment variable",
        )
        password.add_argument(
            "--password-file",
            metavar="PATH",
            help="create the user if missing, with the password on this file's first line (- for standard input)",
        )

    def handle(self, *args, **options):
        if options["password_from_env"] or options["password_file"]:
            self._create(options)
            return
        try:
            users = moderators_set(usernames=options["usernames"], moderator=not options["remove"])
        except UnknownUsers as exc:
            raise CommandError(
                f"{exc}: create them first (manage.py createsuperuser, the admin's Users page, or moderator_add "
                "with --password-from-env or --password-file); nobody was changed"
            ) from None
        for user in users:
            self._report(user, removed=options["remove"])

    def _create(self, options) -> None:
        if options["remove"] or len(options["usernames"]) != 1:
            raise CommandError("a password option takes one username, without --remove; nobody was changed")
        try:
            account = moderator_create(username=options["usernames"][0], password=self._password(options))
        except AccountRefused as exc:
            raise CommandError(f"{exc} Nobody was changed.") from None
        if not account.created:
            self.stdout.write(f"{account.user.get_username()} already exists; its password is unchanged.")
        self._report(account.user, removed=False)

    def _password(self, options) -> str:
        if options["password_from_env"]:
            password = os.environ.get(options["password_from_env"], "")
            source = f"--password-from-env: {options['password_from_env']}"
        else:
            path = options["password_file"]
            try:
                text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
            except OSError as exc:
                raise CommandError(f"--password-file: {exc.strerror}: {path}") from None
            password = text.splitlines()[0] if text else ""
            source = f"--password-file: {path}"
        if not password:
            raise CommandError(f"{source} is empty or not set; nobody was changed")
        return password

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
