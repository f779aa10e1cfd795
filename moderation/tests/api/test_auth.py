"""Bearer tokens (moderation.api.auth): a token sent the wrong way is refused and never logged."""

from __future__ import annotations

import logging

import pytest
from django.test import Client

from moderation.api.clients import apiclient_create
from moderation.items.models import QueueItem

pytestmark = [pytest.mark.django_db]


@pytest.mark.parametrize("header", ["Basic {token}", "{token}", "Token {token}", "Bearer{token}"])
def test_a_token_sent_without_bearer_is_401_and_reaches_no_log_line(settings, caplog, header):
    """django-ninja's HttpBearer logged the whole header at ERROR when DEBUG was on."""
    settings.DEBUG = True
    _, token = apiclient_create(name="pipeline", scopes=["items:write", "items:read"])
    caplog.set_level(logging.DEBUG)
    response = Client().post(
        "/api/v1/items",
        {"title": "t", "body": "b", "source": "s"},
        content_type="application/json",
        headers={"Authorization": header.format(token=token)},
    )
    assert response.status_code == 401 and response.json()["error"] == "unauthenticated"
    assert token not in response.content.decode()
    logged = [record.getMessage() for record in caplog.records]
    assert logged, "the 401 itself is logged (django.request), so the capture is live"
    assert not [line for line in logged if token in line or token[:12] in line], logged
    assert not QueueItem.objects.exists()


def test_a_bearer_scheme_in_any_case_still_authenticates():
    _, token = apiclient_create(name="pipeline", scopes=["items:read"])
    assert Client().get("/api/v1/items", headers={"Authorization": f"bearer {token}"}).status_code == 200
