"""Set up and inspect the database of the server under test, from outside the server.

Run as a separate process with the server's DATABASE_URL (the e2e tests and the demo
do this through ``e2e.server``), so the test process itself never touches the ORM:

    python e2e/dbtool.py seed '{"migrate": true, "moderators": ["alice"], "items": 2}'   # e2e.seed.site_seed
    python e2e/dbtool.py users [--migrate]         # alice, bob, carol (moderators), dave (viewer), erin (staff)
    python e2e/dbtool.py items --count 3 --prefix "Race"   # -> JSON [{"id", "title"}]; --graph NAME
    python e2e/dbtool.py state ID [ID ...]         # -> JSON {id: {status, winner, ..., final}}
    python e2e/dbtool.py decide ID --user carol --decision reject   # behind the server's back

Every command prints one JSON document on stdout. ``serve`` keeps one process (one
Django start-up) for many commands: it reads one JSON argument list per line on stdin
and answers each with one line, {"ok": result} or {"error": "traceback"}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODERATORS = ("alice", "bob", "carol")
VIEWER = "dave"
STAFF = "erin"  # a superuser: the race lab and the admin pages


def _django_setup() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewqueue.settings")
    import django

    django.setup()


def cmd_seed(args: argparse.Namespace) -> dict:
    from e2e.seed import site_seed

    spec = json.loads(args.spec)
    spec["decisions"] = [tuple(d) for d in spec.get("decisions", ())]
    return site_seed(**spec).as_json()


def cmd_users(args: argparse.Namespace) -> dict:
    from django.conf import settings

    from e2e.seed import site_seed

    password = args.password or settings.DEMO_PASSWORD
    site_seed(migrate=args.migrate, moderators=MODERATORS, viewers=[VIEWER], superusers=[STAFF], password=password)
    return {"moderators": list(MODERATORS), "viewer": VIEWER, "staff": STAFF, "password": password}


def cmd_items(args: argparse.Namespace) -> list[dict]:
    from e2e.seed import site_seed

    return site_seed(
        items=args.count, prefix=args.prefix, source=args.source, graph=args.graph or None, team=args.team or None
    ).items


def cmd_state(args: argparse.Namespace) -> dict:
    from dataclasses import asdict

    from moderation.graphs.runtime import graph_asks_pending, graph_forks, graph_resume_count
    from moderation.items.models import QueueItem
    from moderation.lab.history import history_final_read
    from moderation.records.models import AttemptOutcome

    # What moderation.lab.history checks a run against (a quorum item's votes and tally included).
    finals = {item: asdict(final) for item, final in history_final_read(items=args.ids).items()}
    state = {}
    for item in QueueItem.objects.filter(public_id__in=args.ids).select_related("decided_by"):
        attempts = list(item.attempts.select_related("reviewer", "winner").order_by("id"))
        state[str(item.public_id)] = {
            "title": item.title,
            "status": item.status,
            "winner": item.decided_by.get_username() if item.decided_by else None,
            "won_attempts": [a.reviewer.get_username() for a in attempts if a.outcome == AttemptOutcome.WON],
            "lost_attempts": [
                {"reviewer": a.reviewer.get_username(), "requested": a.requested, "told_winner": a.winner.get_username()}
                for a in attempts
                if a.outcome == AttemptOutcome.LOST
            ],
            "resume_count": graph_resume_count(name=item.graph, thread_id=item.thread_id),
            "forks": graph_forks(name=item.graph, thread_id=item.thread_id),
            "graph_paused": bool(graph_asks_pending(name=item.graph, thread_id=item.thread_id)),
            "apply_state": item.apply_state,
            "applied_result": item.applied_result,
            "tally": item.asks.exclude(tally={}).order_by("-decided_at").values_list("tally", flat=True).first(),
            "final": finals[str(item.public_id)],
        }
    return state


def cmd_decide(args: argparse.Namespace) -> dict:
    from django.contrib.auth import get_user_model

    from moderation.review.decisions import item_decide

    reviewer = get_user_model().objects.get(username=args.user)
    outcome = item_decide(item_public_id=args.id, reviewer=reviewer, decision=args.decision)
    return {"won": outcome.won, "message": outcome.message(), **outcome.winner_payload()}


def cmd_hook(args: argparse.Namespace) -> str:
    """A webhook endpoint for ``item.decided`` named ``name`` (replacing one of that name); ``--off`` removes it."""
    from moderation.delivery.models import WebhookEndpoint

    WebhookEndpoint.objects.filter(name=args.name).delete()
    if not args.off:
        WebhookEndpoint.objects.create(name=args.name, url=args.url, secret=args.secret, events=["item.decided"])
    return args.name


def cmd_apiclient(args: argparse.Namespace) -> str:
    """A new API client (``items:write``, ``items:read``); its token."""
    from moderation.api.clients import apiclient_create

    return apiclient_create(name=args.name, scopes=["items:write", "items:read"])[1]


COMMANDS = {
    "ping": lambda args: "pong",
    "seed": cmd_seed,
    "users": cmd_users,
    "items": cmd_items,
    "state": cmd_state,
    "decide": cmd_decide,
    "hook": cmd_hook,
    "apiclient": cmd_apiclient,
}


def serve(parser: argparse.ArgumentParser) -> None:
    import traceback

    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            args = parser.parse_args(json.loads(line))
            if args.command == "serve":
                raise ValueError("already serving")
            answer = {"ok": COMMANDS[args.command](args)}
        except BaseException:  # noqa: BLE001 - argparse exits with SystemExit; report everything
            answer = {"error": traceback.format_exc()}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


def parser_build() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    seed = sub.add_parser("seed")
    seed.add_argument("spec", help="JSON keyword arguments of e2e.seed.site_seed")
    users = sub.add_parser("users")
    users.add_argument("--password", default="")
    users.add_argument("--migrate", action="store_true", help="migrate the database first")
    items = sub.add_parser("items")
    items.add_argument("--count", type=int, default=1)
    items.add_argument("--prefix", default="E2E item")
    items.add_argument("--source", default="e2e")
    items.add_argument(
        "--graph", default="", help="a REVIEWQUEUE_GRAPHS name (the server's env may add some); moderation by default"
    )
    items.add_argument("--team", default="", help="a team's slug (manage.py team): the items are its, by its policy")
    state = sub.add_parser("state")
    state.add_argument("ids", nargs="+")
    decide = sub.add_parser("decide")
    decide.add_argument("id")
    decide.add_argument("--user", required=True)
    decide.add_argument("--decision", choices=["approve", "reject"], required=True)
    apiclient = sub.add_parser("apiclient")
    apiclient.add_argument("name")
    hook = sub.add_parser("hook")
    hook.add_argument("name")
    hook.add_argument("--url", default="")
    hook.add_argument("--secret", default="")
    hook.add_argument("--off", action="store_true")
    sub.add_parser("serve")
    sub.add_parser("ping")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = parser_build()
    args = parser.parse_args(argv)
    _django_setup()
    if args.command == "serve":
        serve(parser)
        return
    json.dump(COMMANDS[args.command](args), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
