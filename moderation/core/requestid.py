"""A request id on every log line, carried from a request into the worker's tasks, and the JSON log format.

The standard library's logging, not django-structlog: our log calls are plain ``logger.info``
lines already, so a ``Filter`` that stamps the id and a ``Formatter`` that writes one JSON
object per line give structured logs without a second logging API or its middleware; the
id lives in a ``contextvars.ContextVar``, which asgiref copies into the threads that run
sync views, so it follows a request through sync and async code alike.

Fields of a JSON line (``LOG_FORMAT=json``): ``time`` (ISO 8601, UTC, milliseconds),
``level``, ``logger``, ``message`` (formatted), ``request_id`` (the request's, or the one
of the request whose task a worker is running; absent outside both), ``process`` (pid),
``thread`` (name), and ``exc`` (the traceback) when one is logged.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest

REQUEST_ID_HEADER = "X-Request-ID"
# A caller's (or proxy's) own id is kept when it is short and plain; anything else is replaced.
_ACCEPTED = re.compile(r"[A-Za-z0-9._-]{8,64}")

_current: ContextVar[str] = ContextVar("request_id", default="")


def request_id_current() -> str:
    """The id of the request (or of the task's originating request) being served now; "" outside one."""
    return _current.get()


@contextmanager
def request_id_bound(request_id: str) -> Iterator[None]:
    token = _current.set(request_id)
    try:
        yield
    finally:
        _current.reset(token)


def request_id_for(header: str | None) -> str:
    return header if header and _ACCEPTED.fullmatch(header) else uuid.uuid4().hex


class RequestIdMiddleware:
    """Bind the request's id (its ``X-Request-ID`` if plain, else a new one) and answer it in the same header."""

    async_capable = True
    sync_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if iscoroutinefunction(self):
            return self._acall(request)
        with request_id_bound(request_id_for(request.headers.get(REQUEST_ID_HEADER))):
            response = self.get_response(request)
            response[REQUEST_ID_HEADER] = request_id_current()
        return response

    async def _acall(self, request: HttpRequest) -> Any:
        with request_id_bound(request_id_for(request.headers.get(REQUEST_ID_HEADER))):
            response = await self.get_response(request)
            response[REQUEST_ID_HEADER] = request_id_current()
        return response


class RequestIdFilter(logging.Filter):
    """Stamp ``record.request_id`` (possibly "") on every record the handler writes."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = _current.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line; the fields are the module docstring's."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
            "thread": record.threadName,
        }
        request_id = getattr(record, "request_id", "") or _current.get()
        if request_id:
            line["request_id"] = request_id
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)
