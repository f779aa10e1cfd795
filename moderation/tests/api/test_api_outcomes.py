"""POST /api/v1/items/{id}/outcome: a remote agent reports what it did with a decision."""

from __future__ import annotations

import pytest

from moderation.api.clients import apiclient_create
from moderation.delivery.models import WebhookDelivery, WebhookEndpoint
from moderation.items.models import QueueItem
from moderation.records.audit import audit_verify
from moderation.records.models import AuditLedgerEntry, OutcomeReport
from moderation.records.timeline import item_timeline
from moderation.review.decisions import item_decide
from moderation.tests.api.test_api_items import Api
from moderation.tests.api.test_api_remote_asks import ASK, EXTERNAL

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_variant]

FAILED = {"status": "failed", "message": "refund API timed out"}


@pytest.fixture
def api():
    return Api(apiclient_create(name="agent", scopes=["items:write", "items:read"])[1])


@pytest.fixture
def decided(api, alice):
    """A pass-through item of ``api``'s client, approved."""
    item_id = api.post("/items", ASK).json()["id"]
    assert item_decide(item_public_id=item_id, reviewer=alice, decisions=[{"type": "approve"}, {"type": "approve"}]).won
    return item_id


def _recorded() -> tuple[int, int, int]:
    """What a report writes: reports, ledger entries, item.outcome deliveries."""
    return (
        OutcomeReport.objects.count(),
        AuditLedgerEntry.objects.count(),
        WebhookDelivery.objects.filter(event="item.outcome").count(),
    )


def test_a_report_is_stored_audited_read_back_sent_and_in_the_history(api, decided):
    WebhookEndpoint.objects.create(name="agent", url="http://agent.test/hooks", events=["item.outcome"])
    ledger = AuditLedgerEntry.objects.count()

    response = api.post(f"/items/{decided}/outcome", FAILED)

    assert response.status_code == 201, response.content
    outcome = response.json()["outcome"]
    assert (outcome["status"], outcome["message"]) == ("failed", "refund API timed out")
    assert api.get(f"/items/{decided}").json()["outcome"] == outcome
    assert AuditLedgerEntry.objects.order_by("-seq").values_list("kind", flat=True)[0] == "outcome"
    assert AuditLedgerEntry.objects.count() == ledger + 1 and audit_verify().problems == []
    (delivery,) = WebhookDelivery.objects.filter(event="item.outcome")
    sent = delivery.payload["data"]
    assert (sent["outcome"]["status"], sent["outcome"]["message"], sent["external"]) == (
        "failed",
        "refund API timed out",
        EXTERNAL,
    )
    entry = item_timeline(item=QueueItem.objects.get(public_id=decided))[-1]
    assert (entry.kind, entry.who, entry.outcome, entry.note) == ("outcome", "agent", "failed", "refund API timed out")

    again = api.post(f"/items/{decided}/outcome", FAILED)

    assert again.status_code == 200 and again.json()["outcome"] == outcome
    assert _recorded() == (1, ledger + 1, 1), "the same report again records nothing"


def test_the_first_report_stands(api, decided):
    api.post(f"/items/{decided}/outcome", {"status": "done"})
    before = _recorded()

    refused = api.post(f"/items/{decided}/outcome", FAILED)

    assert (refused.status_code, refused.json()["error"]) == (409, "outcome_already_reported"), refused.content
    assert _recorded() == before
    assert api.get(f"/items/{decided}").json()["outcome"]["status"] == "done"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"status": "ok"}, 422, "invalid"),
        ({"message": "no status"}, 422, "invalid"),
        ({"status": "done", "message": "x" * 501}, 422, "invalid"),
        ({"status": "done", "message": "nul\u0000"}, 422, "invalid"),
        ({"status": "done", "message": "clear\u001b[2J"}, 422, "invalid"),
        ({"status": "done", "message": 5}, 422, "invalid"),
        ({"status": "done", "extra": 1}, 422, "invalid"),
        ("{not json", 400, "malformed_request"),
        ("[]", 422, "invalid"),
    ],
)
def test_a_bad_report_is_refused_and_changes_nothing(api, decided, body, status, code):
    before = _recorded()

    refused = api.post(f"/items/{decided}/outcome", body)

    assert (refused.status_code, refused.json()["error"]) == (status, code), refused.content
    assert _recorded() == before and api.get(f"/items/{decided}").json()["outcome"] is None


def test_a_pending_item_another_clients_item_and_a_read_only_client_are_refused(api, decided):
    pending = api.post("/items", {**ASK, "external": {**EXTERNAL, "interrupt_id": "b" * 32}}).json()["id"]
    other = Api(apiclient_create(name="other", scopes=["items:write", "items:read"])[1])
    reader = Api(apiclient_create(name="reader", scopes=["items:read"])[1])
    before = _recorded()

    for client, item_id, status, code in [
        (api, pending, 409, "not_decided"),
        (other, decided, 404, "not_found"),
        (api, "6f1f5a52-8c1d-4d6e-9d43-5b9a43d0c001", 404, "not_found"),
        (reader, decided, 403, "scope_missing"),
        (Api(None), decided, 401, "unauthenticated"),
    ]:
        refused = client.post(f"/items/{item_id}/outcome", {"status": "done"})
        assert (refused.status_code, refused.json()["error"]) == (status, code), (item_id, refused.content)
    assert _recorded() == before


def test_the_openapi_schema_documents_the_outcome_and_applied_result(api):
    schema = api.get("/openapi.json").json()
    assert "/api/v1/items/{item_id}/outcome" in schema["paths"]
    item = schema["components"]["schemas"]["ItemOut"]["properties"]
    assert "finished with errors" in item["applied_result"]["properties"]["state"]["enum"]
    assert set(item["applied_result"]["properties"]["errors"]["items"]["required"]) == {"where", "message"}
