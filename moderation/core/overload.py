"""A request the database pool had no connection for is an answer, not a crash: 503 with ``Retry-After``.

The pool raises ``psycopg_pool.PoolTimeout`` (wrapped in Django's ``OperationalError``) at a
request's first query, before it has changed anything. Under ``/api/`` and to a request asking
for JSON the answer is ``{"error": "database_unavailable", ...}``; a page gets a short page
rendered without the database.

Where it is met: in a view, ``DatabaseUnavailableMiddleware.process_exception``; in another
middleware, ``request_exception_seen`` (on ``got_request_exception``) marks it and the same
middleware answers the 500, and the request's user becomes anonymous so nothing on the way out
waits on the pool again; in the service API, its exception handler calls
``database_unavailable_response``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from psycopg_pool import PoolTimeout

logger = logging.getLogger(__name__)

# Seconds a client is asked to wait before it tries again.
RETRY_AFTER_SECONDS = 5
MESSAGE = "the database is overloaded: no connection was free in time; nothing was recorded, try again"


def pool_exhausted(exc: BaseException) -> bool:
    """Whether ``exc`` is a connection pool that had no connection to lend in time."""
    return isinstance(exc, PoolTimeout) or isinstance(exc.__cause__, PoolTimeout)


def database_unavailable_response(request: HttpRequest) -> HttpResponse:
    logger.warning("503 database_unavailable: no pooled connection for %s %s", request.method, request.path)
    if request.path.startswith("/api/") or "application/json" in request.headers.get("Accept", ""):
        response: HttpResponse = JsonResponse({"error": "database_unavailable", "message": MESSAGE}, status=503)
    else:
        response = HttpResponse(render_to_string("503_database.html", {"retry_after": RETRY_AFTER_SECONDS}), status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response["Cache-Control"] = "no-store"
    return response


def request_exception_seen(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    """``got_request_exception``: mark a request whose exception (outside its view) is the pool's timeout."""
    exc = sys.exc_info()[1]
    if request is not None and exc is not None:
        _mark(request, exc)


def _mark(request: HttpRequest, exc: BaseException) -> bool:
    if not pool_exhausted(exc):
        return False
    request.database_unavailable = True  # type: ignore[attr-defined]  # read by the middleware on the way out
    request.user = AnonymousUser()
    return True


class DatabaseUnavailableMiddleware:
    """A view's pool timeout answered with ``database_unavailable_response`` (``process_exception``: never
    Django's error page, whose rendering would query again); a marked request's 500 likewise."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code == 500 and getattr(request, "database_unavailable", False):
            return database_unavailable_response(request)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        return database_unavailable_response(request) if _mark(request, exception) else None
