"""Refuse an oversized request body while it arrives, before anything reads it whole.

daphne receives a whole body before starting the ASGI application and cannot bound it, so the
limit is enforced twice: in daphne's request (``daphne_body_limit_install``, called by
``reviewqueue.asgi``: 413 from ``Content-Length`` or as soon as a chunked body passes the
limit, then the connection is closed), and in the ASGI stack (``BodyLimitMiddleware``, for
servers that stream bodies, and the in-process tests). A reverse proxy's limit (nginx
``client_max_body_size``) still comes first where there is one.
"""

from __future__ import annotations

import json
import logging

from daphne import http_protocol

logger = logging.getLogger(__name__)


def body_refusal(max_bytes: int) -> bytes:
    """The 413 body, the same from daphne's request and from the middleware."""
    return json.dumps({"error": "request_too_large", "message": f"the request body is larger than {max_bytes} bytes"}).encode()


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
        body = body_refusal(self.max_bytes)
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


class BodyLimitedRequest(http_protocol.WebRequest):
    """daphne's request, answering 413 and closing the connection once the body passes ``max_bytes``.

    Twisted calls ``gotLength`` when the headers are in (the declared length, or None for
    a chunked body), ``handleContentChunk`` for each piece of the body as it arrives, and
    ``requestReceived`` (which starts the application) once the body is complete. A
    refused request never gets there: what is still in flight is dropped unread.
    """

    max_bytes = 0
    _received = 0
    _refused = False

    def gotLength(self, length: int | None) -> None:
        if length is not None and length > self.max_bytes:
            # Twisted would otherwise send "100 Continue" after our answer, inviting the body.
            self.requestHeaders.removeHeader(b"Expect")
            self._refuse()
            return
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        if self._refused:
            return
        self._received += len(data)
        if self._received > self.max_bytes:
            self._refuse()
            return
        super().handleContentChunk(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if not self._refused:
            super().requestReceived(command, path, version)

    def _refuse(self) -> None:
        self._refused = True
        body = body_refusal(self.max_bytes)
        head = (
            "HTTP/1.1 413 Content Too Large\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        # Straight to the transport, not through Request.finish: the request is not complete,
        # and Twisted's bookkeeping for a finished request expects it to be.
        self.channel.transport.write(head.encode() + body)
        self.channel.loseConnection()  # stops reading: the rest of the body is never received
        peer = self.getClientAddress()
        logger.info("refused a request body over %d bytes from %s", self.max_bytes, getattr(peer, "host", peer))


def daphne_body_limit_install(*, max_bytes: int) -> None:
    """Make daphne build its HTTP requests as ``BodyLimitedRequest`` with this limit.

    daphne has no option for this: its HTTPFactory names its request class as a module
    global, looked up for each connection, so that name is what is replaced. Called when
    the ASGI application is imported, which daphne does before it accepts a connection.
    """
    BodyLimitedRequest.max_bytes = max_bytes
    http_protocol.WebRequest = BodyLimitedRequest
