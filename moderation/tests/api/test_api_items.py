"""/api/v1 through Django's test client: auth, scopes, submit, idempotency, batch, reads, errors."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from moderation.api.clients import apiclient_create
from moderation.core.checkpointer import checkpointer_get
from moderation.delivery.models import ApiToken
from moderation.items.models import QueueItem, ReviewAsk
from moderation.policies.models import Team
from moderation.policies.teams import team_member_add
from moderation.review.deadlines import deadlines_sweep
from moderation.review.decisions import NotAllowed, item_decide
from moderation.review.starts import item_start, items_start_task
from moderation.review.submissions import METADATA_MAX_BYTES, Submission

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_variant]

ITEM = {"title": "A post", "body": "Some harmless text.", "source": "pipeline"}


@pytest.fixture
def client_token():
    return apiclient_create(name="pipeline", scopes=["items:write", "items:read"])


@pytest.fixture
def api(client_token):
    return Api(client_token[1])


class Api:
    def __init__(self, token: str | None) -> None:
        self.http = Client(enforce_csrf_checks=True)
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def post(self, path: str, payload, **headers):
        body = payload if isinstance(payload, (str, bytes)) else json.dumps(payload)
        return self.http.post(f"/api/v1{path}", body, content_type="application/json", headers={**self.headers, **headers})

    def get(self, path: str, **params):
        return self.http.get(f"/api/v1{path}", params, headers=self.headers)

    def delete(self, path: str):
        return self.http.delete(f"/api/v1{path}", headers=self.headers)


def _thread_exists(public_id: str) -> bool:
    return checkpointer_get().get_tuple({"configurable": {"thread_id": f"item-{public_id}"}}) is not None


def test_submit_creates_an_item_with_its_graph_thread_then_a_retry_returns_it(api):
    first = api.post("/items", {**ITEM, "metadata": {"a": [1, 2]}, "priority": 5}, **{"Idempotency-Key": "k1"})
    assert first.status_code == 201, first.content
    body = first.json()
    assert body["status"] == "pending" and body["metadata"] == {"a": [1, 2]} and body["priority"] == 5
    [ask] = body["asks"]
    assert body["graph"] == "moderation" and ask["status"] == "pending" and ask["round"] == 1
    assert ask["action_requests"][0]["name"] == "publish" and ask["action_requests"][0]["args"]["title"] == "A post"
    assert _thread_exists(body["id"])
    again = api.post("/items", {**ITEM, "metadata": {"a": [1, 2]}, "priority": 5}, **{"Idempotency-Key": "k1"})
    assert again.status_code == 200 and again.json()["id"] == body["id"]
    assert QueueItem.objects.count() == 1
    assert first["Cache-Control"] == "private, no-store"


def test_external_id_alone_makes_a_submit_idempotent(api):
    first = api.post("/items", {**ITEM, "external_id": "post-1"})
    again = api.post("/items", {**ITEM, "external_id": "post-1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]


@pytest.mark.parametrize("header", [True, False])
def test_reused_key_with_other_content_is_409_and_creates_nothing(api, header):
    key = {"Idempotency-Key": "k2"} if header else {}
    extra = {} if header else {"external_id": "post-2"}
    assert api.post("/items", {**ITEM, **extra}, **key).status_code == 201
    clash = api.post("/items", {**ITEM, **extra, "body": "Something else."}, **key)
    assert clash.status_code == 409
    assert clash.json()["error"] == "idempotency_key_reused"
    assert "different content" in clash.json()["message"]
    assert QueueItem.objects.count() == 1


def test_keys_are_per_client(api):
    other = Api(apiclient_create(name="other", scopes=["items:write"])[1])
    a = api.post("/items", ITEM, **{"Idempotency-Key": "same"})
    b = other.post("/items", ITEM, **{"Idempotency-Key": "same"})
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["id"] != b.json()["id"]


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        ({**ITEM, "colour": "red"}, "Extra inputs are not permitted"),
        ({**ITEM, "priority": "high"}, "priority"),
        ({**ITEM, "priority": 10_000}, "priority"),
        ({**ITEM, "title": "x" * 201}, "title"),
        ({**ITEM, "title": "A\x00B"}, "title must not contain NUL"),
        ({**ITEM, "source": "s\x00"}, "source must not contain NUL"),
        ({**ITEM, "external_id": "e\x00"}, "external_id"),
        ({**ITEM, "metadata": {"k": "v\x00"}}, "NUL"),
        ({**ITEM, "metadata": {"k": "x" * METADATA_MAX_BYTES}}, "the limit is 16,384"),
        ({**ITEM, "metadata": {"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}}}, "deeper than 5"),
        ({**ITEM, "metadata": [1]}, "metadata"),
        ({"title": "only a title"}, "body"),
    ],
)
def test_bad_input_is_422_json_and_creates_nothing(api, payload, needle):
    response = api.post("/items", payload)
    assert response.status_code == 422, response.content
    assert response.json()["error"] == "invalid"
    assert needle in response.json()["message"]
    assert not QueueItem.objects.exists()


def test_malformed_json_is_400_json(api):
    response = api.post("/items", "{not json")
    assert response.status_code == 400 and response.json()["error"] == "malformed_request"
    assert not QueueItem.objects.exists()


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_non_finite_number_anywhere_in_a_body_is_400_malformed(api, number):
    """Python's parser took them, and PostgreSQL's jsonb refused the write: a 500."""
    body = '{"title": "t", "body": "b", "source": "s", "metadata": {"score": ' + number + "}}"
    for path in ("/items", "/items:batch"):
        response = api.post(path, body if path == "/items" else '{"items": [' + body + "]}")
        assert response.status_code == 400 and response.json()["error"] == "malformed_request", response.content
    assert not QueueItem.objects.exists()


def test_body_over_item_limit_is_refused_naming_it(api, settings):
    settings.ITEM_BODY_MAX_LENGTH = 10
    response = api.post("/items", {**ITEM, "body": "x" * 11})
    assert response.status_code == 422 and "ITEM_BODY_MAX_LENGTH" in response.json()["message"]


def test_overlong_idempotency_key_is_refused(api):
    response = api.post("/items", ITEM, **{"Idempotency-Key": "k" * 201})
    assert response.status_code == 422 and response.json()["message"].startswith("Idempotency-Key: ")
    assert not QueueItem.objects.exists()


@pytest.mark.parametrize(
    ("method", "path", "payload", "field", "loc"),
    [
        ("post", "/items", {**ITEM, "colour": "red"}, "colour", ["colour"]),
        ("post", "/items", {**ITEM, "policy": {"approvals": 0}}, "policy.approvals", ["policy", "approvals"]),
        ("post", "/items", [ITEM], "request body", []),
        ("post", "/items:batch", {"items": [ITEM, 1]}, "items[1]", ["items", 1]),
        ("post", "/items/{id}/cancel", {"reason": 1}, "reason", ["reason"]),
        ("post", "/items/{id}/cancel", [], "request body", []),
        ("post", "/items/not-a-uuid/cancel", {}, "id", ["id"]),
        ("get", "/items", {"limit": 0}, "limit", ["limit"]),
        ("get", "/items/{id}/decision", {"wait": -1}, "wait", ["wait"]),
    ],
)
def test_a_validation_error_names_the_field_as_the_readme_does(api, method, path, payload, field, loc):
    """ninja's own names for where a value came from ("body.data.title", "query.limit",
    "path.item_id") appear nowhere in the README: the answer names the field as it does."""
    item_id = api.post("/items", ITEM).json()["id"]
    path = path.format(id=item_id)
    response = api.post(path, payload) if method == "post" else api.get(path, **payload)
    assert response.status_code == 422, response.content
    body = response.json()
    assert body["error"] == "invalid" and body["message"].startswith(f"{field}: "), body
    assert [detail["loc"] for detail in body["details"]] == [loc]
    assert QueueItem.objects.get().status == "pending"


@pytest.mark.parametrize("token", [None, "rq_wrong", "garbage with spaces"])
def test_missing_or_unknown_token_is_401(token):
    response = Api(token).post("/items", ITEM)
    assert response.status_code == 401 and response.json()["error"] == "unauthenticated"
    assert not QueueItem.objects.exists()


def test_revoked_token_and_inactive_client_are_401(api, client_token):
    client, _ = client_token
    assert api.get("/items").status_code == 200
    ApiToken.objects.filter(client=client).update(revoked_at=timezone.now())  # what the admin's token field does
    assert api.get("/items").status_code == 401
    ApiToken.objects.filter(client=client).update(revoked_at=None)
    client.is_active = False
    client.save()
    assert api.get("/items").status_code == 401


def test_wrong_scope_is_403():
    reader = Api(apiclient_create(name="reader", scopes=["items:read"])[1])
    response = reader.post("/items", ITEM)
    assert response.status_code == 403 and response.json() == {
        "error": "scope_missing",
        "message": "this token's client lacks the items:write scope",
    }
    writer = Api(apiclient_create(name="writer", scopes=["items:write"])[1])
    assert writer.get("/items").status_code == 403


def test_token_is_stored_hashed_and_last_use_recorded(client_token, api):
    client, token = client_token
    row = ApiToken.objects.get(client=client)
    assert token not in row.digest and len(token) >= 43
    assert row.last_used_at is None
    api.get("/items")
    row.refresh_from_db()
    assert row.last_used_at is not None
    assert not client.user.has_usable_password() and not client.user.groups.exists()


def test_read_shows_decision_and_other_clients_items_are_404(api, alice):
    item_id = api.post("/items", ITEM).json()["id"]
    item_decide(item_public_id=item_id, reviewer=alice, decision="reject", note="spam")
    body = api.get(f"/items/{item_id}").json()
    assert body["status"] == "rejected"
    assert body["decision"]["by"] == "alice" and body["decision"]["note"] == "spam"
    assert [a["status"] for a in body["asks"]] == ["decided"]
    other = Api(apiclient_create(name="nosy", scopes=["items:read"])[1])
    response = other.get(f"/items/{item_id}")
    assert response.status_code == 404 and response.json()["error"] == "not_found"
    assert api.get(f"/items/{uuid.uuid4()}").status_code == 404
    assert api.get("/items/not-a-uuid").json()["error"] == "invalid"


def test_list_filters_and_pages_by_cursor(api, alice):
    ids = [api.post("/items", {**ITEM, "source": "a" if n % 2 else "b"}).json()["id"] for n in range(5)]
    item_decide(item_public_id=ids[0], reviewer=alice, decision="approve")
    seen, cursor = [], None
    while True:
        page = api.get("/items", limit=2, **({"cursor": cursor} if cursor else {})).json()
        seen += [i["id"] for i in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids
    assert [i["id"] for i in api.get("/items", source="a").json()["items"]] == ids[1::2]
    assert [i["id"] for i in api.get("/items", status="approved").json()["items"]] == ids[:1]
    assert [i["id"] for i in api.get("/items", decided_after="2000-01-01T00:00:00Z").json()["items"]] == ids[:1]
    bad = api.get("/items", cursor="!!!")
    assert bad.status_code == 422 and "cursor" in bad.json()["message"]
    assert api.get("/items", status="nonsense").status_code == 422


def test_paging_while_items_are_inserted_neither_skips_nor_repeats(api):
    existing = [api.post("/items", ITEM).json()["id"] for _ in range(6)]
    seen, cursor = [], None
    while True:
        page = api.get("/items", limit=2, **({"cursor": cursor} if cursor else {})).json()
        seen += [i["id"] for i in page["items"]]
        api.post("/items", {**ITEM, "title": "late"})  # lands while we page
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen))
    assert seen[: len(existing)] == existing


def test_batch_gives_each_item_its_outcome(api):
    api.post("/items", {**ITEM, "external_id": "old"})
    items = [
        {**ITEM, "idempotency_key": "b1"},
        {**ITEM, "external_id": "old"},
        {**ITEM, "title": "x\x00"},
        {**ITEM, "unknown": 1},
        {**ITEM, "external_id": "old", "body": "changed"},
        {**ITEM, "idempotency_key": "b2"},
        {**ITEM, "idempotency_key": "nul\x00"},
    ]
    response = api.post("/items:batch", {"items": items})
    assert response.status_code == 200, response.content
    outcomes = [(r["index"], r["outcome"], r["error"]) for r in response.json()["results"]]
    assert outcomes == [
        (0, "created", None),
        (1, "existing", None),
        (2, "invalid", "invalid"),
        (3, "invalid", "invalid"),
        (4, "invalid", "idempotency_key_reused"),
        (5, "created", None),
        (6, "invalid", "invalid"),
    ]
    assert QueueItem.objects.count() == 3
    retry = api.post("/items:batch", {"items": items})
    assert [r["outcome"] for r in retry.json()["results"]][:2] == ["existing", "existing"]
    assert QueueItem.objects.count() == 3


@pytest.mark.parametrize("start", ["now", "queued"])
def test_a_nul_in_any_text_of_a_batch_entry_is_that_entrys_invalid_before_any_lookup(api, settings, alice, start):
    """The team and requested_by lookups ran before the field checks: a 500 on PostgreSQL for the whole batch."""
    settings.REVIEWQUEUE_APPLY_INLINE = False
    fields = ["title", "body", "source", "external_id", "team", "requested_by", "graph", "idempotency_key"]
    items = [{**ITEM, field: "a\x00b"} for field in fields] + [{**ITEM, "requested_by": "alice"}]
    response = api.post("/items:batch", {"items": items, "start": start})
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert [(r["outcome"], r["error"]) for r in results[:-1]] == [("invalid", "invalid")] * len(fields)
    for field, result in zip(fields, results, strict=False):
        assert field in result["message"] and ("NUL" in result["message"] or field == "graph"), result
    assert results[-1]["outcome"] == ("created" if start == "now" else "accepted")
    assert QueueItem.objects.count() == 1


def test_a_nul_in_a_list_filter_is_422_naming_it(api):
    api.post("/items", ITEM)
    for name in ("source", "external_id", "graph"):
        response = api.get("/items", **{name: "a\x00"})
        assert response.status_code == 422 and name in response.json()["message"], response.content
        assert "NUL" in response.json()["message"]


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("messages", [5, {"role": "user"}, [{"content": "no role"}]])
def test_a_graph_that_raises_at_its_start_is_422_with_its_message_and_leaves_nothing(api, keyed, messages, monkeypatch):
    """It was a 500 with a traceback."""
    # Keys fix thread ids, and the checkpointer outlives each test's database: a fresh key per run.
    headers = {"Idempotency-Key": uuid.uuid4().hex} if keyed else {}
    refund = {**ITEM, "graph": "refund_agent", "input": {"messages": messages}}
    with monkeypatch.context() as patched:
        public_id = uuid.uuid4()
        patched.setattr("moderation.review.items.uuid.uuid4", lambda: public_id)
        response = api.post("/items", refund, **headers)
    assert response.status_code == 422 and response.json()["error"] == "invalid", response.content
    assert response.json()["message"].startswith("input: the refund_agent graph refused its start: ")
    assert "Traceback" not in response.json()["message"]
    assert keyed or not _thread_exists(str(public_id))  # the failed start's checkpoint is gone too
    batch = api.post("/items:batch", {"items": [refund, ITEM]}).json()["results"]
    assert [r["outcome"] for r in batch] == ["invalid", "created"] and "refused its start" in batch[0]["message"]
    assert QueueItem.objects.count() == 1 and not DBTaskResult.objects.exists()
    submitted = {**refund, "input": {"messages": [{"role": "user", "content": "refund A-17"}]}}
    assert api.post("/items", submitted, **headers).status_code == 201  # the same key, once the input is right


def test_queued_batch_answers_starting_items_that_enter_the_queue_once_started(api, settings, alice):
    settings.REVIEWQUEUE_APPLY_INLINE = False  # the worker's start runs when the test says
    key = uuid.uuid4().hex
    items = [
        {**ITEM, "idempotency_key": f"{key}-1"},
        {**ITEM, "priority": 5000},
        {**ITEM, "unknown": 1},
        {**ITEM, "idempotency_key": f"{key}-2", "metadata": {"n": 2}},
    ]
    response = api.post("/items:batch", {"items": items, "start": "queued"})
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert [(r["index"], r["outcome"], r["error"]) for r in results] == [
        (0, "accepted", None),
        (1, "invalid", "invalid"),
        (2, "invalid", "invalid"),
        (3, "accepted", None),
    ]
    assert "priority" in results[1]["message"] and "unknown" in results[2]["message"]
    first = results[0]["item"]
    assert (first["status"], first["asks"]) == ("starting", [])
    assert results[3]["item"]["metadata"] == {"n": 2}
    refused = api.post(f"/items/{first['id']}/cancel", {"reason": "too early"})
    assert refused.status_code == 409 and refused.json()["error"] == "starting"
    retry = api.post("/items:batch", {"items": items, "start": "queued"}).json()["results"]
    assert [r["outcome"] for r in retry] == ["existing", "invalid", "invalid", "existing"]
    assert QueueItem.objects.count() == 2

    for item in QueueItem.objects.all():
        item_start(item_id=item.pk)
    started = api.get(f"/items/{first['id']}").json()
    assert started["status"] == "pending" and len(started["asks"]) == 1
    assert item_decide(item_public_id=first["id"], reviewer=alice, decision="approve").won


def test_queued_submit_answers_202_starting_then_the_worker_puts_it_in_the_queue(api, settings, alice):
    settings.REVIEWQUEUE_APPLY_INLINE = False  # the worker's start runs when the test says
    key = {"Idempotency-Key": uuid.uuid4().hex}
    response = api.post("/items", {**ITEM, "start": "queued"}, **key)
    assert response.status_code == 202, response.content
    item = response.json()
    assert (item["status"], item["asks"]) == ("starting", [])
    assert not _thread_exists(item["id"])
    [task] = DBTaskResult.objects.filter(task_path=items_start_task.module_path)
    assert task.args_kwargs["args"] == [[QueueItem.objects.get().pk]]
    again = api.post("/items", {**ITEM, "start": "queued"}, **key)
    assert (again.status_code, again.json()["id"]) == (200, item["id"])
    other = api.post("/items", {**ITEM, "title": "Other", "start": "queued"}, **key)
    assert other.status_code == 409 and other.json()["error"] == "idempotency_key_reused"
    assert api.post(f"/items/{item['id']}/cancel", {}).json()["error"] == "starting"

    item_start(item_id=QueueItem.objects.get().pk)
    started = api.get(f"/items/{item['id']}").json()
    assert started["status"] == "pending" and len(started["asks"]) == 1 and _thread_exists(item["id"])
    assert item_decide(item_public_id=item["id"], reviewer=alice, decision="approve").won
    assert DBTaskResult.objects.filter(task_path=items_start_task.module_path).count() == 1


def test_queued_submit_refuses_what_a_submit_refuses_and_changes_nothing(api, settings):
    settings.ITEM_BODY_MAX_LENGTH = 50
    too_long = api.post("/items", {**ITEM, "body": "x" * 51, "start": "queued"})
    assert too_long.status_code == 422 and "50" in too_long.json()["message"]
    unknown = api.post("/items", {**ITEM, "start": "later"})
    assert unknown.status_code == 422 and "start" in unknown.json()["message"]
    assert not QueueItem.objects.exists() and not DBTaskResult.objects.exists()


def test_batch_start_must_be_now_or_queued(api):
    response = api.post("/items:batch", {"items": [ITEM], "start": "later"})
    assert response.status_code == 422 and "start" in response.json()["message"]
    assert not QueueItem.objects.exists()


def test_batch_over_500_is_refused_whole(api):
    response = api.post("/items:batch", {"items": [ITEM] * 501})
    assert response.status_code == 422 and "500" in response.json()["message"]
    assert not QueueItem.objects.exists()


def test_decision_without_wait_is_204_then_200(api, alice):
    item_id = api.post("/items", ITEM).json()["id"]
    assert api.get(f"/items/{item_id}/decision").status_code == 204
    item_decide(item_public_id=item_id, reviewer=alice, decision="approve")
    response = api.get(f"/items/{item_id}/decision", wait=5)
    assert response.status_code == 200 and response.json()["decision"]["status"] == "approved"


def test_openapi_schema_and_docs_work_under_the_csp():
    schema = Client().get("/api/v1/openapi.json")
    assert schema.status_code == 200
    assert "/api/v1/items:batch" in schema.json()["paths"]
    docs = Client().get("/api/v1/docs")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "cdn" not in html.lower() and "/static/ninja/swagger-ui-bundle.js" in html
    assert "script-src 'self'" in docs["Content-Security-Policy"]
    for line in html.splitlines():
        # The only inline <script> is JSON (type=application/json), which the CSP does not run.
        if "<script" in line and "src=" not in line:
            assert 'type="application/json"' in line


def test_session_decision_endpoint_still_needs_csrf(alice, make_item):
    item = make_item()
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    response = browser.post(f"/api/items/{item.public_id}/decision", {"decision": "approve"})
    assert response.status_code == 403


def test_apiclient_create_command_prints_the_token_once(capsys):
    call_command("apiclient_create", "cli", "--scope", "items:read")
    token = capsys.readouterr().out.strip()
    assert Api(token).get("/items").status_code == 200
    assert Api(token).post("/items", ITEM).status_code == 403


def test_negative_wait_is_422(api):
    item_id = api.post("/items", ITEM).json()["id"]
    response = api.get(f"/items/{item_id}/decision", wait=-1)
    assert response.status_code == 422 and response.json()["error"] == "invalid"


def test_admin_creates_a_client_with_its_service_account_and_shows_the_token_once(admin_client):
    response = admin_client.post(
        "/admin/moderation/apiclient/add/",
        {"name": "agent", "scopes": ["items:read"], "is_active": "on", "tokens-TOTAL_FORMS": "0", "tokens-INITIAL_FORMS": "0"},
        follow=True,
    )
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"] if "shown only now" in str(m)]
    token = shown[0].rsplit(" ", 1)[1]
    assert Api(token).get("/items").status_code == 200
    client = ApiToken.objects.get().client
    assert client.name == "agent" and client.user.username == "api.agent" and client.scopes == ["items:read"]


def test_cancel_withdraws_through_the_guard_and_a_retry_answers_the_same(api, client_token, alice):
    item_id = api.post("/items", ITEM).json()["id"]
    cancelled = api.post(f"/items/{item_id}/cancel", {"reason": "sent by mistake"})
    assert cancelled.status_code == 200, cancelled.content
    body = cancelled.json()
    assert (body["status"], body["decision"]["by"], body["decision"]["note"]) == ("withdrawn", "api.pipeline", "sent by mistake")
    assert api.post(f"/items/{item_id}/cancel", {}).status_code == 200  # a retry: still this client's withdrawal
    lost = item_decide(item_public_id=item_id, reviewer=alice, decision="approve")
    assert not lost.won and lost.message().startswith("Already withdrawn by api.pipeline")


def test_cancel_without_a_body_is_a_cancel_with_no_reason(api):
    item_id = api.post("/items", ITEM).json()["id"]
    cancelled = api.http.generic("POST", f"/api/v1/items/{item_id}/cancel", headers=api.headers)  # curl -X POST
    assert cancelled.status_code == 200, cancelled.content
    body = cancelled.json()
    assert (body["status"], body["decision"]["by"], body["decision"]["note"]) == ("withdrawn", "api.pipeline", "")


def test_cancel_after_a_moderator_decided_is_409_naming_them(api, alice):
    item_id = api.post("/items", ITEM).json()["id"]
    item_decide(item_public_id=item_id, reviewer=alice, decision="reject")
    lost = api.post(f"/items/{item_id}/cancel", {})
    assert lost.status_code == 409
    body = lost.json()
    assert (body["error"], body["winner"], body["status"]) == ("already_decided", "alice", "rejected")
    assert body["message"].startswith("Already reviewed by alice (rejected,")
    assert QueueItem.objects.get(public_id=item_id).status == "rejected"


@pytest.mark.parametrize(
    ("payload", "status", "error"),
    [
        ({"reason": "x\u0000"}, 400, "invalid_decision"),
        ({"reason": "x" * 2001}, 400, "invalid_decision"),
        ({"why": "typo"}, 422, "invalid"),
        ("not json", 400, "malformed_request"),
    ],
)
def test_cancel_bad_input_changes_nothing(api, payload, status, error):
    item_id = api.post("/items", ITEM).json()["id"]
    refused = api.post(f"/items/{item_id}/cancel", payload)
    assert (refused.status_code, refused.json()["error"]) == (status, error), refused.content
    assert QueueItem.objects.get(public_id=item_id).status == "pending"


def test_cancel_needs_the_write_scope_and_the_clients_own_item(api, make_item):
    reader = Api(apiclient_create(name="reader", scopes=["items:read"])[1])
    item_id = api.post("/items", ITEM).json()["id"]
    assert reader.post(f"/items/{item_id}/cancel", {}).json()["error"] == "scope_missing"
    other = Api(apiclient_create(name="other", scopes=["items:write"])[1])
    assert other.post(f"/items/{item_id}/cancel", {}).status_code == 404
    moderators_item = make_item()
    assert api.post(f"/items/{moderators_item.public_id}/cancel", {}).status_code == 404
    assert QueueItem.objects.get(public_id=item_id).status == "pending"


# Approval policies through the API (README "Approval policies").


def test_a_digest_without_policy_fields_is_what_it_was_before_them():
    # Pinned: items submitted before policies existed must still match their retries.
    legacy = Submission(title="A post", body="Some harmless text.", source="pipeline", external_id="post-1", metadata={"a": 1})
    assert legacy.digest() == "e0f2338999980d4dd88753666ddbe10ed7d371735b2a1addb214a7661e613d28"
    for extra in ({"team": "payments"}, {"policy": {"approvals": 2}}, {"requested_by": "carol"}):
        assert Submission(**{**legacy.__dict__, **extra}).digest() != legacy.digest()
    assert Submission(**{**legacy.__dict__, "policy": {}}).digest() == legacy.digest()


def test_submit_with_a_policy_shows_team_requester_and_the_tally_as_it_grows(api, payments, alice, bob):
    payload = {
        **ITEM,
        "team": "payments",
        "requested_by": "carol",
        "policy": {"approvals": 2, "deadline_seconds": 600, "on_deadline": "reject"},
    }
    created = api.post("/items", payload, **{"Idempotency-Key": "p1"})
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["team"], body["requested_by"], body["escalated_at"]) == ("payments", "carol", None)
    assert body["policy"] == {"approvals": 2, "majority": False, "veto": False, "deadline_seconds": 600, "on_deadline": "reject"}
    [ask] = body["asks"]
    assert body["deadline_at"] == ask["deadline_at"] is not None
    assert ask["tally"] == {
        "needed": 2,
        "eligible": 2,
        "veto": False,
        "votes": [],
        "resolution": None,
        "why": None,
        "summary": "0 of 2 approvals",
    }
    assert ask["resolution"] is None
    assert api.post("/items", payload, **{"Idempotency-Key": "p1"}).status_code == 200
    assert api.post("/items", {**payload, "requested_by": "bob"}, **{"Idempotency-Key": "p1"}).status_code == 409

    carol = get_user_model().objects.get(username="carol")
    with pytest.raises(NotAllowed, match="four eyes"):
        item_decide(item_public_id=body["id"], reviewer=carol, decision="approve")
    item_decide(item_public_id=body["id"], reviewer=alice, decision="approve")
    [ask] = api.get(f"/items/{body['id']}").json()["asks"]
    assert [(v["voter"], v["vote"]) for v in ask["tally"]["votes"]] == [("alice", "approve")]
    assert (ask["status"], ask["tally"]["summary"], ask["resolution"]) == ("pending", "1 of 2 approvals: alice", None)

    item_decide(item_public_id=body["id"], reviewer=bob, decision="approve")
    [listed] = api.get("/items", status="approved").json()["items"]
    [ask] = listed["asks"]
    assert (ask["resolution"], ask["tally"]["resolution"], ask["tally"]["why"]) == ("quorum", "approve", "quorum")
    assert [v["voter"] for v in ask["tally"]["votes"]] == ["alice", "bob"] and listed["deadline_at"] is None
    frozen = QueueItem.objects.get(public_id=body["id"]).asks.get().tally  # the guard's, not recounted
    assert ask["tally"]["summary"] == frozen["summary"] == "2 of 2 approvals: alice, bob — approved"


def test_a_deadline_and_an_escalation_show_in_the_item(api, payments, make_moderator):
    leads = Team.objects.create(slug="leads", name="Leads")
    team_member_add(team=leads, user=make_moderator("boss"))
    payments.escalate_to = leads
    payments.allow_weaker_policies = True  # its items bring their own deadlines
    payments.save()
    escalating = api.post(
        "/items", {**ITEM, "team": "payments", "policy": {"deadline_seconds": 60, "on_deadline": "escalate"}}
    ).json()
    settling = api.post(
        "/items", {**ITEM, "team": "payments", "policy": {"deadline_seconds": 60, "on_deadline": "approve"}}
    ).json()
    ReviewAsk.objects.update(deadline_at=timezone.now() - timedelta(seconds=1))
    assert deadlines_sweep() == 2
    moved = api.get(f"/items/{escalating['id']}").json()
    assert (moved["team"], moved["priority"], moved["status"]) == ("leads", 10, "pending")
    assert moved["escalated_at"] is not None and moved["deadline_at"] is None
    settled = api.get(f"/items/{settling['id']}").json()
    assert (settled["status"], settled["decision"]["by"], settled["asks"][0]["resolution"]) == (
        "approved",
        "deadline",
        "deadline",
    )
    assert settled["asks"][0]["tally"] is None  # one decision settles it: no votes counted


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"requested_by": "nobody"}, "requested_by: no user named 'nobody' on this server"),
        ({"team": "nosuch"}, "team: no team 'nosuch'"),
        (
            {"team": "payments", "policy": {"approvals": 4}},
            "policy.approvals: 4 approvals can never be reached: team Payments has 3 moderator(s) who may vote",
        ),
        # Four eyes: the requester is not one of the moderators who may vote.
        (
            {"team": "payments", "requested_by": "alice", "policy": {"approvals": 3}},
            "policy.approvals: 3 approvals can never be reached: team Payments has 2 moderator(s) who may vote",
        ),
        ({"policy": {"approvals": 0}}, "policy.approvals"),
        ({"policy": {"approvals": True}}, "policy.approvals"),
        ({"policy": {"quorum": 2}}, "policy.quorum"),
        ({"policy": {"on_deadline": "approve"}}, "policy.deadline_seconds: on_deadline needs deadline_seconds"),
        ({"team": "payments", "policy": {"deadline_seconds": 5, "on_deadline": "escalate"}}, "policy.on_deadline"),
        ({"policy": {"on_deadline": "shrug", "deadline_seconds": 5}}, "policy.on_deadline"),
    ],
)
def test_a_bad_policy_is_422_naming_its_field_and_creates_nothing(api, payments, extra, needle):
    response = api.post("/items", {**ITEM, **extra})
    assert response.status_code == 422, response.content
    assert response.json()["error"] == "invalid" and needle in response.json()["message"]
    batch = api.post("/items:batch", {"items": [{**ITEM, **extra}, ITEM]}).json()["results"]
    assert [(r["outcome"], needle in (r["message"] or "")) for r in batch] == [("invalid", True), ("created", False)]
    assert QueueItem.objects.count() == 1  # the batch's good item alone


def test_a_submitter_may_make_a_teams_policy_stricter_never_weaker(api, payments, make_moderator):
    leads = Team.objects.create(slug="leads", name="Leads")
    team_member_add(team=leads, user=make_moderator("boss"))
    Team.objects.filter(pk=payments.pk).update(
        approvals=2, veto=True, deadline_seconds=3600, on_deadline="escalate", escalate_to=leads
    )
    # The probe's item: one approval, no veto, approved by a one-second deadline, no human involved.
    weaker = {
        **ITEM,
        "team": "payments",
        "policy": {"approvals": 1, "veto": False, "deadline_seconds": 1, "on_deadline": "approve"},
    }
    refused = api.post("/items", weaker)
    assert refused.status_code == 422, refused.content
    assert refused.json()["message"] == (
        "policy.approvals: a submitter may make the policy of team Payments (unless the team allows weaker policies) "
        "stricter, never weaker: approvals 1 is fewer than its 2; its veto cannot be turned off; on_deadline approve "
        "approves without a moderator; it has escalate after 3600 s"
    )
    [outcome] = api.post("/items:batch", {"items": [weaker]}).json()["results"]
    assert (outcome["outcome"], outcome["message"]) == ("invalid", refused.json()["message"])
    assert not QueueItem.objects.exists()

    stricter = api.post(
        "/items", {**ITEM, "team": "payments", "policy": {"approvals": 3, "deadline_seconds": 60, "on_deadline": "reject"}}
    )
    assert stricter.status_code == 201, stricter.content
    assert stricter.json()["policy"] == {
        "approvals": 3,
        "majority": False,
        "veto": True,
        "deadline_seconds": 60,
        "on_deadline": "reject",
    }
    Team.objects.filter(pk=payments.pk).update(allow_weaker_policies=True)
    allowed = api.post("/items", weaker)
    assert allowed.status_code == 201 and allowed.json()["policy"]["on_deadline"] == "approve"


def test_the_openapi_schema_documents_policies_and_tallies():
    schemas = Client().get("/api/v1/openapi.json").json()["components"]["schemas"]
    assert {"team", "policy", "requested_by", "start"} <= set(schemas["ItemSubmitIn"]["properties"])
    assert set(schemas["PolicyIn"]["properties"]) == {"approvals", "majority", "veto", "deadline_seconds", "on_deadline"}
    assert {"team", "policy", "requested_by", "deadline_at", "escalated_at"} <= set(schemas["ItemOut"]["properties"])
    assert {"deadline_at", "tally", "resolution"} <= set(schemas["AskOut"]["properties"])
    assert {"needed", "eligible", "veto", "votes", "resolution", "why", "summary"} == set(schemas["TallyOut"]["properties"])
