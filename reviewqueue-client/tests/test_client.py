"""The HTTP client against a fake /api/v1 (httpx.MockTransport): what it sends, what it answers, its errors."""

from __future__ import annotations

import json

import httpx
import pytest
from standardwebhooks import Webhook

from reviewqueue_client import ReviewQueue, ReviewQueueError, WebhookInvalid, webhook_verify

ITEM = {"id": "5b0f7a52-0000-4000-8000-000000000001", "status": "pending", "graph": "ask", "external_id": "t:i",
        "external": {"thread_id": "t", "interrupt_id": "i"}, "resume": None, "asks": [], "applied_result": {}}


def _client(handler) -> ReviewQueue:
    return ReviewQueue("http://rq.test/", "tok", transport=httpx.MockTransport(handler))


def test_submit_sends_the_ask_with_the_token_and_answers_a_typed_item():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json=ITEM)

    item = _client(handler).submit(title="T", body="B", source="agent", ask={"q": 1}, external=ITEM["external"],
                                   team="payments", idempotency_key="k")
    [request] = seen
    assert (request.method, str(request.url)) == ("POST", "http://rq.test/api/v1/items")
    assert request.headers["Authorization"] == "Bearer tok" and request.headers["Idempotency-Key"] == "k"
    assert json.loads(request.content) == {"title": "T", "body": "B", "source": "agent", "ask": {"q": 1},
                                           "external": ITEM["external"], "team": "payments"}
    assert (item.id, item.external, item.decided) == (ITEM["id"], ITEM["external"], False)


def test_an_error_is_an_exception_carrying_the_apis_stable_code():
    client = _client(lambda r: httpx.Response(409, json={"error": "already_decided", "message": "alice came first"}))
    with pytest.raises(ReviewQueueError) as refused:
        client.cancel(ITEM["id"])
    assert (refused.value.status, refused.value.code, refused.value.message) == (409, "already_decided", "alice came first")
    with pytest.raises(ReviewQueueError) as broken:
        _client(lambda r: httpx.Response(502, text="bad gateway")).read(ITEM["id"])
    assert (broken.value.status, broken.value.code) == (502, "http_error")


def test_wait_long_polls_until_decided_and_list_follows_cursors():
    answers = iter([httpx.Response(204), httpx.Response(200, json={**ITEM, "status": "decided", "resume": {"type": "approve"}})])
    polls = []

    def poll(request: httpx.Request) -> httpx.Response:
        polls.append(request.url.params["wait"])
        return next(answers)

    item = _client(poll).wait(ITEM["id"], timeout=3600)
    assert item.decided and item.resume == {"type": "approve"} and len(polls) == 2 and float(polls[0]) == 60
    assert _client(lambda r: httpx.Response(204)).wait(ITEM["id"], timeout=0) is None

    pages = {None: {"items": [ITEM], "next_cursor": "c2"}, "c2": {"items": [{**ITEM, "id": "two"}], "next_cursor": None}}
    listed = _client(lambda r: httpx.Response(200, json=pages[r.url.params.get("cursor")])).list(graph="ask")
    assert [i.id for i in listed] == [ITEM["id"], "two"]


def test_webhook_verify_accepts_a_signed_event_and_refuses_a_tampered_one():
    secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = json.dumps({"type": "item.decided", "data": ITEM})
    from datetime import datetime, timezone

    now = datetime.now(tz=timezone.utc)
    headers = {"Webhook-Id": "msg_1", "Webhook-Timestamp": str(int(now.timestamp())),
               "Webhook-Signature": Webhook(secret).sign("msg_1", now, body)}
    assert webhook_verify(secret=secret, headers=headers, body=body)["data"]["id"] == ITEM["id"]
    with pytest.raises(WebhookInvalid):
        webhook_verify(secret=secret, headers=headers, body=body.replace("pending", "decided"))


def test_report_outcome_posts_status_and_message_and_raises_the_apis_codes():
    seen = []
    reported = {**ITEM, "status": "approved", "outcome": {"status": "failed", "message": "CRM down", "reported_at": "2026-01-01T00:00:00Z"}}

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json=reported)

    item = _client(handler).report_outcome(ITEM["id"], status="failed", message="CRM down")
    [request] = seen
    assert (request.method, str(request.url)) == ("POST", f"http://rq.test/api/v1/items/{ITEM['id']}/outcome")
    assert json.loads(request.content) == {"status": "failed", "message": "CRM down"}
    assert item.outcome == reported["outcome"]
    for status, code in [(409, "outcome_already_reported"), (409, "not_decided"), (404, "not_found"), (422, "invalid")]:
        client = _client(lambda r, s=status, c=code: httpx.Response(s, json={"error": c, "message": "no"}))
        with pytest.raises(ReviewQueueError) as refused:
            client.report_outcome(ITEM["id"], status="done")
        assert (refused.value.status, refused.value.code) == (status, code)
