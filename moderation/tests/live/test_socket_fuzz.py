"""Property-based: no client frame breaks the dashboard socket or changes anything.

Whatever a client sends (random JSON, JSON objects with made-up or server-only
types, arbitrary text, binary), through the real ASGI stack (origin check,
sessions, auth), every frame gets exactly one answer: a ``state`` for a heartbeat,
else a well-formed ``error`` frame naming what was wrong. The socket stays open and
the database stays as it was (a heartbeat on an item page may only refresh its own
presence time).
"""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async
from django.contrib.sessions.models import Session
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from moderation.core.jsonparse import json_parse
from moderation.items.models import QueueItem
from moderation.live.models import Presence
from moderation.live.sockets import FRAME_MAX_CHARS
from moderation.records.models import DecisionAttempt
from moderation.tests.sockets import TIMEOUT, fresh_layer, item_path, login, opened  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=10,
)
# Real frame types, near misses, and the names of the consumer's server-side handlers.
frame_types = st.one_of(
    st.sampled_from(
        [
            "heartbeat",
            "Heartbeat",
            "heartbeat ",
            " heartbeat",
            "HEARTBEAT",
            "",
            "decide",
            "decision",
            "state",
            "error",
            "relay",
            "connect",
            "disconnect",
            "receive",
            "session.ended",
            "session_ended",
            "item.decided",
            "item_decided",
            "decision.lost",
            "presence.changed",
            "websocket.close",
            "websocket.disconnect",
        ]
    ),
    json_values,
)
object_frames = st.builds(
    lambda extra, kind: json.dumps({**extra, "type": kind}),
    st.dictionaries(st.text(max_size=8), json_values, max_size=3),
    frame_types,
)
edge_texts = st.sampled_from(
    [
        "",
        " ",
        "null",
        "[]",
        "{}",
        '"heartbeat"',
        '{"type": "heartbeat"',
        '{"type": "heartbeat"}}',
        '{"type": "decide", "type": "heartbeat"}',
        '{"type": "heartbeat", "type": "decide"}',
        "\ufeff{}",
        "NaN",
        '{"type": NaN}',
        "1e999",
        "[" * 200 + "]" * 200,
        '{"type": "heartbeat", "item": "../../admin"}',
        "[" * 3000,
        '{"a":' * 1500,
        "[" * 100_000 + "]" * 100_000,
        " " * 5000 + '{"type": "heartbeat"}',
    ]
)
text_frames = st.one_of(json_values.map(json.dumps), object_frames, st.text(max_size=300), edge_texts)
frames = st.one_of(
    text_frames.map(lambda text: {"text_data": text}),
    st.binary(max_size=64).map(lambda data: {"bytes_data": data}),
)


def _expected(frame: dict) -> str:
    """What the frame should get back: "state", or the error code."""
    if "bytes_data" in frame:
        return "bad_frame"
    if len(frame["text_data"]) > FRAME_MAX_CHARS:
        return "frame_too_large"
    try:
        parsed = json_parse(frame["text_data"])
    except (ValueError, RecursionError):
        return "bad_json"
    if not isinstance(parsed, dict):
        return "bad_json"
    return "state" if parsed.get("type") == "heartbeat" else "unknown_type"


@database_sync_to_async
def _database_state() -> tuple:
    return (
        list(
            QueueItem.objects.order_by("id").values_list(
                "status", "decided_by_id", "decided_at", "decision_note", "attention", "attempt_count", "audit_head"
            )
        ),
        DecisionAttempt.objects.count(),
        sorted(Session.objects.values_list("session_key", "expire_date")),
        # Presence rows, not their time: a heartbeat on an item page refreshes it, by design.
        sorted(Presence.objects.values_list("channel_name", "item_id", "user_id")),
    )


async def _answer(communicator) -> dict:
    """The next frame that is not presence chatter (the socket's own join on an item page)."""
    while True:
        frame = await communicator.receive_json_from(timeout=TIMEOUT)
        if frame["type"] != "presence.changed":
            return frame


@hsettings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(on_item=st.booleans(), sent=st.lists(frames, min_size=1, max_size=8))
async def test_any_frame_gets_one_well_formed_answer_and_changes_nothing(alice, make_item, login, on_item, sent):
    # The database is not rolled back between examples: the first one creates the item.
    item = await database_sync_to_async(lambda: QueueItem.objects.first() or make_item())()
    client = await database_sync_to_async(login)(alice)
    communicator, _ = await opened(item_path(item) if on_item else "/ws/queue/", client)
    try:
        before = await _database_state()
        for frame in sent:
            # Raw ASGI input: the communicator's send_to refuses an empty text frame, a browser does not.
            if "bytes_data" in frame:
                await communicator.send_input({"type": "websocket.receive", "bytes": frame["bytes_data"]})
            else:
                await communicator.send_input({"type": "websocket.receive", "text": frame["text_data"]})
            answer = await _answer(communicator)
            expected = _expected(frame)
            if expected == "state":
                assert answer["type"] == "state" and answer["you"] == "alice", (frame, answer)
            else:
                assert set(answer) == {"type", "error", "message"}, (frame, answer)
                assert (answer["type"], answer["error"]) == ("error", expected), (frame, answer)
                assert isinstance(answer["message"], str) and answer["message"], (frame, answer)
        # Exactly one answer per frame, and nothing but presence chatter after them.
        while not await communicator.receive_nothing(timeout=0.02):
            assert (await communicator.receive_json_from(timeout=TIMEOUT))["type"] == "presence.changed"
        assert await _database_state() == before
        # Still open and still working.
        await communicator.send_json_to({"type": "heartbeat"})
        assert (await _answer(communicator))["type"] == "state"
    finally:
        await communicator.disconnect()
