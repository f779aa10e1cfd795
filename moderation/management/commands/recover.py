from django.core.management.base import BaseCommand, CommandError

from moderation.graphs.registry import graph_not_loaded_text
from moderation.records.counts import counts_recount
from moderation.review.recovery import items_recover

# Distinct from 1 (a crash of the command itself): the run finished, some items did not.
EXIT_ITEMS_FAILED = 2


class Command(BaseCommand):
    help = (
        "Reconcile items whose database row and LangGraph state disagree (after a crash or a failed node). "
        "Idempotent; safe while reviewers work. Each item is handled on its own: one that cannot be repaired "
        f"is marked needs attention and the run goes on; the exit status is then {EXIT_ITEMS_FAILED}."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--all",
            action="store_true",
            help="also check decided items, and report (not change) rows that disagree with their graphs (slower)",
        )
        parser.add_argument(
            "--counts",
            action="store_true",
            help="only compare the queue's counters with real COUNTs and repair any that drifted (items are not checked)",
        )

    def handle(self, *args, **options):
        if options["counts"]:
            self._counts()
            return
        report = items_recover(include_decided=options["all"], progress=self._progress)
        self.stdout.write("")
        for graph, count in report.skipped.items():
            self.stderr.write(
                f"recover: skipped {count} item(s) of {graph_not_loaded_text(name=graph)}; "
                "they are left as they are, and carry on once it is back"
            )
        for action in report.actions:
            self.stdout.write(f"{action.item} “{action.title}”: {action.action}")
        changed = len(report.actions) - report.failed
        summary = (
            f"recover: checked {report.checked} item(s); {changed} changed or need attention, "
            f"{report.failed} could not be repaired."
        )
        if report.failed:
            raise CommandError(f"{summary} They are marked needs attention; see the log.", returncode=EXIT_ITEMS_FAILED)
        self.stdout.write(summary)

    def _counts(self) -> None:
        drifts = counts_recount()
        for drift in drifts:
            self.stdout.write(f"{drift} — repaired")
        self.stdout.write(
            f"recover --counts: {len(drifts)} counter(s) repaired."
            if drifts
            else "recover --counts: every counter matches a real COUNT."
        )

    def _progress(self, done: int, total: int) -> None:
        if done == total or done % 100 == 0:
            self.stdout.write(f"\r  checked {done}/{total} items", ending="")
            self.stdout.flush()
