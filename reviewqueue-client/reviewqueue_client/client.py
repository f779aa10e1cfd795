"""A typed httpx client for reviewqueue's /api/v1: submit, read, list, wait, cancel."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

# The server holds one long-poll at most this long (LONGPOLL_MAX_SECONDS); longer waits loop.
LONGPOLL_MAX_SECONDS = 60.0


class ReviewQueueError(Exception):
    """An answer other than success: ``code`` is the API's stable error code (``invalid``, ``not_found``,
    ``idempotency_key_reused``, ``already_decided``, ``too_many_waits``...), ``status`` the HTTP status."""

    def __init__(self, *, status: int, code: str, message: str, body: dict[str, Any]) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body


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
        return cls(id=raw["id"], status=raw["status"], graph=raw["graph"], external_id=raw.get("external_id"),
                   external=raw.get("external"), resume=raw.get("resume"), asks=raw.get("asks", []),
                   applied_result=raw.get("applied_result", {}), raw=raw)


class ReviewQueue:
    """``ReviewQueue("https://reviews.example.com", token)``; pass ``transport`` to test against a fake."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + "/api/v1", headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(timeout, read=LONGPOLL_MAX_SECONDS + timeout), transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ReviewQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(
        self, *, title: str, body: str, source: str, ask: Any = None, external: dict[str, str] | None = None,
        idempotency_key: str | None = None, **fields: Any,
    ) -> Item:
        """Submit an item (any other field of ``POST /items`` as a keyword: ``team``, ``policy``, ``requested_by``...).

        With ``ask`` and ``external`` thread and interrupt ids, a resubmit is answered with the same item.
        """
        payload = {"title": title, "body": body, "source": source, **fields}
        if ask is not None:
            payload["ask"] = ask
        if external:
            payload["external"] = external
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return Item.of(self._call("POST", "/items", json=payload, headers=headers).json())

    def read(self, item_id: str) -> Item:
        return Item.of(self._call("GET", f"/items/{item_id}").json())

    def list(self, **filters: Any) -> Iterator[Item]:
        """Every item of this client matching ``filters`` (``status``, ``source``, ``external_id``, ``graph``...), page by page."""
        params = {k: v for k, v in filters.items() if v is not None}
        while True:
            page = self._call("GET", "/items", params=params).json()
            yield from (Item.of(raw) for raw in page["items"])
            if not page["next_cursor"]:
                return
            params["cursor"] = page["next_cursor"]

    def wait(self, item_id: str, *, timeout: float) -> Item | None:
        """The item once decided, long-polling up to ``timeout`` seconds; None if it is still undecided then."""
        end = time.monotonic() + timeout
        while True:
            left = max(0.0, end - time.monotonic())
            response = self._call("GET", f"/items/{item_id}/decision", params={"wait": min(left, LONGPOLL_MAX_SECONDS)})
            if response.status_code == 200:
                return Item.of(response.json())
            if left <= 0:
                return None

    def cancel(self, item_id: str, *, reason: str = "") -> Item:
        """Withdraw a pending item; ``ReviewQueueError`` with code ``already_decided`` if a moderator came first."""
        return Item.of(self._call("POST", f"/items/{item_id}/cancel", json={"reason": reason}).json())

    def report_outcome(self, item_id: str, *, status: str, message: str = "") -> Item:
        """Tell reviewqueue what the agent did with the decision: ``status`` "done" or "failed", a short ``message``.

        The first report stands: the same one again is answered as a success, a different one is
        ``ReviewQueueError`` ``outcome_already_reported``; ``not_decided`` before the decision.
        """
        return Item.of(self._call("POST", f"/items/{item_id}/outcome", json={"status": status, "message": message}).json())

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = self._http.request(method, path, **kwargs)
        if response.is_success:
            return response
        try:
            body = response.json()
        except ValueError:
            body = {}
        code = body.get("error", "http_error") if isinstance(body, dict) else "http_error"
        message = body.get("message", response.text[:200]) if isinstance(body, dict) else response.text[:200]
        raise ReviewQueueError(status=response.status_code, code=code, message=message,
                               body=body if isinstance(body, dict) else {})
