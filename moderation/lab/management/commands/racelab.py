import json
import shutil
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from moderation.graphs.registry import DEFAULT_GRAPH
from moderation.graphs.remote import RemoteRefused, RemoteUnavailable
from moderation.lab.chart import CHART_FORMATS
from moderation.lab.remote_race import MODES, remote_race
from moderation.lab.runner import LabConfigError, lab_config_build
from moderation.lab.store import LabBusy, lab_run_recorded
from moderation.lab.strategies import STRATEGIES

TABLE_COLUMNS = [
    ("strategy", "strategy", 12),
    ("mode", "mode", 10),
    ("trials", "trials", 6),
    ("reviewers", "reviewers", 9),
    ("lost_decisions", "lost", 5),
    ("false_successes", "false ok", 8),
    ("double_resumes", "2x resume", 9),
    ("double_resolutions", "2x resolve", 10),
    ("votes_lost", "votes lost", 10),
    ("deadline_wins", "deadline won", 12),
    ("errors", "errors", 6),
    ("p50_ms", "p50 ms", 8),
    ("p99_ms", "p99 ms", 8),
    ("decisions_per_s", "dec/s", 7),
]


class Command(BaseCommand):
    help = (
        "Race N reviewers onto the same fresh items for each decision strategy, in threads and in "
        "processes, on the configured database; report lost decisions, false successes, double resumes, "
        "double resolutions, votes lost, errors and latency, then the slow-reviewer experiment and the isolation check. "
        "--policy and --deadline race quorum items and the deadline."
    )

    def add_arguments(self, parser):
        parser.add_argument("--trials", type=int, default=20, help="items raced per strategy and mode (default 20)")
        parser.add_argument("--reviewers", type=int, default=4, help="reviewers released onto each item (default 4)")
        parser.add_argument(
            "--strategy",
            action="append",
            dest="strategies",
            metavar="NAME",
            help=f"repeatable; one of {', '.join(STRATEGIES)} (default: all)",
        )
        parser.add_argument("--mode", default="both", help="threads, processes or both (default both)")
        parser.add_argument("--delay", type=float, default=50.0, help="check-to-act window in ms (default 50, as in the seed)")
        parser.add_argument("--hold", type=float, default=1.0, help="seconds the slow reviewer holds item X (default 1)")
        parser.add_argument("--seed", type=int, help="seed for item texts and reviewer order (default: random, reported)")
        parser.add_argument("--time-limit", type=float, help="start no new strategy × mode after this many seconds")
        parser.add_argument(
            "--graph",
            default=DEFAULT_GRAPH,
            help=f"the graph the lab's items run (default {DEFAULT_GRAPH}; refund_agent: the example agent)",
        )
        parser.add_argument(
            "--policy",
            action="append",
            dest="policies",
            metavar="RULE",
            help="the raced items' approval policy, repeatable: quorum:N (N approvals), veto, majority "
            "(e.g. --policy quorum:2 --policy veto); reviewers vote approve or reject",
        )
        parser.add_argument(
            "--deadline", metavar="SECONDS", help="the raced items' deadline, e.g. 1s; the deadline then races the reviewers"
        )
        parser.add_argument("--on-deadline", metavar="ACTION", help="approve, reject (default) or escalate")
        parser.add_argument(
            "--langgraph-url",
            metavar="URL",
            help="instead: race the naive direct resume against this LangGraph Server beside the guarded path "
            "(moderation.lab.remote_race); its --langgraph-assistant keeps its resume value in 'outcome'",
        )
        parser.add_argument(
            "--langgraph-assistant",
            default="hitl",
            metavar="ID",
            help="the graph or assistant raced with --langgraph-url (default hitl)",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables; no progress bar")
        parser.add_argument("--chart", type=Path, metavar="PATH", help="also write the chart to PATH (.png or .svg)")

    def handle(self, *args, **options):
        if options["langgraph_url"]:
            return self._remote(options)
        chart = options["chart"]
        if chart is not None:
            if chart.suffix.lower() not in CHART_FORMATS:
                raise CommandError(f"--chart must end in .png or .svg, not {chart.name!r}")
            if not chart.parent.resolve().is_dir():
                raise CommandError(f"--chart: directory {chart.parent} does not exist")
        try:
            config = lab_config_build(
                strategies=options["strategies"],
                mode=options["mode"],
                trials=options["trials"],
                reviewers=options["reviewers"],
                delay_ms=options["delay"],
                hold_s=options["hold"],
                seed=options["seed"],
                time_limit=options["time_limit"],
                graph=options["graph"],
                policies=options["policies"],
                deadline=options["deadline"],
                on_deadline=options["on_deadline"],
            )
        except LabConfigError as exc:
            raise CommandError(str(exc)) from None
        progress = None if options["json"] else self._progress
        try:
            report = lab_run_recorded(config=config, progress=progress, chart_path=chart)
        except LabBusy:
            raise CommandError(
                "another lab run is in progress (from the command line or the /lab page); try again later"
            ) from None
        if options["json"]:
            self.stdout.write(json.dumps(report))
            return
        self.stderr.write("")
        self._print_report(report, chart=chart)

    def _progress(self, done: int, total: int, label: str) -> None:
        width = max(10, min(40, shutil.get_terminal_size().columns - 50))
        filled = int(width * done / total) if total else 0
        self.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label:<28.28}", ending="")
        self.stderr.flush()

    def _print_report(self, report, *, chart):
        config = report["config"]
        self.stdout.write(
            f"racelab of {config['graph']} items on {report['database']} (checkpointer {report['checkpointer']}), seed {config['seed']}, "
            f"{config['delay_ms']:g} ms check-to-act window, {report['seconds']:g} s"
        )
        policy = config.get("policy")
        if policy:
            deadline = (
                f", deadline {policy['deadline_seconds']} s then {policy['on_deadline']} (the deadline races too)"
                if policy["deadline_seconds"]
                else ""
            )
            self.stdout.write(f"policy {' '.join(config['policies']) or '(one decision)'}{deadline}")
        self.stdout.write("")
        self.stdout.write(
            "  ".join(f"{title:>{w}}" if i > 1 else f"{title:<{w}}" for i, (_, title, w) in enumerate(TABLE_COLUMNS))
        )
        for row in report["results"]:
            self.stdout.write(
                "  ".join(f"{row[key]:>{w}}" if i > 1 else f"{row[key]:<{w}}" for i, (key, _, w) in enumerate(TABLE_COLUMNS))
            )
        for row in report["results"]:
            if row["first_error"]:
                self.stdout.write(f"  {row['strategy']}/{row['mode']} first error: {row['first_error']}")
        for cell in report["skipped"]:
            self.stdout.write(f"  {cell['strategy']}/{cell['mode']} skipped: --time-limit reached")

        self.stdout.write(
            f"\nSlow reviewer: one reviewer holds item X for {config['hold']:g} s inside the strategy's lock "
            f"while others decide other items"
        )
        self.stdout.write(
            f"{'strategy':<12}  {'others':>6}  {'baseline p50 ms':>15}  {'held p50 ms':>11}  {'waited ms':>9}  errors"
        )
        for row in report["slow_reviewer"]:
            self.stdout.write(
                f"{row['strategy']:<12}  {row['others']:>6}  {row['baseline_p50_ms']:>15}  {row['during_p50_ms']:>11}  "
                f"{row['waited_ms']:>9}  {row['errors']}{'  ' + row['first_error'] if row['first_error'] else ''}"
            )

        isolation = report["isolation"]
        items = isolation["items"]
        self.stdout.write(
            f"\nIsolation: B never resumed, waiting on {len(items['B']['waiting_on'])} ask(s) ({items['B']['status']}); "
            f"A finished={items['A']['finished']}, C finished={items['C']['finished']} -> "
            f"{'held' if isolation['passed'] else 'FAILED'}"
        )
        if chart is not None:
            self.stdout.write(f"Chart written to {chart}")

    def _remote(self, options):
        reviewers = [f"reviewer{n + 1}" for n in range(options["reviewers"])]
        try:
            reports = [
                remote_race(
                    url=options["langgraph_url"], assistant=options["langgraph_assistant"], reviewers=reviewers, mode=mode
                )
                for mode in MODES
            ]
        except (RemoteUnavailable, RemoteRefused) as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            self.stdout.write(json.dumps([{**vars(r), "anomalies": [str(a) for a in r.anomalies]} for r in reports]))
            return
        for report in reports:
            self.stdout.write(report.summary())
