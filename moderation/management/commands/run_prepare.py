from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from moderation.management.commands.recover import EXIT_ITEMS_FAILED


class Command(BaseCommand):
    help = (
        "`make run`'s preparation in one Django start-up (each costs seconds on a busy machine): migrate, the "
        "demo data (seed_demo), recover, collectstatic; then the banner with the address and the demo password. "
        "Development only, like seed_demo."
    )

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1", help="the address the server will listen on (for the banner)")
        parser.add_argument("--port", default="8000", help="its port (for the banner)")

    def handle(self, *args, **options):
        call_command("migrate", interactive=False)
        call_command("seed_demo")
        try:
            call_command("recover")
        except CommandError as exc:
            # Items it could not repair are marked needs attention: start anyway, as the operator would.
            if exc.returncode != EXIT_ITEMS_FAILED:
                raise
            self.stderr.write(str(exc))
        call_command("collectstatic", interactive=False, verbosity=0)
        self.stdout.write(
            "\n".join(
                [
                    "",
                    f"  reviewqueue is running at http://{options['host']}:{options['port']}/",
                    "  log in as alice, bob or carol (moderators) or dave (view only)",
                    f"  demo password: {settings.DEMO_PASSWORD}",
                    "  the task worker (manage.py db_worker: applies decisions, sends webhooks) runs beside it; Ctrl-C stops both",
                    "",
                ]
            )
        )
