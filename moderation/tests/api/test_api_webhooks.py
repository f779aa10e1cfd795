"""/api/v1/webhooks: a client registers, lists and removes its own endpoints; every refusal changes nothing."""

from __future__ import annotations

import httpx
import pytest
from django.test import Client

from moderation.api.clients import apiclient_create
from moderation.delivery.endpoints import CLIENT_ENDPOINTS_MAX
from moderation.delivery.models import SUBSCRIBABLE_EVENTS, WebhookEndpoint
from moderation.tests.api.test_api_items import Api
from reviewqueue_client import ReviewQueue, ReviewQueueError

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_variant]

HOOK = {"name": "prod", "url": "https://hooks.example.com/rq", "events": ["item.decided"]}


def _client_api(name: str, scopes=("items:write", "items:read")) -> Api:
    return Api(apiclient_create(name=name, scopes=list(scopes))[1])


@pytest.fixture
def api():
    return _client_api("agents")


def test_create_answers_the_secret_once_and_it_is_the_one_saved(api):
    created = api.post("/webhooks", HOOK)
    assert created.status_code == 201, created.content
    body = created.json()
    saved = WebhookEndpoint.objects.get(pk=body["id"])
    assert body["secret"] == saved.secret and body["secret"].startswith("whsec_")
    assert (saved.owner.name, saved.url, saved.events, saved.active) == ("agents", HOOK["url"], ["item.decided"], True)
    listed = api.get("/webhooks").json()["endpoints"]
    assert [e["id"] for e in listed] == [body["id"]]
    assert "secret" not in listed[0] and saved.secret not in api.get("/webhooks").content.decode()


def test_events_default_to_every_item_event(api):
    body = api.post("/webhooks", {"name": "all", "url": HOOK["url"]}).json()
    assert body["events"] == list(SUBSCRIBABLE_EVENTS)


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"url": "not a url"}, 422, "url_invalid"),
        ({"url": "ftp://hooks.example.com/"}, 422, "url_invalid"),
        ({"url": "http://10.0.0.5/hook"}, 422, "url_refused"),
        ({"url": "http://169.254.169.254/latest"}, 422, "url_refused"),
        ({"url": "http://localhost:8000/hook"}, 422, "url_refused"),
        ({"events": ["item.decided", "item.exploded"]}, 422, "events_invalid"),
        ({"events": []}, 422, "events_invalid"),
        ({"events": ["webhook.ping"]}, 422, "events_invalid"),
        ({"name": "  "}, 422, "name_invalid"),
        ({"name": "x" * 101}, 422, "name_invalid"),
        ({"name": "a\x00b"}, 422, "name_invalid"),
        ({"secret": "whsec_mine"}, 422, "invalid"),
    ],
)
def test_a_bad_input_is_refused_with_its_code_and_nothing_is_made(api, change, status, code):
    answer = api.post("/webhooks", {**HOOK, **change})
    assert (answer.status_code, answer.json()["error"]) == (status, code), answer.content
    assert not WebhookEndpoint.objects.exists()


def test_a_name_is_unique_per_client_only(api):
    assert api.post("/webhooks", HOOK).status_code == 201
    again = api.post("/webhooks", {**HOOK, "url": "https://other.example.com/"})
    assert (again.status_code, again.json()["error"], again.json()["field"]) == (409, "name_taken", "name")
    assert _client_api("billing").post("/webhooks", HOOK).status_code == 201  # another client's namespace
    WebhookEndpoint.objects.create(name="prod-ops", url=HOOK["url"], events=["item.created"])  # an operator's
    assert api.post("/webhooks", {**HOOK, "name": "prod-ops"}).status_code == 201
    assert WebhookEndpoint.objects.count() == 4


def test_a_client_has_at_most_the_bound_of_endpoints(api):
    for n in range(CLIENT_ENDPOINTS_MAX):
        assert api.post("/webhooks", {**HOOK, "name": f"hook-{n}"}).status_code == 201
    over = api.post("/webhooks", {**HOOK, "name": "one-too-many"})
    assert (over.status_code, over.json()["error"]) == (409, "endpoint_limit")
    assert WebhookEndpoint.objects.count() == CLIENT_ENDPOINTS_MAX
    assert _client_api("billing").post("/webhooks", HOOK).status_code == 201  # the bound is per client


def test_delete_removes_only_the_clients_own_endpoint(api):
    mine = api.post("/webhooks", HOOK).json()["id"]
    theirs = _client_api("billing").post("/webhooks", HOOK).json()["id"]
    operators = WebhookEndpoint.objects.create(name="ops", url=HOOK["url"], events=["item.created"]).pk
    for other in (theirs, operators, 999999):
        answer = api.delete(f"/webhooks/{other}")
        assert (answer.status_code, answer.json()["error"]) == (404, "not_found")
    assert WebhookEndpoint.objects.count() == 3
    assert api.delete(f"/webhooks/{mine}").status_code == 204
    assert set(WebhookEndpoint.objects.values_list("pk", flat=True)) == {theirs, operators}
    assert api.delete(f"/webhooks/{mine}").status_code == 404


def test_a_client_lists_only_its_own(api):
    api.post("/webhooks", HOOK)
    _client_api("billing").post("/webhooks", {**HOOK, "name": "theirs"})
    WebhookEndpoint.objects.create(name="ops", url=HOOK["url"], events=["item.created"])
    assert [e["name"] for e in api.get("/webhooks").json()["endpoints"]] == ["prod"]


@pytest.mark.parametrize(
    ("scopes", "method", "status"),
    [
        (["items:read"], "post", 403),
        (["items:read"], "delete", 403),
        (["items:write"], "get", 403),
        (["items:read"], "get", 200),
    ],
)
def test_scopes(scopes, method, status):
    api = _client_api("narrow", scopes)
    answer = {
        "post": lambda: api.post("/webhooks", HOOK),
        "get": lambda: api.get("/webhooks"),
        "delete": lambda: api.delete("/webhooks/1"),
    }[method]()
    assert answer.status_code == status
    assert not WebhookEndpoint.objects.exists()


def test_no_token_is_401():
    assert Api(None).get("/webhooks").status_code == 401
    assert Api(None).post("/webhooks", HOOK).status_code == 401


def _django_transport() -> httpx.MockTransport:
    """httpx requests answered by Django's test client: the real routes, in the test's transaction."""
    django = Client()

    def answer(request: httpx.Request) -> httpx.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in {"host", "content-length", "content-type"}}
        response = django.generic(
            request.method,
            request.url.raw_path.decode(),
            request.content,
            content_type=request.headers.get("content-type", ""),
            headers=headers,
        )
        return httpx.Response(response.status_code, content=response.content, headers=dict(response.items()))

    return httpx.MockTransport(answer)


def test_the_client_package_manages_endpoints_against_this_api():
    _, token = apiclient_create(name="agents", scopes=["items:write", "items:read"])
    rq = ReviewQueue("http://testserver", token, transport=_django_transport())
    created = rq.create_webhook(name="prod", url=HOOK["url"], events=["item.decided"])
    assert created.secret == WebhookEndpoint.objects.get(pk=created.id).secret
    assert [(e.id, e.secret) for e in rq.webhooks()] == [(created.id, None)]
    with pytest.raises(ReviewQueueError) as refused:
        rq.create_webhook(name="lan", url="http://192.168.1.10/")
    assert (refused.value.status, refused.value.code) == (422, "url_refused")
    rq.delete_webhook(created.id)
    assert rq.webhooks() == []
