"""Typed httpx clients for reviewqueue's /api/v1 (submit, read, list, wait, cancel...): ``ReviewQueue``,
and ``AsyncReviewQueue`` its async twin, sharing how each request is built and each answer read."""

from __future__ import annotations

import email.utils
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    before_sleep_log,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)
from tenacity.stop import stop_base

# The server holds one long-poll at most this long (LONGPOLL_MAX_SECONDS); longer waits loop.
LONGPOLL_MAX_SECONDS = 60.0
# An outcome report the server could not take is sent again, up to this many times in all,
# after a random wait of up to OUTCOME_BACKOFF·2^(n-1) s (at most OUTCOME_BACKOFF_MAX), or
# longer when its Retry-After asks; a Retry-After over OUTCOME_RETRY_AFTER_MAX ends the tries.
OUTCOME_ATTEMPTS = 8
OUTCOME_BACKOFF = 0.5
OUTCOME_BACKOFF_MAX = 30.0
OUTCOME_RETRY_AFTER_MAX = 60.0

logger = logging.getLogger(__name__)


class ReviewQueueError(Exception):
    """An answer other than success: ``code`` is the API's stable error code (``invalid``, ``not_found``,
    ``idempotency_key_reused``, ``already_decided``, ``too_many_waits``...), ``status`` the HTTP status,
    ``retry_after`` the seconds its ``Retry-After`` asked for (None without one)."""

    def __init__(self, *, status: int, code: str, message: str, body: dict[str, Any], retry_after: float | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body
        self.retry_after = retry_after

    @property
    def transient(self) -> bool:
        """The server could not answer now (429, 5xx): the same request may succeed later."""
        return self.status == 429 or self.status >= 500


@dataclass(frozen=True)
class Item:
    """An item as /api/v1 answers it; ``raw`` holds every field, the typed ones are those an agent reads."""

    id: str
    status: str
    graph: str
    external_id: str | None
    external: dict[str, str] | None
    resume: Any
    asks: list[dict[str, Any]]
    applied_result: dict[str, Any]
    raw: dict[str, Any] = field(repr=False)

    @property
    def outcome(self) -> dict[str, Any] | None:
        """What the agent reported it did with the decision (``report_outcome``): status, message, reported_at."""
        return self.raw.get("outcome")

    @property
    def decided(self) -> bool:
        return self.status not in ("pending", "starting")

    @classmethod
    def of(cls, raw: dict[str, Any]) -> Item:
        return cls(
            id=raw["id"],
            status=raw["status"],
            graph=raw["graph"],
            external_id=raw.get("external_id"),
            external=raw.get("external"),
            resume=raw.get("resume"),
            asks=raw.get("asks", []),
            applied_result=raw.get("applied_result", {}),
            raw=raw,
        )


@dataclass(frozen=True)
class WebhookEndpoint:
    """One of this client's webhook endpoints; ``secret`` only in what ``create_webhook`` returns, else None."""

    id: int
    name: str
    url: str
    events: list[str]
    active: bool
    secret: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, raw: dict[str, Any]) -> WebhookEndpoint:
        return cls(
            id=raw["id"], name=raw["name"], url=raw["url"], events=raw["events"], active=raw["active"], secret=raw.get("secret")
        )


@dataclass(frozen=True)
class _Call:
    """One request to /api/v1, as both clients send it; ``safe``: sending it again cannot do it twice."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    headers: dict[str, str] | None = None
    safe: bool = True

    def options(self) -> dict[str, Any]:
        return {k: v for k, v in (("params", self.params), ("json", self.json), ("headers", self.headers)) if v is not None}


def _http_options(base_url: str, token: str, timeout: float) -> dict[str, Any]:
    return {
        "base_url": base_url.rstrip("/") + "/api/v1",
        "headers": {"Authorization": f"Bearer {token}"},
        "timeout": httpx.Timeout(timeout, read=LONGPOLL_MAX_SECONDS + timeout),
    }


def _submit_call(
    *,
    title: str,
    body: str,
    source: str,
    ask: Any,
    external: dict[str, str] | None,
    idempotency_key: str | None,
    fields: dict[str, Any],
) -> _Call:
    payload = {"title": title, "body": body, "source": source, **fields}
    if ask is not None:
        payload["ask"] = ask
    if external:
        payload["external"] = external
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    # A submit is sent again safely under a key: its external ids (reviewqueue's natural key) or an Idempotency-Key.
    return _Call("POST", "/items", json=payload, headers=headers, safe=bool(external or idempotency_key))


def _list_params(filters: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in filters.items() if v is not None}


def _next_params(params: dict[str, Any], page: dict[str, Any]) -> dict[str, Any] | None:
    """The next page's query after ``page``; None after the last."""
    return {**params, "cursor": page["next_cursor"]} if page["next_cursor"] else None


def _wait_call(item_id: str, *, end: float) -> tuple[_Call, float]:
    """One long-poll round until ``end`` (``time.monotonic()``), and the seconds left when it starts."""
    left = max(0.0, end - time.monotonic())
    return _Call("GET", f"/items/{item_id}/decision", params={"wait": min(left, LONGPOLL_MAX_SECONDS)}), left


def _outcome_call(item_id: str, *, status: str, message: str) -> _Call:
    return _Call("POST", f"/items/{item_id}/outcome", json={"status": status, "message": message})


def _webhook_call(*, name: str, url: str, events: Sequence[str] | None) -> _Call:
    payload: dict[str, Any] = {"name": name, "url": url}
    if events is not None:
        payload["events"] = [str(e) for e in events]
    return _Call("POST", "/webhooks", json=payload, safe=False)  # again: name_taken


def _checked(response: httpx.Response) -> httpx.Response:
    """``response`` if a success, else its ``ReviewQueueError``."""
    if response.is_success:
        return response
    try:
        body = response.json()
    except ValueError:
        body = {}
    code = body.get("error", "http_error") if isinstance(body, dict) else "http_error"
    message = body.get("message", response.text[:200]) if isinstance(body, dict) else response.text[:200]
    raise ReviewQueueError(
        status=response.status_code,
        code=code,
        message=message,
        body=body if isinstance(body, dict) else {},
        retry_after=_retry_after(response.headers.get("Retry-After")),
    )


class ReviewQueue:
    """``ReviewQueue("https://reviews.example.com", token)``; pass ``transport`` to test against a fake."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 30.0, transport: httpx.BaseTransport | None = None) -> None:
        self._http = httpx.Client(**_http_options(base_url, token, timeout), transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ReviewQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(
        self,
        *,
        title: str,
        body: str,
        source: str,
        ask: Any = None,
        external: dict[str, str] | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> Item:
        """Submit an item (any other field of ``POST /items`` as a keyword: ``team``, ``policy``, ``requested_by``...).

        With ``ask`` and ``external`` thread and interrupt ids, a resubmit is answered with the same item.
        """
        return Item.of(
            self._send(
                _submit_call(
                    title=title,
                    body=body,
                    source=source,
                    ask=ask,
                    external=external,
                    idempotency_key=idempotency_key,
                    fields=fields,
                )
            ).json()
        )

    def read(self, item_id: str) -> Item:
        return Item.of(self._send(_Call("GET", f"/items/{item_id}")).json())

    def list(self, **filters: Any) -> Iterator[Item]:
        """Every item of this client matching ``filters`` (``status``, ``source``, ``external_id``, ``graph``...), page by page."""
        params: dict[str, Any] | None = _list_params(filters)
        while params is not None:
            page = self._send(_Call("GET", "/items", params=params)).json()
            yield from (Item.of(raw) for raw in page["items"])
            params = _next_params(params, page)

    def wait(self, item_id: str, *, timeout: float) -> Item | None:
        """The item once decided, long-polling up to ``timeout`` seconds; None if it is still undecided then."""
        end = time.monotonic() + timeout
        while True:
            call, left = _wait_call(item_id, end=end)
            response = self._send(call)
            if response.status_code == 200:
                return Item.of(response.json())
            if left <= 0:
                return None

    def cancel(self, item_id: str, *, reason: str = "") -> Item:
        """Withdraw a pending item; ``ReviewQueueError`` with code ``already_decided`` if a moderator came first."""
        return Item.of(self._send(_Call("POST", f"/items/{item_id}/cancel", json={"reason": reason})).json())

    def report_outcome(self, item_id: str, *, status: str, message: str = "", attempts: int = OUTCOME_ATTEMPTS) -> Item:
        """Tell reviewqueue what the agent did with the decision: ``status`` "done" or "failed", a short ``message``.

        The first report stands: the same one again is answered as a success, a different one is
        ``ReviewQueueError`` ``outcome_already_reported``; ``not_decided`` before the decision.
        So a report that met a connection error, a timeout, a 429 or a 5xx is sent again, the
        same, until it is stored, up to ``attempts`` times in all (``OUTCOME_ATTEMPTS``), with
        exponential backoff and full jitter, never sooner than the server's ``Retry-After``;
        the last failure is raised.
        """
        call = _outcome_call(item_id, status=status, message=message)
        return Item.of(Retrying(**_retry_policy(attempts))(self._send, call).json())

    def create_webhook(self, *, name: str, url: str, events: Sequence[str] | None = None) -> WebhookEndpoint:
        """Register an endpoint that receives the events of this client's items (default: every item event).

        Keep the returned ``secret``: it is never shown again. Refusals carry ``url_invalid``,
        ``url_refused``, ``events_invalid``, ``name_invalid``, ``name_taken`` or ``endpoint_limit``.
        """
        return WebhookEndpoint.of(self._send(_webhook_call(name=name, url=url, events=events)).json())

    def webhooks(self) -> Sequence[WebhookEndpoint]:
        """This client's endpoints, oldest first (without secrets)."""
        return [WebhookEndpoint.of(raw) for raw in self._send(_Call("GET", "/webhooks")).json()["endpoints"]]

    def delete_webhook(self, endpoint_id: int) -> None:
        """Remove one of this client's endpoints; ``not_found`` if it has none of that id."""
        self._send(_Call("DELETE", f"/webhooks/{endpoint_id}", safe=False))

    def _send(self, call: _Call) -> httpx.Response:
        return _checked(self._http.request(call.method, call.path, **call.options()))


class ReviewQueueUnreachable(ReviewQueueError):
    """``AsyncReviewQueue``'s request met a connection error or a timeout (``status`` 0, ``code`` ``unreachable``);
    the httpx error is its ``__cause__``. Transient: the same request may succeed later."""

    def __init__(self, exc: httpx.TransportError) -> None:
        super().__init__(status=0, code="unreachable", message=f"{type(exc).__name__}: {exc}", body={})

    @property
    def transient(self) -> bool:
        return True


class AsyncReviewQueue:
    """``ReviewQueue``'s methods as coroutines, on ``httpx.AsyncClient``: ``async with AsyncReviewQueue(url, token) as reviews``.

    Every refusal is a ``ReviewQueueError``, a connection error or timeout too (``ReviewQueueUnreachable``).
    A request safe to send again (reads, long-polls, cancels, outcome reports, and submits
    under a key: ``external`` ids or an ``idempotency_key``; one without either is given an
    ``Idempotency-Key`` of its own) that met such an error, a 429 or a 5xx is sent again, up
    to ``attempts`` times in all, as ``report_outcome`` is (backoff with full jitter, never
    sooner than ``Retry-After``); webhook endpoint changes are sent once.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        attempts: int = OUTCOME_ATTEMPTS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(**_http_options(base_url, token, timeout), transport=transport)
        self.attempts = attempts

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncReviewQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def submit(
        self,
        *,
        title: str,
        body: str,
        source: str,
        ask: Any = None,
        external: dict[str, str] | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> Item:
        """``ReviewQueue.submit``; one without ``external`` nor ``idempotency_key`` is sent under a fresh key."""
        call = _submit_call(
            title=title,
            body=body,
            source=source,
            ask=ask,
            external=external,
            idempotency_key=idempotency_key or (None if external else f"rq-client-{uuid.uuid4()}"),
            fields=fields,
        )
        return Item.of((await self._send(call)).json())

    async def read(self, item_id: str) -> Item:
        return Item.of((await self._send(_Call("GET", f"/items/{item_id}"))).json())

    async def list(self, **filters: Any) -> AsyncIterator[Item]:
        """``ReviewQueue.list``: ``async for item in reviews.list(status="pending")``."""
        params: dict[str, Any] | None = _list_params(filters)
        while params is not None:
            page = (await self._send(_Call("GET", "/items", params=params))).json()
            for raw in page["items"]:
                yield Item.of(raw)
            params = _next_params(params, page)

    async def wait(self, item_id: str, *, timeout: float) -> Item | None:
        """``ReviewQueue.wait``: the item once decided, or None if still undecided after ``timeout`` seconds."""
        end = time.monotonic() + timeout
        while True:
            call, left = _wait_call(item_id, end=end)
            response = await self._send(call)
            if response.status_code == 200:
                return Item.of(response.json())
            if left <= 0:
                return None

    async def cancel(self, item_id: str, *, reason: str = "") -> Item:
        return Item.of((await self._send(_Call("POST", f"/items/{item_id}/cancel", json={"reason": reason}))).json())

    async def report_outcome(self, item_id: str, *, status: str, message: str = "", attempts: int = OUTCOME_ATTEMPTS) -> Item:
        """``ReviewQueue.report_outcome``, retried the same way (up to ``attempts`` times)."""
        return Item.of((await self._send(_outcome_call(item_id, status=status, message=message), attempts=attempts)).json())

    async def create_webhook(self, *, name: str, url: str, events: Sequence[str] | None = None) -> WebhookEndpoint:
        return WebhookEndpoint.of((await self._send(_webhook_call(name=name, url=url, events=events))).json())

    async def webhooks(self) -> Sequence[WebhookEndpoint]:
        return [WebhookEndpoint.of(raw) for raw in (await self._send(_Call("GET", "/webhooks"))).json()["endpoints"]]

    async def delete_webhook(self, endpoint_id: int) -> None:
        await self._send(_Call("DELETE", f"/webhooks/{endpoint_id}", safe=False))

    async def _send(self, call: _Call, *, attempts: int | None = None) -> httpx.Response:
        retrying = AsyncRetrying(**_retry_policy((attempts or self.attempts) if call.safe else 1))
        return await retrying(self._send_once, call)

    async def _send_once(self, call: _Call) -> httpx.Response:
        try:
            response = await self._http.request(call.method, call.path, **call.options())
        except httpx.TransportError as exc:
            raise ReviewQueueUnreachable(exc) from exc
        return _checked(response)


def _retry_after(value: str | None) -> float | None:
    """A ``Retry-After`` in seconds (delta-seconds or an HTTP date); None if absent or unreadable."""
    if value is None:
        return None
    if value.strip().isdigit():
        return float(value.strip())
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, httpx.TransportError) or (isinstance(exc, ReviewQueueError) and exc.transient)


_backoff = wait_random_exponential(multiplier=OUTCOME_BACKOFF, max=OUTCOME_BACKOFF_MAX)


def _asked_wait(state: RetryCallState) -> float:
    exc = state.outcome.exception() if state.outcome else None
    return (exc.retry_after or 0.0) if isinstance(exc, ReviewQueueError) else 0.0


def _retry_wait(state: RetryCallState) -> float:
    return max(_backoff(state), _asked_wait(state))


class _RetryAfterTooLong(stop_base):
    def __call__(self, retry_state: RetryCallState) -> bool:
        return _asked_wait(retry_state) > OUTCOME_RETRY_AFTER_MAX


def _retry_policy(attempts: int) -> dict[str, Any]:
    """How both clients send a request again (``Retrying`` or ``AsyncRetrying``): the rule ``report_outcome`` states."""
    return {
        "stop": stop_after_attempt(attempts) | _RetryAfterTooLong(),
        "wait": _retry_wait,
        "retry": retry_if_exception(_transient),
        "reraise": True,
        "before_sleep": before_sleep_log(logger, logging.INFO),
    }
