import json
import sys
import time
from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from moderation.core.jsonparse import json_parse
from moderation.graphs.registry import UnknownGraph, graph_name_validate
from moderation.policies.models import Team
from moderation.review.item_import import FORMATS, ItemFileError, item_format_guess, item_rows_read
from moderation.review.items import item_create, item_requester_get


def _errors_text(exc: ValidationError) -> str:
    return "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())


def _object_parse(text: str | None, *, option: str) -> dict | None:
    if text is None:
        return None
    try:
        value = json_parse(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{option} is not valid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(value, dict):
        raise CommandError(f"{option} must be a JSON object, not {type(value).__name__}")
    return value


class Command(BaseCommand):
    help = (
        "Add items to the review queue and start their graphs: one with --title/--body, or many with "
        "--file (JSON lines, or CSV with a title,body[,source,team,policy,requested_by] header; '-' reads stdin). A bad line is "
        "reported and skipped; the rest are added, and the command exits non-zero if any line was refused. "
        "--graph names the graph the items run (REVIEWQUEUE_GRAPHS; default moderation) and --input its "
        "start state for a single item. --team, --policy and --requested-by set the approval policy "
        "(docs/integrators/policies.md): of a single item, and of file lines without their own team, "
        "policy or requested_by columns."
    )

    def add_arguments(self, parser):
        parser.add_argument("--title")
        parser.add_argument("--body")
        parser.add_argument("--source", default="cli", help="source of a single item, and of file lines without one")
        parser.add_argument("--file", metavar="PATH", help="JSON lines or CSV file of items; '-' for stdin")
        parser.add_argument("--format", choices=FORMATS, help="default: csv for a .csv file name, else jsonl")
        parser.add_argument("--graph", help="the graph the items run, a REVIEWQUEUE_GRAPHS name (default: moderation)")
        parser.add_argument(
            "--input",
            metavar="JSON",
            help='a JSON object merged over the item\'s start state, e.g. \'{"messages": [{"role": "user", "content": "..."}]}\'',
        )
        parser.add_argument(
            "--team", help="the team (slug) whose moderators decide; default: the team owning the source or graph"
        )
        parser.add_argument(
            "--policy",
            metavar="JSON",
            help='the approval policy over the team\'s, e.g. \'{"approvals": 2, "veto": true, "deadline_seconds": 3600, '
            '"on_deadline": "escalate"}\'',
        )
        parser.add_argument(
            "--requested-by", metavar="USERNAME", help="who asks for the decision, and so may never make it (four eyes)"
        )

    def handle(self, *args, **options):
        single = options["title"] is not None or options["body"] is not None
        if options["file"] and single:
            raise CommandError("give either --file or --title/--body, not both")
        try:
            graph_name_validate(name=options["graph"])
        except UnknownGraph as exc:
            raise CommandError(f"--graph: {exc}") from None
        # Checked before any line is read, so a mistyped option is one error, not one per line.
        options["policy"] = _object_parse(options["policy"], option="--policy")
        try:
            item_requester_get(username=options["requested_by"])
        except ValidationError as exc:
            raise CommandError(f"--requested-by: {' '.join(exc.messages)}") from None
        if options["team"] is not None and not Team.objects.filter(slug=options["team"]).exists():
            raise CommandError(f"--team: no team {options['team']!r}")
        if options["file"]:
            if options["input"] is not None:
                raise CommandError("--input is for a single item (--title/--body), not --file")
            self._file_add(options)
            return
        if options["title"] is None or options["body"] is None:
            raise CommandError("give --title and --body for one item, or --file for many")
        graph_input = _object_parse(options["input"], option="--input")
        try:
            item = self._item_create({"title": options["title"], "body": options["body"]}, options, graph_input=graph_input)
        except ValidationError as exc:
            raise CommandError(_errors_text(exc)) from None
        self.stdout.write(f"Added {item.public_id} ({self._screen_text(item)})")

    def _file_add(self, options):
        path = options["file"]
        fmt = options["format"] or item_format_guess(name=path)
        started = time.monotonic()
        added, refused = 0, []
        try:
            stream = sys.stdin if path == "-" else Path(path).open(encoding="utf-8", newline="")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
        try:
            for row in item_rows_read(stream=stream, fmt=fmt):
                error = row.error
                if not error:
                    try:
                        item = self._item_create(row.fields, options)
                    except ValidationError as exc:
                        error = _errors_text(exc)
                if error:
                    refused.append(row.line)
                    self.stderr.write(f"line {row.line}: refused: {error}")
                    continue
                added += 1
                self.stdout.write(f"line {row.line}: added {item.public_id} ({self._screen_text(item)})")
        except ItemFileError as exc:
            raise CommandError(str(exc)) from None
        except UnicodeDecodeError as exc:
            raise CommandError(f"{path} is not UTF-8 text ({exc.reason}); stopped after adding {added}") from None
        finally:
            if stream is not sys.stdin:
                stream.close()
        seconds = time.monotonic() - started
        each = f", {seconds / added * 1000:.0f} ms each" if added else ""
        self.stdout.write(f"Added {added} item{'s' if added != 1 else ''} in {seconds:.1f} s{each}.")
        if refused:
            raise CommandError(f"{len(refused)} line{'s' if len(refused) != 1 else ''} refused: {', '.join(map(str, refused))}")

    @staticmethod
    def _item_create(fields: dict, options: dict, *, graph_input: dict | None = None):
        """One item: its own fields over the options' defaults (source, team, policy, requested_by)."""
        fields = {
            "source": options["source"],
            "team": options["team"],
            "policy": options["policy"],
            "requested_by": options["requested_by"],
            **fields,
        }
        requester = item_requester_get(username=fields.pop("requested_by"))
        return item_create(**fields, graph=options["graph"], graph_input=graph_input, requested_by=requester)

    @staticmethod
    def _screen_text(item) -> str:
        flags = ", ".join(item.flags) or "none"
        return f"risk {item.risk}, flags: {flags}"
