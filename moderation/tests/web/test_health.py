import json
import time

import pytest
from channels.layers import channel_layers
from django.urls import reverse

from moderation.tests.real_server import black_hole

pytestmark = pytest.mark.postgres_variant


@pytest.fixture
def staff_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("ops", is_staff=True))
    return client


# Production's: how long an unbounded check would hang on a Redis that never answers.
SOCKET_TIMEOUT = 60


@pytest.fixture
def redis_layer_at(settings):
    """Point the channel layer at a Redis URL, as production configures it (60 s socket timeout)."""

    def point(url: str) -> None:
        settings.CHANNEL_LAYERS = {
            "default": {
                "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
                "CONFIG": {"hosts": [{"address": url, "socket_connect_timeout": 1, "socket_timeout": SOCKET_TIMEOUT}]},
            }
        }
        channel_layers.backends.pop("default", None)

    yield point
    channel_layers.backends.pop("default", None)


@pytest.mark.django_db
def test_healthz_tells_anyone_ok_per_check_and_staff_the_detail(client, staff_client):
    from django.test import Client

    anonymous = Client().get(reverse("moderation:healthz"))
    assert anonymous.status_code == 200
    assert anonymous.json() == {
        "ok": True,
        "checks": {name: {"ok": True} for name in ("database", "checkpointer", "channel_layer")},
    }
    staff = staff_client.get(reverse("moderation:healthz")).json()
    assert staff["ok"] is True
    assert staff["checks"]["checkpointer"]["backend"] in {"SqliteSaver", "PostgresSaver"}
    assert all("ms" in check for check in staff["checks"].values())


@pytest.mark.django_db
def test_healthz_is_503_when_the_channel_layer_is_unreachable_and_names_no_host_to_anonymous(client, redis_layer_at):
    redis_layer_at("redis://127.0.0.1:1/0")
    response = client.get(reverse("moderation:healthz"))
    assert response.status_code == 503
    body = response.json()
    assert body["ok"] is False and body["checks"]["channel_layer"] == {"ok": False}
    assert body["checks"]["database"] == {"ok": True}
    assert "127.0.0.1" not in response.content.decode()


@pytest.mark.timeout(2 * SOCKET_TIMEOUT)
@pytest.mark.django_db
def test_healthz_answers_within_its_bound_when_redis_is_a_black_hole(client, staff_client, redis_layer_at, settings, caplog):
    with black_hole() as port:
        redis_layer_at(f"redis://127.0.0.1:{port}/0")
        start = time.monotonic()
        response = staff_client.get(reverse("moderation:healthz"))
        took = time.monotonic() - start
    # Its own bound gave up on the layer (below), long before the client's socket timeout would have.
    assert took < SOCKET_TIMEOUT / 4, took
    assert response.status_code == 503
    checks = json.loads(response.content)["checks"]
    assert checks["channel_layer"]["ok"] is False
    assert checks["channel_layer"]["error"] == f"no answer within {settings.HEALTH_CHECK_TIMEOUT:g} s"
    assert checks["database"]["ok"] is True and checks["checkpointer"]["ok"] is True
    # The operator still gets the detail, in the log.
    assert "health check channel_layer failed: no answer within" in caplog.text
