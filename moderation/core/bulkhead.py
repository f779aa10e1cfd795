"""Bulkheads: outside traffic gets its own bounded share of a server process, so no burst of it
can take what moderators' pages and decisions need.

Outside traffic is what other programs send: the service API (``/api/v1/``: submits, batches,
reads) and LangGraph deployments' run webhooks. Each is a class of route (``route_class``) with
its own cap per process (``BULKHEAD_API``, ``BULKHEAD_WEBHOOKS``): past it, a request waits on
the event loop, holding no thread and no database connection, up to ``BULKHEAD_WAIT`` seconds
for a slot, then is answered 503 ``busy`` with ``Retry-After`` and changes nothing. A running
request holds at most one of Django's pooled connections, so the classes' caps are the most the
outside can take of ``DB_POOL_SIZE``; the settings refuse caps that would leave moderators none.
Long-poll waits have their own caps (``moderation.live.waits``) and hold no connection asleep.

A cap bounds connections and threads, not the interpreter: a process runs one thread of Python at
a time, and a batch starting 100 graphs shares it evenly with a moderator's page, doubling the
page's time. So moderators come first: an outside request starts only once no moderator's request
is running in the process, and a batch waits the same way between its items
(``outside_yield``); each wait is bounded by ``BULKHEAD_YIELD`` seconds, so outside work is slowed
while moderators are busy, never stopped.

Counted per process, in memory, on the server's event loop (the yield reads the count from
request threads under a lock): what the caps protect is this process's pool and interpreter.

The bulkhead between processes: a deployment may serve the outside from daphne processes of its
own, routed by path at the proxy (``SERVE_ROUTES``: ``outside`` or ``moderators``; ``all`` by
default). ``ServedRoutesMiddleware`` answers a request of the other class 421 ``misdirected``
(a websocket is refused at its handshake) and logs it, so a proxy that routes wrongly shows at
once instead of quietly putting the outside back beside the moderators.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

API, WEBHOOKS, LONG_POLL, INSIDE = "api", "webhooks", "long_poll", "inside"
RETRY_AFTER_SECONDS = 1
ALL, OUTSIDE, MODERATORS = "all", "outside", "moderators"  # SERVE_ROUTES
# A process's own health, readiness and series: every process answers them, whichever routes it serves.
EVERY_PROCESS = frozenset({"/healthz", "/readyz", "/metrics"})

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def route_class(*, method: str, path: str) -> str:
    """Which share of the process a request draws on: an outside class, or ``inside`` (pages, moderators' endpoints)."""
    if not path.startswith("/api/v1/"):
        return INSIDE
    if path.startswith("/api/v1/deployments/") and path.endswith("/webhook"):
        return WEBHOOKS
    if method == "GET" and path.endswith("/decision"):
        return LONG_POLL  # capped by LONGPOLL_WAITS_*: an async view that holds no connection while it waits
    return API


def route_served(*, serves: str, method: str, path: str) -> bool:
    """Whether a process with ``SERVE_ROUTES=serves`` serves this request (a websocket's method: ``GET``)."""
    if serves == ALL or path in EVERY_PROCESS:
        return True
    outside = route_class(method=method, path=path) != INSIDE
    return outside if serves == OUTSIDE else not outside


@dataclass
class _Share:
    limit: int  # 0: no cap
    running: int = 0
    waiting: int = 0
    refused: int = 0
    _freed: asyncio.Condition | None = field(default=None, repr=False)

    async def enter(self, *, wait: float) -> bool:
        if not self.limit or self.running < self.limit:
            self.running += 1
            return True
        if self._freed is None:
            self._freed = asyncio.Condition()
        self.waiting += 1
        try:
            async with self._freed:
                await asyncio.wait_for(self._freed.wait_for(lambda: self.running < self.limit), timeout=wait)
        except TimeoutError:
            self.refused += 1
            return False
        finally:
            self.waiting -= 1
        self.running += 1
        return True

    async def leave(self) -> None:
        self.running -= 1
        if self._freed is not None and self.waiting:
            async with self._freed:
                self._freed.notify()


_shares: dict[str, _Share] = {}
_inside = 0  # moderators' (inside) requests running in this process
_inside_lock = threading.Condition()  # the count, read by outside requests' threads
_inside_idle: asyncio.Event | None = None  # the same, for the event loop (made in it)


def _share(name: str) -> _Share:
    if name not in _shares:
        _shares[name] = _Share(limit={API: settings.BULKHEAD_API, WEBHOOKS: settings.BULKHEAD_WEBHOOKS}[name])
    return _shares[name]


def _idle_event() -> asyncio.Event:
    global _inside_idle
    if _inside_idle is None:
        _inside_idle = asyncio.Event()
        _inside_idle.set()
    return _inside_idle


def _inside_add(delta: int) -> None:
    global _inside
    with _inside_lock:
        _inside += delta
        if _inside:
            _idle_event().clear()
        else:
            _idle_event().set()
            _inside_lock.notify_all()


def outside_yield() -> None:
    """In an outside request's thread: wait while a moderator's request runs in this process, at most ``BULKHEAD_YIELD`` s.

    Call it between units of work that hold no transaction (a batch's items).
    """
    bound = settings.BULKHEAD_YIELD
    if bound > 0:
        with _inside_lock:
            _inside_lock.wait_for(lambda: _inside == 0, timeout=bound)


async def _outside_yield_async() -> None:
    bound = settings.BULKHEAD_YIELD
    if bound > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_idle_event().wait(), timeout=bound)


def bulkhead_stats() -> dict[str, dict[str, int]]:
    """This process's outside classes: running, waiting, refused so far, and each cap (for /healthz)."""
    return {
        name: {"running": s.running, "waiting": s.waiting, "refused": s.refused, "limit": s.limit}
        for name, s in ((n, _share(n)) for n in (API, WEBHOOKS))
    }


def busy_body(*, name: str) -> bytes:
    setting = {API: "BULKHEAD_API", WEBHOOKS: "BULKHEAD_WEBHOOKS"}[name]
    return json.dumps(
        {
            "error": "busy",
            "message": f"this server is already running its share of {name} requests "
            f"({setting}); nothing was recorded, retry later",
        }
    ).encode()


class BulkheadMiddleware:
    """ASGI: each HTTP request counted in its class; an outside one admitted within its class's share, or refused."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        name = route_class(method=scope["method"], path=scope["path"])
        if name == LONG_POLL:
            await self.app(scope, receive, send)
            return
        if name == INSIDE:
            _inside_add(1)
            try:
                await self.app(scope, receive, send)
            finally:
                _inside_add(-1)
            return
        share = _share(name)
        if not await share.enter(wait=settings.BULKHEAD_WAIT):
            await _refuse(send, body=busy_body(name=name))
            return
        try:
            await _outside_yield_async()
            await self.app(scope, receive, send)
        finally:
            await share.leave()


async def _refuse(send: Send, *, body: bytes, status: int = 503) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 503:
        headers.append((b"retry-after", str(RETRY_AFTER_SECONDS).encode()))
    await send({"type": "http.response.start", "status": status, "headers": [*headers, (b"cache-control", b"no-store")]})
    await send({"type": "http.response.body", "body": body})


def misdirected_body(*, serves: str, path: str) -> bytes:
    mine, other = (
        ("the outside's", "moderators' pages, decisions and websockets")
        if serves == OUTSIDE
        else ("moderators'", "the outside's routes (/api/v1/)")
    )
    return json.dumps(
        {
            "error": "misdirected",
            "message": f"this server process serves only {mine} routes (SERVE_ROUTES={serves}), not {path}: "
            f"the proxy must send {other} to the processes that serve them; nothing was recorded",
        }
    ).encode()


class ServedRoutesMiddleware:
    """ASGI: a request of the class this process does not serve (``SERVE_ROUTES``) is refused, before any thread or
    connection: HTTP with 421 ``misdirected``, a websocket at its handshake (daphne answers 403)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        serves = settings.SERVE_ROUTES
        kind = scope["type"]
        if kind not in ("http", "websocket") or route_served(
            serves=serves, method=scope.get("method", "GET"), path=scope["path"]
        ):
            await self.app(scope, receive, send)
            return
        # The path only: a deployment webhook's token is in the query string, which no log may hold.
        logger.warning("misdirected %s %s: this process serves only %s routes (SERVE_ROUTES)", kind, scope["path"], serves)
        if kind == "http":
            await _refuse(send, body=misdirected_body(serves=serves, path=scope["path"]), status=421)
            return
        await receive()  # websocket.connect
        await send({"type": "websocket.close", "code": 1008})
