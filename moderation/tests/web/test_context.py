"""Every page that extends base.html tells its header whether the viewer may decide (moderation.web.context)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from moderation.review.items import item_create

TEMPLATES = Path(settings.BASE_DIR) / "templates"
# Pages that extend base.html but never for someone logged in: a refused login (axes), and the page after logging out.
NOT_REACHED = {"registration/locked_out.html", "registration/logged_out.html"}
# URL names a GET does not show as a page; posted here (bulk: the result page) or left alone (starts a lab run).
POSTED = {"moderation:bulk"}
NOT_REQUESTED = {"lab:run", "logout"}


def _names(patterns=None, namespace: str = "") -> list[tuple[str, URLPattern]]:
    found = []
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(entry, URLResolver):
            inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
            found += _names(entry.url_patterns, inner)
        elif entry.name:
            found.append((f"{namespace}{entry.name}", entry))
    return found


def _extending_base() -> set[str]:
    return {
        str(p.relative_to(TEMPLATES)) for p in TEMPLATES.rglob("*.html") if '{% extends "base.html" %}' in p.read_text()
    } - NOT_REACHED


def _url(name: str, pattern: URLPattern, item) -> str:
    kwargs = {key: str(item.public_id) for key in pattern.pattern.converters}
    return reverse(name, kwargs=kwargs)


@pytest.mark.django_db
def test_every_page_on_base_shows_a_moderator_as_a_moderator(client, alice, payments, make_item):
    """The bulk result and /team/ once labelled a moderator "view only" (and live.js then said their rights had changed)."""
    alice.user_permissions.add(Permission.objects.get(codename="lead_team"))
    alice.is_staff = True
    alice.save()
    client.force_login(alice)
    item = item_create(title="Look", body="A page to look at.", source="test")
    rendered: dict[str, str] = {}
    for name, pattern in _names():
        if name in NOT_REQUESTED or name.startswith("admin:"):
            continue
        url = _url(name, pattern, item)
        if name in POSTED:
            response = client.post(url, {"items": [str(make_item().public_id)], "decision": "approve"})
        else:
            response = client.get(url)
        bases = [t.name for t in response.templates]
        if "base.html" not in bases:
            continue
        rendered[bases[0]] = name
        html = response.content.decode()
        assert 'data-can-decide="1"' in html, name
        assert "view only" not in html, name
    assert set(rendered) == _extending_base(), "a page that extends base.html was never requested"


@pytest.mark.django_db
def test_a_viewer_is_labelled_view_only(client, django_user_model):
    viewer = django_user_model.objects.create_user("dave", password="pw-for-tests-1")
    client.force_login(viewer)
    html = client.get(reverse("moderation:decided")).content.decode()
    assert 'data-can-decide="0"' in html and "dave · view only" in html
