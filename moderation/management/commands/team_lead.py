from django.core.management.base import CommandError

from moderation.core.permissions import LEAD_PERMISSION, UnknownUsers, team_leads_set
from moderation.management.provisioning import ProvisioningCommand
from moderation.records.teamstats import teams_visible


class Command(ProvisioningCommand):
    help = (
        f"Make existing users team leads ({LEAD_PERMISSION}: the team page of the teams they are a member of), "
        "or with --remove take that away. All or nothing: an unknown name changes nobody."
    )

    def add_arguments(self, parser):
        parser.add_argument("usernames", nargs="+", metavar="username")
        parser.add_argument("--remove", action="store_true", help="take the team-lead right away")

    def handle(self, *args, **options):
        try:
            users = team_leads_set(usernames=options["usernames"], lead=not options["remove"])
        except UnknownUsers as exc:
            raise CommandError(
                f"{exc}: create them first (manage.py createsuperuser, or the admin's Users page); nobody was changed"
            ) from None
        for user in users:
            self._report(user, removed=options["remove"])

    def _report(self, user, *, removed: bool) -> None:
        username = user.get_username()
        teams, no_team = teams_visible(user=user)
        names = ", ".join(team.name for team in teams) + (", items of no team" if no_team else "")
        if removed:
            self.stdout.write(
                f"{username} is no longer a team lead."
                + (f" They still see the team page of {names} (a supervisor or a superuser)." if names else "")
            )
        elif names:
            self.stdout.write(f"{username} is a team lead: they see the team page (/team/) of {names}.")
        else:
            self.stdout.write(
                f"{username} is a team lead, but a member of no team: add them to one "
                f"(manage.py team <slug> --add {username}) for the team page to show it."
            )
        if not user.is_active:
            self.stdout.write(f"note: {username} is inactive and cannot log in.")
