from django.core.management.base import BaseCommand

from moderation.recovery import items_recover


class Command(BaseCommand):
    help = (
        "Reconcile items whose database row and LangGraph state disagree (after a crash or a failed node). "
        "Idempotent; safe while reviewers work."
    )

    def add_arguments(self, parser):
        parser.add_argument("--all", action="store_true", help="also check decided items (slower)")

    def handle(self, *args, **options):
        actions = items_recover(include_decided=options["all"], progress=self._progress)
        self.stdout.write("")
        for action in actions:
            self.stdout.write(f"{action.item} “{action.title}”: {action.action}")
        self.stdout.write(f"recover: {len(actions)} item(s) changed or need attention.")

    def _progress(self, done: int, total: int) -> None:
        if done == total or done % 100 == 0:
            self.stdout.write(f"\r  checked {done}/{total} items", ending="")
            self.stdout.flush()
