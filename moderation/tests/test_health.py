import pytest
from django.urls import reverse

pytestmark = pytest.mark.postgres_variant


@pytest.mark.django_db
def test_healthz_reports_each_dependency(client):
    response = client.get(reverse("moderation:healthz"))
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True
    assert set(body["checks"]) == {"database", "checkpointer", "channel_layer"}
    assert body["checks"]["checkpointer"]["backend"] in {"SqliteSaver", "PostgresSaver"}


@pytest.mark.django_db
def test_healthz_is_503_when_the_channel_layer_is_unreachable(client, settings):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [{"address": "redis://127.0.0.1:1/0", "socket_connect_timeout": 1}]},
        }
    }
    from channels.layers import channel_layers

    channel_layers.backends.pop("default", None)
    try:
        response = client.get(reverse("moderation:healthz"))
    finally:
        channel_layers.backends.pop("default", None)
    assert response.status_code == 503
    body = response.json()
    assert body["ok"] is False and body["checks"]["channel_layer"]["ok"] is False
    assert body["checks"]["database"]["ok"] is True
