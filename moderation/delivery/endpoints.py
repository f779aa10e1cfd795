"""An API client's own webhook endpoints: made, listed and removed by the client (over /api/v1,
or for it by an operator in the admin or with ``manage.py apiclient_webhook``).

Such an endpoint receives only the events of the items its client submitted
(``moderation.delivery.outbox.delivery_record``); the operators' endpoints (no owner) go
on receiving every item's. Its URL is held to the rules of every endpoint
(``moderation.delivery.targets``). Its signing secret is returned by the create, the only
time it is shown; every read leaves it out.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from moderation.core.text import TextInvalid, text_check
from moderation.delivery.models import SUBSCRIBABLE_EVENTS, ApiClient, WebhookEndpoint
from moderation.delivery.targets import webhook_url_check

# Enough for a client's environments and a migration between two receivers; a bound so one
# client cannot make every event fan out to thousands of rows.
CLIENT_ENDPOINTS_MAX = 10
NAME_MAX_LENGTH = 100
URL_MAX_LENGTH = 2000


class EndpointRefused(Exception):
    """A create or remove refused, nothing changed: ``code`` is the API's stable error code."""

    def __init__(self, code: str, message: str, *, http_status: int = 422, field: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.http_status = http_status
        self.field = field


def client_endpoint_create(*, client: ApiClient, name: str, url: str, events: list[str] | None = None) -> WebhookEndpoint:
    """A new active endpoint of ``client`` for ``events`` (default: every subscribable one).

    Checks everything before writing; raises ``EndpointRefused`` (``name_invalid``,
    ``url_invalid``, ``url_refused``, ``events_invalid``, 409 ``name_taken``, 409
    ``endpoint_limit``). Locks the client's row while it counts and inserts, so two creates
    at once cannot both take the last place. The returned endpoint's ``secret`` is the one
    time it is handed out.
    """
    name = _name_clean(name)
    url = _url_clean(url)
    events = _events_clean(list(SUBSCRIBABLE_EVENTS) if events is None else events)
    with transaction.atomic():
        _client_lock(client=client)
        if client_endpoints_full(client=client):
            raise EndpointRefused(
                "endpoint_limit",
                f"a client has at most {CLIENT_ENDPOINTS_MAX} webhook endpoints; remove one first",
                http_status=409,
            )
        if WebhookEndpoint.objects.filter(owner=client, name=name).exists():
            raise EndpointRefused("name_taken", f"you already have an endpoint named {name!r}", http_status=409, field="name")
        try:
            with transaction.atomic():
                return WebhookEndpoint.objects.create(owner=client, name=name, url=url, events=events)
        except IntegrityError:  # the constraint, should the check above ever be bypassed
            raise EndpointRefused(
                "name_taken", f"you already have an endpoint named {name!r}", http_status=409, field="name"
            ) from None


def client_endpoints_full(*, client: ApiClient) -> bool:
    """Whether ``client`` has its ``CLIENT_ENDPOINTS_MAX`` endpoints already."""
    return WebhookEndpoint.objects.filter(owner=client).count() >= CLIENT_ENDPOINTS_MAX


def client_endpoints(*, client: ApiClient) -> list[WebhookEndpoint]:
    return list(WebhookEndpoint.objects.filter(owner=client).order_by("created_at", "id"))


def client_endpoint_delete(*, client: ApiClient, endpoint_id: int) -> bool:
    """Remove ``client``'s endpoint with its deliveries (pending ones are not sent); False if it has none of that id."""
    deleted, _ = WebhookEndpoint.objects.filter(owner=client, pk=endpoint_id).delete()
    return bool(deleted)


def _client_lock(*, client: ApiClient) -> None:
    """The client's row lock, held to the transaction's end: its creates count and insert one at a time."""
    ApiClient.objects.select_for_update().filter(pk=client.pk).first()


def _name_clean(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise EndpointRefused("name_invalid", "name: give the endpoint a name", field="name")
    name = name.strip()
    if len(name) > NAME_MAX_LENGTH:
        raise EndpointRefused("name_invalid", f"name: at most {NAME_MAX_LENGTH} characters", field="name")
    try:
        return text_check(text=name, field="name")
    except TextInvalid as exc:
        raise EndpointRefused("name_invalid", str(exc), field="name") from None


def _url_clean(url: object) -> str:
    if not isinstance(url, str) or len(url) > URL_MAX_LENGTH:
        raise EndpointRefused("url_invalid", f"url: an http(s) URL of at most {URL_MAX_LENGTH} characters", field="url")
    try:
        webhook_url_check(url)
    except ValidationError as exc:
        code = "url_refused" if exc.code == "webhook_target" else "url_invalid"
        raise EndpointRefused(code, f"url: {' '.join(exc.messages)}", field="url") from None
    return url


def _events_clean(events: object) -> list[str]:
    if not isinstance(events, list) or not events or not all(isinstance(e, str) for e in events):
        raise EndpointRefused("events_invalid", "events: a non-empty list of event types", field="events")
    unknown = sorted(set(events) - set(SUBSCRIBABLE_EVENTS))
    if unknown:
        raise EndpointRefused(
            "events_invalid",
            f"events: unknown event types {unknown}; choose from {', '.join(SUBSCRIBABLE_EVENTS)}",
            field="events",
        )
    return list(dict.fromkeys(events))
