"""The HTTP client against a fake /api/v1 (httpx.MockTransport): what it sends, what it answers, its errors."""

from __future__ import annotations

import json

import httpx
import pytest
from api_support import OutcomeServer

from reviewqueue_client import ReviewQueue, ReviewQueueError

ITEM = {
    "id": "5b0f7a52-0000-4000-8000-000000000001",
    "status": "pending",
    "graph": "ask",
    "external_id": "t:i",
    "external": {"thread_id": "t", "interrupt_id": "i"},
    "resume": None,
    "asks": [],
    "applied_result": {},
}


def _client(handler) -> ReviewQueue:
    return ReviewQueue("http://rq.test/", "tok", transport=httpx.MockTransport(handler))


def test_submit_sends_the_ask_with_the_token_and_answers_a_typed_item():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json=ITEM)

    item = _client(handler).submit(
        title="T", body="B", source="agent", ask={"q": 1}, external=ITEM["external"], team="payments", idempotency_key="k"
    )
    [request] = seen
    assert (request.method, str(request.url)) == ("POST", "http://rq.test/api/v1/items")
    assert request.headers["Authorization"] == "Bearer tok" and request.headers["Idempotency-Key"] == "k"
    assert json.loads(request.content) == {
        "title": "T",
        "body": "B",
        "source": "agent",
        "ask": {"q": 1},
        "external": ITEM["external"],
        "team": "payments",
    }
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


def test_report_outcome_posts_status_and_message_and_raises_the_apis_codes():
    seen = []
    reported = {
        **ITEM,
        "status": "approved",
        "outcome": {"status": "failed", "message": "CRM down", "reported_at": "2026-01-01T00:00:00Z"},
    }

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


def test_a_report_that_meets_500s_503s_and_a_dropped_connection_is_sent_again_until_it_is_stored():
    with OutcomeServer(faults=["500", "drop", "503 retry-after 1"]) as api, ReviewQueue(api.url, "tok") as client:
        item = client.report_outcome("it-1", status="done", message="refunded")
    assert len(api.arrivals) == 4 and api.stored == {"status": "done", "message": "refunded"}
    assert item.outcome["status"] == "done"
    assert api.arrivals[3] - api.arrivals[2] >= 1.0  # not sooner than its Retry-After


def test_a_stored_report_sent_again_after_its_answer_was_lost_is_a_success_and_a_refusal_is_not_retried():
    with OutcomeServer(faults=[]) as api, ReviewQueue(api.url, "tok") as client:
        client.report_outcome("it-1", status="done", message="refunded")
        client.report_outcome("it-1", status="done", message="refunded")  # what a retry after a lost answer sends
        with pytest.raises(ReviewQueueError) as refused:
            client.report_outcome("it-1", status="failed", message="other")
    assert refused.value.code == "outcome_already_reported" and len(api.arrivals) == 3


def test_retries_are_bounded_and_a_retry_after_beyond_the_bound_ends_them():
    with (
        OutcomeServer(faults=["500"] * 5) as api,
        ReviewQueue(api.url, "tok") as client,
        pytest.raises(ReviewQueueError) as failed,
    ):
        client.report_outcome("it-1", status="done", attempts=3)
    assert failed.value.status == 500 and len(api.arrivals) == 3 and api.stored is None
    with (
        OutcomeServer(faults=["503 retry-after 3600"]) as api,
        ReviewQueue(api.url, "tok") as client,
        pytest.raises(ReviewQueueError) as busy,
    ):
        client.report_outcome("it-1", status="done")
    assert (busy.value.status, busy.value.retry_after, len(api.arrivals)) == (503, 3600.0, 1)


ENDPOINT = {
    "id": 7,
    "name": "prod",
    "url": "https://agent.example.com/hooks",
    "events": ["item.decided"],
    "active": True,
    "created_at": "2026-12-02T03:00:00Z",
}


def test_create_webhook_sends_name_url_events_and_keeps_the_secret_it_answers_once():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json={**ENDPOINT, "secret": "whsec_abc"})

    endpoint = _client(handler).create_webhook(name="prod", url=ENDPOINT["url"], events=["item.decided"])
    [request] = seen
    assert (request.method, str(request.url)) == ("POST", "http://rq.test/api/v1/webhooks")
    assert json.loads(request.content) == {"name": "prod", "url": ENDPOINT["url"], "events": ["item.decided"]}
    assert (endpoint.id, endpoint.events, endpoint.secret) == (7, ["item.decided"], "whsec_abc")
    assert "whsec_abc" not in repr(endpoint)
    _client(handler).create_webhook(name="all", url=ENDPOINT["url"])
    assert json.loads(seen[-1].content) == {"name": "all", "url": ENDPOINT["url"]}  # the server's default: every event


def test_webhooks_lists_without_secrets_and_delete_webhook_sends_delete():
    requests = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append((request.method, request.url.path))
        if request.method == "DELETE":
            return (
                httpx.Response(204)
                if request.url.path.endswith("/7")
                else httpx.Response(404, json={"error": "not_found", "message": "no such webhook endpoint"})
            )
        return httpx.Response(200, json={"endpoints": [ENDPOINT]})

    client = _client(handler)
    [listed] = client.webhooks()
    assert (listed.id, listed.name, listed.secret) == (7, "prod", None)
    client.delete_webhook(7)
    with pytest.raises(ReviewQueueError) as missing:
        client.delete_webhook(8)
    assert (missing.value.status, missing.value.code) == (404, "not_found")
    assert requests == [("GET", "/api/v1/webhooks"), ("DELETE", "/api/v1/webhooks/7"), ("DELETE", "/api/v1/webhooks/8")]


def test_a_refused_webhook_is_an_exception_with_its_code():
    answer = {"error": "url_refused", "message": "url: the URL's host 10.0.0.5 is refused", "field": "url"}
    with pytest.raises(ReviewQueueError) as refused:
        _client(lambda r: httpx.Response(422, json=answer)).create_webhook(name="x", url="http://10.0.0.5/")
    assert (refused.value.code, refused.value.body["field"]) == ("url_refused", "url")
