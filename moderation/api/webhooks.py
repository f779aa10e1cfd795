"""/api/v1/webhooks: a client's own webhook endpoints (``moderation.delivery.endpoints``).

Creating and removing needs ``items:write``, listing ``items:read``. The create answers the
signing secret, once; no read shows it again. Another client's endpoint is a 404, as is one
that does not exist.
"""

from __future__ import annotations

from datetime import datetime

from django.http import Http404, HttpRequest
from ninja import Router, Schema, Status
from pydantic import Field

from moderation.api.auth import read_auth, write_auth
from moderation.api.schemas import ErrorOut, Strict
from moderation.delivery.endpoints import client_endpoint_create, client_endpoint_delete, client_endpoints
from moderation.delivery.models import WebhookEndpoint

router = Router(tags=["webhooks"])
_ERRORS = {401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, 422: ErrorOut}


class WebhookEndpointIn(Strict):
    name: str = Field(description="your name for it, unique among your endpoints")
    url: str = Field(description="http(s) URL on a public address (or in the server's WEBHOOK_ALLOWED_NETWORKS)")
    events: list[str] | None = Field(default=None, description="event types to receive; default: every item event")


class WebhookEndpointOut(Schema):
    id: int
    name: str
    url: str
    events: list[str]
    active: bool
    created_at: datetime

    @classmethod
    def of(cls, endpoint: WebhookEndpoint) -> WebhookEndpointOut:
        return cls(
            id=endpoint.pk,
            name=endpoint.name,
            url=endpoint.url,
            events=endpoint.events,
            active=endpoint.active,
            created_at=endpoint.created_at,
        )


class WebhookEndpointCreated(WebhookEndpointOut):
    secret: str = Field(description="the Standard Webhooks signing secret (whsec_...): shown only in this answer")


class WebhookEndpointPage(Schema):
    endpoints: list[WebhookEndpointOut]


@router.post("/webhooks", auth=write_auth, response={201: WebhookEndpointCreated, **_ERRORS})
def webhook_create(request: HttpRequest, data: WebhookEndpointIn):
    """Register an endpoint that receives the events of the items this client submits; its secret is shown once."""
    endpoint = client_endpoint_create(client=request.auth, name=data.name, url=data.url, events=data.events)
    return Status(201, WebhookEndpointCreated(**WebhookEndpointOut.of(endpoint).model_dump(), secret=endpoint.secret))


@router.get("/webhooks", auth=read_auth, response={200: WebhookEndpointPage, **_ERRORS})
def webhook_list(request: HttpRequest):
    """This client's endpoints, oldest first, without their secrets."""
    return WebhookEndpointPage(endpoints=[WebhookEndpointOut.of(e) for e in client_endpoints(client=request.auth)])


@router.delete("/webhooks/{endpoint_id}", auth=write_auth, response={204: None, **_ERRORS})
def webhook_delete(request: HttpRequest, endpoint_id: int):
    """Remove one of this client's endpoints; its unsent deliveries are dropped."""
    if not client_endpoint_delete(client=request.auth, endpoint_id=endpoint_id):
        raise Http404("no such webhook endpoint")
    return Status(204, None)
