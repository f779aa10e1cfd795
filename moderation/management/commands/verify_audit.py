from django.core.management.base import CommandError

from moderation.management.provisioning import ProvisioningCommand
from moderation.records.audit import audit_verify


class Command(ProvisioningCommand):
    help = (
        "Check the keyed attempts log, the global ledger, and every item row against its log and its graph; "
        "exit non-zero on any edited, deleted, reordered or truncated entry, deleted item or disagreeing row."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--anchor",
            metavar="SEQ:MAC",
            help="a ledger head printed by an earlier run and kept outside the database; it must still be there",
        )

    def handle(self, *args, **options):
        anchor = options["anchor"]
        if anchor is not None and not anchor.partition(":")[0].isdigit():
            raise CommandError(f"--anchor must look like SEQ:MAC (as printed by verify_audit), not {anchor!r}")
        report = audit_verify(anchor=anchor)
        for problem in report.problems:
            self.stderr.write(str(problem))
        if report.problems:
            raise CommandError(f"audit log broken: {len(report.problems)} problem(s)")
        self.stdout.write(f"audit log intact: {report.head.split(':')[0]} ledger entries, head {report.head}")
