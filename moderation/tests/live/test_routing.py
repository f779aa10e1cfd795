"""Websocket paths nothing serves are refused cleanly, through the real ASGI stack."""

import logging

import pytest
from channels.db import database_sync_to_async

from moderation.tests.sockets import TIMEOUT, fresh_layer, login, socket  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("path", ["/ws/nowhere/", "/", "/ws/items/not-a-uuid/", "/ws/queue/extra/"])
async def test_unrouted_socket_is_refused_without_a_traceback(alice, login, path, caplog):
    client = await database_sync_to_async(login)(alice)
    with caplog.at_level(logging.INFO):
        for who in (None, client):  # anonymous and logged in alike
            connected, code = await socket(path, who).connect(timeout=TIMEOUT)
            assert (connected, code) == (False, 4404)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
