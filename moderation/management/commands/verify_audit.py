from django.core.management.base import BaseCommand, CommandError

from moderation.audit import audit_verify


class Command(BaseCommand):
    help = "Check every item's hash-chained attempts log; exit non-zero on any edited, deleted or reordered entry."

    def handle(self, *args, **options):
        problems = list(audit_verify())
        for problem in problems:
            self.stderr.write(str(problem))
        if problems:
            raise CommandError(f"audit log broken: {len(problems)} problem(s)")
        self.stdout.write("audit log intact")
