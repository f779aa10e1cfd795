"""Refuse an oversized request body before Django reads it.

Django's ASGI handler reads the whole body (into a spooled temporary file) before any
middleware runs, so authentication, CSRF and DATA_UPLOAD_MAX_MEMORY_SIZE all come after
the upload: an anonymous 64 MiB POST was accepted in full before its 403. This ASGI
middleware answers 413 from the Content-Length header alone, and stops reading a
chunked body (no length) as soon as it passes the limit.

daphne itself (Twisted) still receives a body before it starts the application, so the
bytes on the wire are bounded by the reverse proxy (nginx ``client_max_body_size``, see
README); what this bounds is Django's copy and all the work done for it.
"""

from __future__ import annotations

import json


class BodyLimitMiddleware:
    def __init__(self, app, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send)
            return
        # Read up to the limit ourselves, then hand the app what we read.
        read: list[dict] = []
        size = 0
        while True:
            message = await receive()
            read.append(message)
            if message["type"] != "http.request":  # the client went away; the app hears it too
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._refuse(send)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> dict:
            return read.pop(0) if read else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send) -> None:
        body = json.dumps(
            {"error": "request_too_large", "message": f"the request body is larger than {self.max_bytes} bytes"}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _content_length(scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server or Django answers a malformed length
    return None
