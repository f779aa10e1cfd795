"""AsyncReviewQueue against a fake /api/v1 (httpx.MockTransport): the sync client's requests and answers,
its own exception for transport errors, and the bounded retries of what is safe to send again."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from reviewqueue_client import AsyncReviewQueue, ReviewQueueError, ReviewQueueUnreachable

pytestmark = pytest.mark.asyncio

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
DECIDED = {**ITEM, "status": "edited", "resume": {"decisions": [{"type": "approve"}]}}


def _client(handler, **options) -> AsyncReviewQueue:
    return AsyncReviewQueue("http://rq.test/", "tok", transport=httpx.MockTransport(handler), **options)


def _scripted(*answers: httpx.Response | Exception):
    """A handler answering with ``answers`` in turn (an exception is raised, as a dropped connection is),
    the last one from then on; ``handler.seen`` is every request."""
    left = list(answers)

    def handler(request: httpx.Request) -> httpx.Response:
        handler.seen.append((time.monotonic(), request))
        answer = left.pop(0) if len(left) > 1 else left[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    handler.seen = []
    return handler


async def test_it_sends_what_the_sync_client_sends_and_answers_typed_items():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/decision"):
            return httpx.Response(200, json=DECIDED)
        pages = {None: {"items": [ITEM], "next_cursor": "c2"}, "c2": {"items": [{**ITEM, "id": "two"}], "next_cursor": None}}
        return (
            httpx.Response(200, json=pages[request.url.params.get("cursor")])
            if request.method == "GET"
            else httpx.Response(201, json=ITEM)
        )

    async with _client(handler) as client:
        item = await client.submit(
            title="T", body="B", source="agent", ask={"q": 1}, external=ITEM["external"], team="payments", idempotency_key="k"
        )
        listed = [i.id async for i in client.list(graph="ask", status=None)]
        decided = await client.wait(ITEM["id"], timeout=3600)
    submit = seen[0]
    assert (submit.method, str(submit.url)) == ("POST", "http://rq.test/api/v1/items")
    assert submit.headers["Authorization"] == "Bearer tok" and submit.headers["Idempotency-Key"] == "k"
    assert json.loads(submit.content) == {
        "title": "T",
        "body": "B",
        "source": "agent",
        "ask": {"q": 1},
        "external": ITEM["external"],
        "team": "payments",
    }
    assert (item.id, item.decided) == (ITEM["id"], False)
    assert listed == [ITEM["id"], "two"] and [r.url.params.get("cursor") for r in seen[1:3]] == [None, "c2"]
    assert "status" not in seen[1].url.params
    assert decided.decided and float(seen[3].url.params["wait"]) == 60


async def test_a_refusal_is_the_clients_exception_with_the_apis_code_and_is_not_retried():
    handler = _scripted(httpx.Response(409, json={"error": "already_decided", "message": "alice came first"}))
    with pytest.raises(ReviewQueueError) as refused:
        await _client(handler).cancel(ITEM["id"])
    assert (refused.value.status, refused.value.code, refused.value.message) == (409, "already_decided", "alice came first")
    assert len(handler.seen) == 1


async def test_a_transport_error_is_wrapped_in_the_clients_exception_after_bounded_retries():
    handler = _scripted(httpx.ConnectError("connection refused"))
    with pytest.raises(ReviewQueueUnreachable) as unreachable:
        await _client(handler, attempts=2).read(ITEM["id"])
    assert isinstance(unreachable.value, ReviewQueueError) and unreachable.value.transient
    assert (unreachable.value.status, unreachable.value.code) == (0, "unreachable")
    assert isinstance(unreachable.value.__cause__, httpx.ConnectError) and len(handler.seen) == 2


@pytest.mark.parametrize("status", [429, 503])
async def test_a_busy_answer_is_retried_no_sooner_than_its_retry_after(status):
    handler = _scripted(
        httpx.Response(status, headers={"Retry-After": "1"}, json={"error": "busy", "message": "later"}),
        httpx.Response(200, json=DECIDED),
    )
    item = await _client(handler).read(ITEM["id"])
    assert item.status == "edited" and len(handler.seen) == 2
    assert handler.seen[1][0] - handler.seen[0][0] >= 1.0


async def test_retries_are_bounded_and_a_retry_after_beyond_the_bound_ends_them():
    handler = _scripted(httpx.Response(500, text="oops"))
    with pytest.raises(ReviewQueueError) as failed:
        await _client(handler, attempts=3).report_outcome(ITEM["id"], status="done", attempts=3)
    assert failed.value.status == 500 and len(handler.seen) == 3
    busy = _scripted(httpx.Response(503, headers={"Retry-After": "3600"}, json={"error": "busy", "message": "later"}))
    with pytest.raises(ReviewQueueError) as refused:
        await _client(busy).read(ITEM["id"])
    assert (refused.value.retry_after, len(busy.seen)) == (3600.0, 1)


async def test_a_submit_without_a_key_is_given_one_so_its_retry_is_the_same_request():
    handler = _scripted(httpx.ReadTimeout("lost answer"), httpx.Response(201, json=ITEM))
    item = await _client(handler).submit(title="T", body="B", source="forum")
    first, again = (request for _, request in handler.seen)
    assert item.id == ITEM["id"] and first.headers["Idempotency-Key"].startswith("rq-client-")
    assert again.headers["Idempotency-Key"] == first.headers["Idempotency-Key"] and again.content == first.content


async def test_webhook_endpoints_are_managed_and_their_changes_sent_once():
    endpoint = {"id": 7, "name": "prod", "url": "https://agent.example.com/hooks", "events": ["item.decided"], "active": True}
    created = await _client(lambda r: httpx.Response(201, json={**endpoint, "secret": "whsec_abc"})).create_webhook(
        name="prod", url=endpoint["url"], events=["item.decided"]
    )
    assert (created.id, created.secret) == (7, "whsec_abc")
    [listed] = await _client(lambda r: httpx.Response(200, json={"endpoints": [endpoint]})).webhooks()
    assert listed.secret is None
    for change in (lambda c: c.create_webhook(name="prod", url=endpoint["url"]), lambda c: c.delete_webhook(7)):
        handler = _scripted(httpx.Response(503, json={"error": "unavailable", "message": "later"}))
        with pytest.raises(ReviewQueueError):
            await change(_client(handler))
        assert len(handler.seen) == 1  # a retry after a lost answer would be name_taken, not_found
