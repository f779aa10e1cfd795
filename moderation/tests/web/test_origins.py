"""Which pages may open the dashboard's websockets: the full origin, not just the host."""

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from moderation.tests.sockets import TIMEOUT, fresh_layer, login, session_of  # noqa: F401 (fixtures)
from moderation.web.origins import websocket_origin_allowed
from reviewqueue.asgi import application


def _scope(origin, host="127.0.0.1:8001", scheme="ws", **headers):
    pairs = [(b"host", host.encode())] if host else []
    if origin:
        pairs.append((b"origin", origin.encode()))
    pairs += [(name.replace("_", "-").encode(), value.encode()) for name, value in headers.items()]
    return {"type": "websocket", "scheme": scheme, "headers": pairs}


@pytest.mark.parametrize(
    "scope",
    [
        _scope("http://127.0.0.1:8001"),
        _scope("http://localhost", host="localhost"),
        _scope("https://127.0.0.1:8001", scheme="wss"),
    ],
    ids=["same-origin", "default-port", "secure"],
)
def test_own_origin_is_allowed(scope):
    assert websocket_origin_allowed(scope=scope)


@pytest.mark.parametrize(
    "scope",
    [
        _scope("http://127.0.0.1:9999"),  # same host, another port: another site
        _scope("https://127.0.0.1:8001"),  # same host and port, another scheme
        _scope("http://127.0.0.1:8001", scheme="wss"),  # a plain page opening the secure socket
        _scope("http://127.0.0.1"),  # the port left out is port 80, not 8001
        _scope("http://evil.example", host="evil.example"),  # a host we do not serve
        _scope(None),
        _scope("http://127.0.0.1:8001", host=None),
        _scope("null"),
    ],
    ids=["other-port", "other-scheme", "downgraded", "no-port", "foreign-host", "no-origin", "no-host", "null"],
)
def test_any_other_origin_is_refused(scope):
    assert not websocket_origin_allowed(scope=scope)


def test_trusted_origins_are_allowed_exactly_or_by_wildcard(settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://review.example.org", "https://*.example.net"]
    assert websocket_origin_allowed(scope=_scope("https://review.example.org"))
    assert websocket_origin_allowed(scope=_scope("https://a.example.net"))
    assert not websocket_origin_allowed(scope=_scope("http://review.example.org"))
    assert not websocket_origin_allowed(scope=_scope("https://review.example.org:8443"))
    assert not websocket_origin_allowed(scope=_scope("http://a.example.net"))


def test_behind_a_tls_proxy_the_forwarded_scheme_counts(settings):
    # The proxy terminates TLS and talks plain ws to daphne, saying so in X-Forwarded-Proto.
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.ALLOWED_HOSTS = ["review.example.org"]
    forwarded = {"x_forwarded_proto": "https"}
    assert websocket_origin_allowed(scope=_scope("https://review.example.org", host="review.example.org", **forwarded))
    assert not websocket_origin_allowed(scope=_scope("http://review.example.org", host="review.example.org", **forwarded))
    assert not websocket_origin_allowed(scope=_scope("https://review.example.org", host="review.example.org"))


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_the_asgi_stack_refuses_another_port_of_the_same_host(alice, login):
    client = await database_sync_to_async(login)(alice)
    cookie = (b"cookie", f"sessionid={session_of(client)}".encode())

    async def connect(origin):
        headers = [(b"host", b"127.0.0.1:8001"), (b"origin", origin.encode()), cookie]
        communicator = WebsocketCommunicator(application, "/ws/queue/", headers=headers)
        connected, _ = await communicator.connect(timeout=TIMEOUT)
        await communicator.disconnect()
        return connected

    assert await connect("http://127.0.0.1:8001")
    assert not await connect("http://127.0.0.1:9999")
    assert not await connect("https://127.0.0.1:8001")
