"""Helpers for websocket tests through the real ASGI stack (origin check, sessions, auth)."""

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.test import Client

from moderation.review.decisions import item_decide
from reviewqueue.asgi import application

ORIGIN = (b"origin", b"http://127.0.0.1")
HOST = (b"host", b"127.0.0.1")  # a browser's socket request always names its host
TIMEOUT = 30  # for one frame that comes unless something is broken: only a failure waits it out


@pytest.fixture(autouse=True)
def fresh_layer(settings):
    # A fresh in-memory layer per test, whatever REDIS_URL says: no groups leak between tests.
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "reviewqueue.channel_layers.InMemoryChannelLayer"}}


@pytest.fixture
def login():
    """A logged-in test client for the user; its session cookie opens sockets."""

    def make(user):
        client = Client()
        client.force_login(user)
        return client

    return make


def session_of(client) -> str:
    return client.cookies[django_settings.SESSION_COOKIE_NAME].value


def socket(path, client=None, *, origin=ORIGIN, app=application):
    headers = [HOST, origin] if origin else [HOST]
    if client is not None:
        headers.append((b"cookie", f"{django_settings.SESSION_COOKIE_NAME}={session_of(client)}".encode()))
    return WebsocketCommunicator(app, path, headers=headers)


async def opened(path, client, *, app=application):
    """Connect and consume the initial state frame; return (communicator, state)."""
    communicator = socket(path, client, app=app)
    connected, code = await communicator.connect(timeout=TIMEOUT)
    assert connected, code
    state = await communicator.receive_json_from(timeout=TIMEOUT)
    assert state["type"] == "state"
    return communicator, state


# Frames that arrive around the ones a test waits for, in no fixed order with them: other
# sockets joining, claims taken and released.
CHATTER = {"presence.changed", "item.claimed", "item.released"}


async def next_of(communicator, kind):
    """The next frame of this type, skipping the chatter of other sockets."""
    while True:
        frame = await communicator.receive_json_from(timeout=TIMEOUT)
        if frame["type"] == kind:
            return frame
        assert frame["type"] in CHATTER, frame


async def silent(communicator):
    """Nothing but presence chatter arrives for a moment."""
    while not await communicator.receive_nothing(timeout=0.3):
        frame = await communicator.receive_json_from(timeout=TIMEOUT)
        assert frame["type"] == "presence.changed", frame


decide = database_sync_to_async(item_decide)


def item_path(item):
    return f"/ws/items/{item.public_id}/"
