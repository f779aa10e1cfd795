from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from moderation.demo import DEMO_MODERATORS, DEMO_VIEWER, demo_seed


class Command(BaseCommand):
    help = (
        "Create demo moderators (alice, bob, carol), a viewer (dave), the teams payments (the refund agent's "
        "items: 2 approvals, veto) and leads, and demo items. Development only."
    )

    def handle(self, *args, **options):
        if not settings.DEBUG:
            raise CommandError("seed_demo only runs with DEBUG on; demo accounts must never exist in production")
        users, items = demo_seed(progress=self._progress)
        if items:
            self.stdout.write("")
        self.stdout.write(f"Demo data: {users} users and {items} items created (existing ones kept).")
        self.stdout.write(
            f"Moderators: {', '.join(DEMO_MODERATORS)}; view-only: {DEMO_VIEWER}; password: {settings.DEMO_PASSWORD}"
        )
        self.stdout.write(
            "Teams: payments (refund agent items: 2 approvals, one rejection vetoes; escalated to leads "
            "after an hour; reasons that fit tool calls), leads (alice)."
        )

    def _progress(self, done: int, total: int) -> None:
        self.stdout.write(f"\r  creating demo items: {done}/{total}", ending="")
        self.stdout.flush()
