"""Set up and inspect the database of the server under test, from outside the server.

Run as a separate process with the server's DATABASE_URL (the e2e tests and the demo
do this through ``e2e.server``), so the test process itself never touches the ORM:

    python e2e/dbtool.py users                     # alice, bob, carol (moderators), dave (viewer), erin (staff)
    python e2e/dbtool.py items --count 3 --prefix "Race"   # -> JSON [{"id", "title"}]
    python e2e/dbtool.py state ID [ID ...]         # -> JSON {id: {status, winner, ...}}
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

ITEM_BODIES = [
    "Sharing some photos from the ridge trail. The view at sunrise was worth the early start.",
    "Does anyone know if the rate limit is per key or per account? The docs are unclear.",
    "Onion, carrot, celery, red lentils, cumin. Simmer 25 minutes. Lemon at the end.",
    "We are planning a small meetup near the river. Reply if you want to join.",
    "The CSV export button does nothing on Firefox. Console shows a CSP error.",
]


def _django_setup() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewqueue.settings")
    import django

    django.setup()


def cmd_users(args: argparse.Namespace) -> dict:
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from moderation.permissions import MODERATORS_GROUP

    group = Group.objects.get(name=MODERATORS_GROUP)
    password = args.password or settings.DEMO_PASSWORD
    for username in (*MODERATORS, VIEWER):
        user, _ = get_user_model().objects.get_or_create(username=username)
        user.set_password(password)
        user.save()
        if username in MODERATORS:
            user.groups.add(group)
    get_user_model().objects.filter(username=STAFF).exists() or get_user_model().objects.create_superuser(
        STAFF, password=password
    )
    return {"moderators": list(MODERATORS), "viewer": VIEWER, "staff": STAFF, "password": password}


def cmd_items(args: argparse.Namespace) -> list[dict]:
    from moderation.items import item_create

    created = []
    for n in range(1, args.count + 1):
        title = f"{args.prefix} {n}" if args.count > 1 or not args.exact else args.prefix
        item = item_create(title=title, body=ITEM_BODIES[(n - 1) % len(ITEM_BODIES)], source=args.source)
        created.append({"id": str(item.public_id), "title": item.title})
    return created


def cmd_state(args: argparse.Namespace) -> dict:
    from moderation.graphs.runtime import graph_asks_pending, graph_resume_count
    from moderation.models import AttemptOutcome, QueueItem

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
            "graph_paused": bool(graph_asks_pending(name=item.graph, thread_id=item.thread_id)),
        }
    return state


def cmd_decide(args: argparse.Namespace) -> dict:
    from django.contrib.auth import get_user_model

    from moderation.decisions import item_decide

    reviewer = get_user_model().objects.get(username=args.user)
    outcome = item_decide(item_public_id=args.id, reviewer=reviewer, decision=args.decision)
    return {"won": outcome.won, "message": outcome.message(), **outcome.winner_payload()}


COMMANDS = {"ping": lambda args: "pong", "users": cmd_users, "items": cmd_items, "state": cmd_state, "decide": cmd_decide}


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
    users = sub.add_parser("users")
    users.add_argument("--password", default="")
    items = sub.add_parser("items")
    items.add_argument("--count", type=int, default=1)
    items.add_argument("--prefix", default="E2E item")
    items.add_argument("--source", default="e2e")
    items.add_argument("--exact", action="store_true", help="with --count 1, use the prefix as the whole title")
    state = sub.add_parser("state")
    state.add_argument("ids", nargs="+")
    decide = sub.add_parser("decide")
    decide.add_argument("id")
    decide.add_argument("--user", required=True)
    decide.add_argument("--decision", choices=["approve", "reject"], required=True)
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
