"""webhook_verify: a signed event comes back typed with its delivery id; anything else a request can carry is WebhookInvalid."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks import Webhook

from reviewqueue_client import WebhookInvalid, webhook_verify

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
ITEM = {"id": "5b0f7a52-0000-4000-8000-000000000001", "status": "approved"}
BODY = json.dumps({"type": "item.decided", "timestamp": "2026-12-04T00:00:00+00:00", "data": ITEM})


def _headers(body: str = BODY, *, msg_id: str = "msg_1", at: datetime | None = None) -> dict[str, str]:
    at = at or datetime.now(tz=UTC)
    return {
        "Webhook-Id": msg_id,
        "Webhook-Timestamp": str(int(at.timestamp())),
        "Webhook-Signature": Webhook(SECRET).sign(msg_id, at, body),
    }


def test_a_signed_event_comes_back_typed_with_its_delivery_id_and_a_tampered_one_is_refused():
    event = webhook_verify(secret=SECRET, headers=_headers(), body=BODY.encode())
    assert (event.delivery_id, event.type, event.data["id"]) == ("msg_1", "item.decided", ITEM["id"])
    assert event.timestamp == "2026-12-04T00:00:00+00:00" and event.raw == json.loads(BODY)
    with pytest.raises(WebhookInvalid):
        webhook_verify(secret=SECRET, headers=_headers(), body=BODY.replace("approved", "rejected"))


def test_a_replay_within_five_minutes_verifies_again_with_the_same_delivery_id_and_an_older_one_does_not():
    headers = _headers(at=datetime.now(tz=UTC) - timedelta(minutes=4))
    first, replayed = (webhook_verify(secret=SECRET, headers=headers, body=BODY) for _ in range(2))
    assert first.delivery_id == replayed.delivery_id == "msg_1"  # what a handler de-duplicates on
    with pytest.raises(WebhookInvalid, match="too old"):
        webhook_verify(secret=SECRET, headers=_headers(at=datetime.now(tz=UTC) - timedelta(minutes=6)), body=BODY)


@pytest.mark.parametrize(
    "signature",
    [
        "v1,!!!notbase64",  # not base64: binascii.Error in the library
        "v1,QUJD=",  # base64 with bad padding
        "v1",  # no comma
        "v1,a,b",  # two commas
        "v1,ÿÿÿÿ",  # not ASCII
        "v2,AAAA v1,%%%%",  # a later malformed one
        "",  # empty
    ],
)
def test_a_malformed_signature_header_is_webhook_invalid(signature):
    headers = {**_headers(), "Webhook-Signature": signature}
    with pytest.raises(WebhookInvalid):
        webhook_verify(secret=SECRET, headers=headers, body=BODY)


@pytest.mark.parametrize("timestamp", ["nan", "inf", "1e400", "-1e400", "soon", "", "１２"])
def test_a_malformed_timestamp_is_webhook_invalid(timestamp):
    with pytest.raises(WebhookInvalid):
        webhook_verify(secret=SECRET, headers={**_headers(), "Webhook-Timestamp": timestamp}, body=BODY)


def test_a_body_that_is_not_utf8_or_not_an_event_is_webhook_invalid():
    with pytest.raises(WebhookInvalid):
        webhook_verify(secret=SECRET, headers=_headers(), body=b"\xff\xfe" + BODY.encode())
    for body in ("not json", "[1, 2]", '{"data": {}}', '{"type": "item.decided", "data": [1]}'):
        with pytest.raises(WebhookInvalid):  # signed with the secret, yet not an event
            webhook_verify(secret=SECRET, headers=_headers(body), body=body)
