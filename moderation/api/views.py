"""/api/v1 operations: translate HTTP to moderation services and back, errors as {"error", "message"}."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from ninja import Header, NinjaAPI, Query, Status, Swagger
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser
from psycopg_pool import PoolTimeout
from pydantic import ValidationError as PydanticValidationError

from moderation.api.auth import ScopeMissing, read_auth, write_auth
from moderation.api.longpoll import item_decision_wait, item_undecided
from moderation.api.schemas import (
    BatchIn,
    BatchItemIn,
    BatchOut,
    BatchOutcome,
    CancelIn,
    CancelLost,
    ErrorOut,
    ItemIn,
    ItemOut,
    ItemPage,
    ItemSubmitIn,
    OutcomeIn,
    QueryText,
)
from moderation.api.webhooks import router as webhooks_router
from moderation.core.bulkhead import outside_yield
from moderation.core.cursors import CursorInvalid, cursor_make, cursor_read
from moderation.core.jsonparse import json_parse
from moderation.core.overload import database_unavailable_response, pool_exhausted
from moderation.delivery.endpoints import EndpointRefused
from moderation.items.models import ItemStatus
from moderation.live.waits import WaitRefused
from moderation.records.models import AttemptOrigin
from moderation.records.outcomes import DecisionOutcome
from moderation.records.selectors import (
    client_item_get,
    client_items_page,
    client_items_prefetch,
)
from moderation.review.decisions import DecisionError, item_withdraw
from moderation.review.deployments import deployment_verify, deployment_webhook
from moderation.review.outcomes import OutcomeRefused, item_outcome_report
from moderation.review.submissions import (
    KEY_MAX_LENGTH,
    Accepted,
    IdempotencyConflict,
    Submission,
    item_submit,
    items_accept,
)

LONGPOLL_MAX_SECONDS = 60
PAGE_MAX = 200
ERRORS: dict[int | str, Any] = {
    400: ErrorOut,
    401: ErrorOut,
    403: ErrorOut,
    404: ErrorOut,
    409: ErrorOut,
    413: ErrorOut,
    422: ErrorOut,
    503: ErrorOut,
}


class _Parser(Parser):
    """Bodies read as every JSON the product reads: ``NaN`` or ``1e999`` is a 400, not a 500 at the database."""

    def parse_body(self, request: HttpRequest) -> Any:
        return json_parse(request.body)


api = NinjaAPI(
    parser=_Parser(),
    title="reviewqueue",
    version="1",
    urls_namespace="api-v1",
    # Swagger UI from ninja's own static files (ninja is in INSTALLED_APPS), not a CDN:
    # the page then loads only our scripts, as the CSP demands.
    docs=Swagger(settings={"persistAuthorization": False}),
    docs_url="/docs",
    openapi_url="/openapi.json",
)
api.add_router("", webhooks_router)


def _error(request: HttpRequest, status: int, code: str, message: str, **extra: Any) -> HttpResponse:
    return api.create_response(request, {"error": code, "message": message, **extra}, status=status)


def _field_name(loc: Sequence[str | int]) -> str:
    """A value's place as the README names it: ``policy.approvals``, ``items[0]``."""
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else f"{'.' if name else ''}{part}"
    return name or "request body"


def _field_errors(errors: list[dict[str, Any]]) -> str:
    return "; ".join(f"{_field_name(e.get('loc', ()))}: {e.get('msg', '')}" for e in errors)


# ninja locates a bad value by where it came from and the view's own parameter names
# ("body.data.title", "path.item_id"), names no client sees: the README's are the JSON
# body's fields, the query's and header's own names, and the path's {id}.
_PATH_NAMES = {"item_id": "id", "endpoint_id": "id"}


def _documented_loc(loc: Sequence[str | int]) -> tuple[str | int, ...]:
    source, *rest = loc
    if source == "body":
        return tuple(rest[1:])  # rest[0]: the view's parameter holding the whole body
    if source == "path" and rest:
        return (_PATH_NAMES.get(rest[0], rest[0]), *rest[1:])
    return tuple(rest)


@api.exception_handler(ValidationError)
def _invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = [{**e, "loc": list(_documented_loc(e.get("loc") or ("body",)))} for e in exc.errors]
    return _error(request, 422, "invalid", _field_errors(errors), details=errors)


@api.exception_handler(DjangoValidationError)
def _invalid_service(request: HttpRequest, exc: DjangoValidationError) -> HttpResponse:
    return _error(request, 422, "invalid", _django_message(exc))


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    # Missing, unknown, revoked or the client deactivated: one answer, nothing to probe.
    return _error(request, 401, "unauthenticated", "send Authorization: Bearer <token> with a live API token")


@api.exception_handler(ScopeMissing)
def _forbidden(request: HttpRequest, exc: ScopeMissing) -> HttpResponse:
    return _error(request, 403, "scope_missing", str(exc))


@api.exception_handler(OperationalError)
@api.exception_handler(PoolTimeout)  # the checkpointer's pool, unwrapped
def _database_unavailable(request: HttpRequest, exc: OperationalError | PoolTimeout) -> HttpResponse:
    # ninja answers a view's exceptions itself: the pool's timeout is answered as the middleware does.
    if not pool_exhausted(exc):
        raise exc
    return database_unavailable_response(request)


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return _error(request, 404, "not_found", str(exc) or "no such item")


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    # ninja raises HttpError(400) for a body that is not JSON.
    code = "malformed_request" if exc.status_code == 400 else "http_error"
    return _error(request, exc.status_code, code, exc.message)


@api.exception_handler(DecisionError)
@api.exception_handler(OutcomeRefused)
@api.exception_handler(EndpointRefused)
def _refused(request: HttpRequest, exc: DecisionError | OutcomeRefused | EndpointRefused) -> HttpResponse:
    # A service's own refusals (the guard's: busy, needs attention, a bad reason; an outcome
    # report's; a webhook endpoint's), each with its code, status and field.
    return _error(request, exc.http_status, exc.code, str(exc), **({"field": exc.field} if exc.field else {}))


@api.exception_handler(IdempotencyConflict)
def _conflict(request: HttpRequest, exc: IdempotencyConflict) -> HttpResponse:
    return _error(request, 409, "idempotency_key_reused", str(exc))


def _django_message(exc: DjangoValidationError) -> str:
    if hasattr(exc, "message_dict"):
        return "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in exc.message_dict.items())
    return " ".join(exc.messages)


def _submission(data: ItemIn) -> Submission:
    return Submission(
        title=data.title,
        body=data.body,
        source=data.source,
        external_id=data.external_id,
        metadata=data.metadata,
        priority=data.priority,
        graph=data.graph,
        graph_input=data.input,
        team=data.team,
        policy=data.policy.model_dump(exclude_unset=True) if data.policy else None,
        requested_by=data.requested_by,
        ask=data.ask,
        external=data.external.model_dump(exclude_none=True) if data.external else None,
        context=data.context.model_dump(exclude_none=True) if data.context else None,
    )


@api.post("/items", auth=write_auth, response={200: ItemOut, 201: ItemOut, 202: ItemOut, **ERRORS}, tags=["items"])
def items_submit(
    request: HttpRequest,
    data: ItemSubmitIn,
    idempotency_key: str | None = Header(None, alias="Idempotency-Key", min_length=1, max_length=KEY_MAX_LENGTH),
):
    """Submit an item; with an Idempotency-Key (or an external_id) a retry answers 200 with the same item.

    ``start: "queued"`` answers 202 at once with the item "starting", as a queued batch does.
    """
    if data.start == "queued":
        (accepted,) = items_accept(client=request.auth, entries=[(_submission(data), idempotency_key)])
        if accepted.error is not None:
            raise accepted.error
        return Status(202 if accepted.created else 200, ItemOut.of(accepted.item))
    result = item_submit(client=request.auth, submission=_submission(data), idempotency_key=idempotency_key)
    return Status(201 if result.created else 200, ItemOut.of(result.item))


@api.post("/items:batch", auth=write_auth, response={200: BatchOut, **ERRORS}, tags=["items"])
def items_submit_batch(request: HttpRequest, data: BatchIn):
    """Up to 500 items, each with its own outcome: one bad item never sinks the others.

    ``start: "queued"`` answers at once with every new item "starting"; the task worker
    starts their graphs, and each item enters the queue when its graph asks.
    """
    parsed = [_batch_parse(index, raw) for index, raw in enumerate(data.items)]
    if data.start == "now":
        return BatchOut(results=[_batch_submit_one(request.auth, index, entry) for index, entry in enumerate(parsed)])
    valid = [(index, entry) for index, entry in enumerate(parsed) if isinstance(entry, BatchItemIn)]
    accepted = items_accept(client=request.auth, entries=[(_submission(entry), entry.idempotency_key) for _, entry in valid])
    client_items_prefetch(items=[a.item for a in accepted if a.item is not None])
    outcomes = {index: _accepted_outcome(index, result) for (index, _), result in zip(valid, accepted, strict=True)}
    return BatchOut(results=[outcomes.get(index) or entry for index, entry in enumerate(parsed)])


def _batch_parse(index: int, raw: dict[str, Any]) -> BatchItemIn | BatchOutcome:
    try:
        return BatchItemIn.model_validate(raw)
    except PydanticValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        return BatchOutcome(index=index, outcome="invalid", error="invalid", message=_field_errors(errors))


def _batch_submit_one(client, index: int, entry: BatchItemIn | BatchOutcome) -> BatchOutcome:
    if isinstance(entry, BatchOutcome):
        return entry
    outside_yield()  # each item's graph start is CPU the moderators' requests in this process would share
    try:
        result = item_submit(client=client, submission=_submission(entry), idempotency_key=entry.idempotency_key)
    except (DjangoValidationError, IdempotencyConflict) as exc:
        return _refused_outcome(index, exc)
    return BatchOutcome(index=index, outcome="created" if result.created else "existing", item=ItemOut.of(result.item))


def _accepted_outcome(index: int, result: Accepted) -> BatchOutcome:
    if result.error is not None:
        return _refused_outcome(index, result.error)
    return BatchOutcome(index=index, outcome="accepted" if result.created else "existing", item=ItemOut.of(result.item))


def _refused_outcome(index: int, exc: DjangoValidationError | IdempotencyConflict) -> BatchOutcome:
    if isinstance(exc, IdempotencyConflict):
        return BatchOutcome(index=index, outcome="invalid", error="idempotency_key_reused", message=str(exc))
    return BatchOutcome(index=index, outcome="invalid", error="invalid", message=_django_message(exc))


@api.post("/items/{item_id}/cancel", auth=write_auth, response={200: ItemOut, **ERRORS, 409: CancelLost}, tags=["items"])
def item_cancel(request: HttpRequest, item_id: UUID, data: CancelIn | None = None):
    """Withdraw a pending item this client submitted, through the same guard as a moderator's decision.

    200 with the withdrawn item (also on a retry); 409 ``already_decided`` naming the
    moderator whose decision came first. Send ``{"reason": "..."}``, or ``{}`` or no body
    for a withdrawal with no reason.
    """
    item = client_item_get(client_id=request.auth.pk, public_id=item_id)
    if item is None:
        raise Http404("no such item")
    outcome = item_withdraw(
        item_public_id=item.public_id,
        by=request.auth.user,
        reason=data.reason if data else "",
        origin=AttemptOrigin.API,
    )
    if not outcome.won and outcome.winner != request.auth.user.get_username():
        return Status(409, CancelLost(error="already_decided", message=outcome.message(), **_lost_fields(outcome)))
    return ItemOut.of(client_item_get(client_id=request.auth.pk, public_id=item_id))


def _lost_fields(outcome: DecisionOutcome) -> dict[str, Any]:
    payload = outcome.winner_payload()
    return {"winner": payload["winner"], "status": payload["status"], "decided_at": payload["decided_at"]}


@api.post("/items/{item_id}/outcome", auth=write_auth, response={200: ItemOut, 201: ItemOut, **ERRORS}, tags=["items"])
def item_outcome(request: HttpRequest, item_id: UUID, data: OutcomeIn):
    """Report what the agent did with this client's decided item: ``{"status": "done" | "failed", "message": "..."}``.

    201 with the item (its ``outcome`` set); the same report again answers 200. The first
    report stands: a different one is a 409 ``outcome_already_reported``; an item not yet
    decided, a 409 ``not_decided``; another client's item, a 404 ``not_found``. Webhook
    ``item.outcome``.
    """
    reported = item_outcome_report(client=request.auth, item_public_id=str(item_id), status=data.status, message=data.message)
    return Status(201 if reported.created else 200, ItemOut.of(client_item_get(client_id=request.auth.pk, public_id=item_id)))


@api.get("/items/{item_id}", auth=read_auth, response={200: ItemOut, **ERRORS}, tags=["items"])
def item_read(request: HttpRequest, item_id: UUID):
    item = client_item_get(client_id=request.auth.pk, public_id=item_id)
    if item is None:
        raise Http404("no such item")
    return ItemOut.of(item)


_CURSOR_SALT = "moderation.api.items.cursor"


def _cursor_decode(cursor: str) -> int:
    try:
        last_id = cursor_read(token=cursor, salt=_CURSOR_SALT)
    except CursorInvalid:
        last_id = None
    if type(last_id) is not int:
        raise DjangoValidationError({"cursor": "not a cursor this API gave out"})
    return last_id


def _cursor_encode(last_id: int) -> str:
    return cursor_make(key=last_id, salt=_CURSOR_SALT)


@api.get("/items", auth=read_auth, response={200: ItemPage, **ERRORS}, tags=["items"])
def items_list(
    request: HttpRequest,
    status: ItemStatus | None = None,
    source: QueryText | None = Query(None, max_length=100),
    external_id: QueryText | None = Query(None, max_length=200),
    decided_after: datetime | None = None,
    graph: QueryText | None = Query(None, max_length=64),
    cursor: str | None = Query(None, max_length=100),
    limit: int = Query(50, ge=1, le=PAGE_MAX),
):
    """The client's items oldest first; pass ``next_cursor`` back as ``cursor`` for the next page."""
    items, last_id = client_items_page(
        client_id=request.auth.pk,
        after_id=_cursor_decode(cursor) if cursor else 0,
        limit=limit,
        status=status,
        source=source,
        external_id=external_id,
        decided_after=decided_after,
        graph=graph,
    )
    return ItemPage(items=[ItemOut.of(i) for i in items], next_cursor=_cursor_encode(last_id) if last_id else None)


@api.get(
    "/items/{item_id}/decision",
    auth=read_auth,
    response={200: ItemOut, 204: None, 429: ErrorOut, **ERRORS},
    tags=["items"],
)
async def item_decision(request: HttpRequest, item_id: UUID, wait: float = Query(0, ge=0)):
    """The item once decided (200); with ``wait`` (seconds, at most 60) held open until then, else 204.

    A wait past this client's or this server's cap of open waits is refused at once: 429
    ``too_many_waits`` or 503 ``busy``, with ``Retry-After``.
    """
    try:
        item = await item_decision_wait(
            client_id=request.auth.pk, public_id=str(item_id), timeout=min(wait, LONGPOLL_MAX_SECONDS)
        )
    except WaitRefused as refused:
        response = _error(request, refused.status, refused.code, str(refused))
        response["Retry-After"] = str(refused.retry_after)
        return response
    if item is None:
        raise Http404("no such item")
    if item_undecided(item):
        return Status(204, None)
    return ItemOut.of(item)


@api.post("/deployments/{name}/webhook", auth=None, response={202: dict[str, str], **ERRORS}, tags=["deployments"])
def deployment_webhook_receive(request: HttpRequest, name: str, token: str = Query("")):
    """A LangGraph Server run ended (its ``webhook=``): its thread is queued for the worker to discover (202).

    The URL's ``token`` is the deployment's secret (``manage.py deployment_add`` shows it once):
    a wrong one is 404, as for an unknown deployment. Nothing here calls the deployment: the
    worker reads the thread from it; the body is trusted only for its ``thread_id``.
    """
    deployment = deployment_verify(name=name, token=token)
    if deployment is None:
        raise Http404("no such deployment webhook")
    try:
        payload = json_parse(request.body)
    except ValueError:
        return _error(request, 400, "invalid_json", "the body is not JSON")
    return Status(202, {"thread_id": deployment_webhook(deployment=deployment, payload=payload)})
