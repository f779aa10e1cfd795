"""Response headers: per-user answers are never cached; every page carries the browser policy."""

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from moderation.review.decisions import item_decide

pytestmark = pytest.mark.django_db


def _api(item):
    return reverse("moderation:api-decide", args=[item.public_id])


def _no_store(response) -> bool:
    directives = {d.strip() for d in response.get("Cache-Control", "").split(",")}
    return {"private", "no-store"} <= directives


def test_per_user_pages_and_api_answers_are_private_and_not_stored(client, alice, make_item):
    item = make_item()
    client.force_login(alice)
    for url in (reverse("moderation:queue"), reverse("moderation:item", args=[item.public_id])):
        assert _no_store(client.get(url)), url
    won = client.post(_api(item), data=json.dumps({"decision": "approve"}), content_type="application/json")
    lost = client.post(_api(item), data=json.dumps({"decision": "reject"}), content_type="application/json")
    assert (won.status_code, lost.status_code) == (200, 409)
    assert _no_store(won) and _no_store(lost)


def test_anonymous_api_answers_are_not_stored_either(client, make_item):
    response = client.post(_api(make_item()), data="{}", content_type="application/json")
    assert response.status_code == 401 and _no_store(response)


def test_public_answers_keep_their_own_caching(client):
    login = client.get(reverse("login"))
    assert "no-store" in login["Cache-Control"]  # Django's own never_cache, unchanged
    assert "Cache-Control" not in client.get(reverse("moderation:healthz"))


def test_every_page_carries_a_strict_content_security_policy_and_permissions_policy(client, alice):
    client.force_login(alice)
    for url in (reverse("login"), reverse("moderation:queue")):
        response = client.get(url)
        csp = dict(d.strip().split(" ", 1) for d in response["Content-Security-Policy"].split(";"))
        assert csp["default-src"] == "'none'" and csp["script-src"] == "'self'" and csp["style-src"] == "'self'"
        assert csp["frame-ancestors"] == "'none'" and "unsafe" not in response["Content-Security-Policy"]
        assert "camera=()" in response["Permissions-Policy"] and "geolocation=()" in response["Permissions-Policy"]


INLINE = [
    (re.compile(rb"<script(?![^>]*\bsrc=)[^>]*>", re.I), "inline <script>"),
    (re.compile(rb"<style\b", re.I), "<style> element"),
    (re.compile(rb"\sstyle\s*=", re.I), "style attribute"),
    (re.compile(rb"\son[a-z]+\s*=", re.I), "event-handler attribute"),
    (re.compile(rb"javascript:", re.I), "javascript: URL"),
]


def test_no_page_needs_inline_script_or_style(client, alice, bob, make_item, make_moderator, settings):
    # What the e2e suite checks in the browser, here for every template at once.
    staff = make_moderator("staff")
    staff.is_staff = True
    staff.save()
    decided, pending = make_item(title="Decided"), make_item(title="Pending")
    item_decide(item_public_id=decided.public_id, reviewer=bob, decision="approve", note="fine")
    pages = {"login": client.get(reverse("login")).content}
    guesser = Client(REMOTE_ADDR="10.9.9.9")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        locked = guesser.post(reverse("login"), {"username": "nobody", "password": "wrong"})
    assert locked.status_code == 429
    pages["locked out"] = locked.content
    client.force_login(staff)
    pages["lab"] = client.get(reverse("lab:page")).content
    client.force_login(alice)
    pages["queue"] = client.get(reverse("moderation:queue")).content
    pages["pending"] = client.get(reverse("moderation:item", args=[pending.public_id])).content
    pages["decided"] = client.get(reverse("moderation:item", args=[decided.public_id])).content
    pages["lost"] = client.post(reverse("moderation:item", args=[decided.public_id]), {"decision": "reject"}).content
    for name, html in pages.items():
        assert b"<main>" in html, name
        for pattern, what in INLINE:
            assert not pattern.search(html), f"{name} page has an {what}: {pattern.search(html).group(0)!r}"
