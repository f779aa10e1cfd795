"""The one way a server test, the demo or the bench fills a database: ``site_seed``.

Runs inside a process with Django set up: ``e2e/dbtool.py seed`` (what
``e2e.server.LiveServer.seed`` calls, so the test process never touches the ORM) or
the bench's own process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import import_module

ITEM_BODIES = [
    "Sharing some photos from the ridge trail. The view at sunrise was worth the early start.",
    "Does anyone know if the rate limit is per key or per account? The docs are unclear.",
    "Onion, carrot, celery, red lentils, cumin. Simmer 25 minutes. Lemon at the end.",
    "We are planning a small meetup near the river. Reply if you want to join.",
    "The CSV export button does nothing on Firefox. Console shows a CSP error.",
]


@dataclass
class SeedResult:
    users: dict = field(default_factory=dict)  # name -> user
    sessions: dict[str, str] = field(default_factory=dict)  # name -> session key of a logged-in session
    items: list[dict] = field(default_factory=list)  # [{"id", "title"}]
    decided: list[dict] = field(default_factory=list)

    def as_json(self) -> dict:
        return {"sessions": self.sessions, "items": self.items, "decided": self.decided}


def site_seed(
    *,
    migrate: bool = False,
    moderators: Sequence[str] = (),
    viewers: Sequence[str] = (),
    superusers: Sequence[str] = (),
    staff: Sequence[str] = (),
    password: str | None = None,
    sessions: bool = False,
    items: int = 0,
    prefix: str = "Item",
    source: str = "seed",
    decisions: Sequence[tuple[int, str, str]] = (),
    graph: str | None = None,
    team: str | None = None,
) -> SeedResult:
    """Users, items and decisions made through the product's own functions.

    ``moderators`` join the moderators group, ``viewers`` do not, ``superusers`` are
    created as such; any of them named in ``staff`` is staff too. Without a
    ``password`` the users get an unusable one (their tests use ``sessions``: one
    logged-in session each, no password hashing). Items are titled "<prefix> <n>" from
    1, on ``graph`` (a REVIEWQUEUE_GRAPHS name; the moderation graph by default), of ``team`` (a slug) if given. ``decisions`` are
    (item index, moderator, "approve"/"reject"), made in order through ``item_decide``.
    Existing users are reused, so seeding twice is harmless.
    """
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.auth.models import Group
    from django.core.management import call_command

    from moderation.core.permissions import MODERATORS_GROUP
    from moderation.review.decisions import item_decide
    from moderation.review.items import item_create

    if migrate:
        call_command("migrate", verbosity=0, interactive=False)
    result = SeedResult()
    group = Group.objects.get(name=MODERATORS_GROUP)
    User = get_user_model()
    for name in (*moderators, *viewers, *superusers):
        is_super = name in superusers
        user, _ = User.objects.get_or_create(username=name)
        user.is_staff = is_super or name in staff
        user.is_superuser = is_super
        if password:
            user.set_password(password)
        else:
            user.set_unusable_password()
        user.save()
        if name in moderators:
            user.groups.add(group)
        result.users[name] = user
        if sessions:
            session = import_module(settings.SESSION_ENGINE).SessionStore()
            session[SESSION_KEY] = str(user.pk)
            session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
            session[HASH_SESSION_KEY] = user.get_session_auth_hash()
            session.save()
            result.sessions[name] = session.session_key
    for n in range(1, items + 1):
        item = item_create(
            title=f"{prefix} {n}", body=ITEM_BODIES[(n - 1) % len(ITEM_BODIES)], source=source, graph=graph, team=team
        )
        result.items.append({"id": str(item.public_id), "title": item.title})
    for index, name, decision in decisions:
        item = result.items[index]["id"]
        outcome = item_decide(item_public_id=item, reviewer=result.users[name], decision=decision)
        result.decided.append(
            {"item": item, "reviewer": name, "decision": decision, "won": outcome.won, "winner": outcome.winner}
        )
    return result
