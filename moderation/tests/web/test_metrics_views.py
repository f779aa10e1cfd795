"""Who may read /metrics: loopback callers, or anyone with the bearer token."""

import pytest
from django.test import Client


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("address", "authorization", "token", "status"),
    [
        ("127.0.0.1", "", "", 200),
        ("::1", "", "", 200),
        ("127.0.0.1", "forwarded", "s3cret", 401),  # a proxy on the same host: its callers are not loopback
        ("10.0.0.5", "", "s3cret", 401),
        ("10.0.0.5", "Basic czNjcmV0", "s3cret", 401),
        ("10.0.0.5", "Bearer wrong", "s3cret", 403),
        ("10.0.0.5", "Bearer s3cret", "", 403),  # no token set: loopback only
        ("10.0.0.5", "Bearer s3cret", "s3cret", 200),
    ],
)
def test_metrics_is_open_to_loopback_and_to_the_token_only(settings, address, authorization, token, status):
    settings.METRICS_TOKEN = token
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization not in ("", "forwarded") else {}
    if authorization == "forwarded":
        headers["HTTP_X_FORWARDED_FOR"] = "203.0.113.7"
    response = Client(REMOTE_ADDR=address).get("/metrics", **headers)
    assert response.status_code == status
    if status == 200:
        assert response["Content-Type"].startswith("text/plain; version=")
        assert b"reviewqueue_decisions_total" in response.content
        assert b"reviewqueue_pending_items" in response.content
    else:
        assert b"reviewqueue_" not in response.content
    if status == 401:
        assert response["WWW-Authenticate"].startswith("Bearer")
