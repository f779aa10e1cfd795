"""A real webhook receiver for the delivery tests: a threaded http.server that verifies signatures.

It can answer 500 to the next N requests, stall the next M (longer than the sender's
timeout; a request both stalled and failed is held, then refused),
or be stopped and restarted on the same port (down for a while). Every request whose
signature verifies with ``standardwebhooks.Webhook(secret).verify`` is kept, in
arrival order, with the moment it arrived.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook, WebhookVerificationError

from moderation.lab.waits import progress_wait


@dataclass(frozen=True)
class Received:
    msg_id: str
    type: str
    data: dict
    at: float  # time.time() on arrival


class Receiver:
    def __init__(self, secret: str = "", *, port: int = 0) -> None:
        self.secret = secret
        self.port = port
        self.fail_next = 0  # answer 500 to this many requests
        self.stall_next = 0  # hold this many requests for stall_seconds before answering
        self.stall_seconds = 0.0
        self.received: list[Received] = []
        self.requests = 0
        self.raw: list[tuple[bytes, dict[str, str]]] = []  # verified requests as sent: body and headers
        self.bad_signatures = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with receiver._lock:
                    receiver.requests += 1
                    fail = receiver.fail_next > 0
                    receiver.fail_next -= fail
                    stall = receiver.stall_next > 0
                    receiver.stall_next -= stall
                if stall:
                    time.sleep(receiver.stall_seconds)
                if fail:
                    self._answer(500)
                    return
                try:
                    event = Webhook(receiver.secret).verify(body, dict(self.headers.items()))
                except WebhookVerificationError:
                    with receiver._lock:
                        receiver.bad_signatures += 1
                    self._answer(400)
                    return
                with receiver._lock:
                    receiver.received.append(Received(self.headers["webhook-id"], event["type"], event["data"], time.time()))
                    receiver.raw.append((body, dict(self.headers.items())))
                self._answer(204)

            def _answer(self, code: int) -> None:
                try:
                    self.send_response(code)
                    self.send_header("content-length", "0")
                    self.end_headers()
                except OSError:  # the sender gave up (timeout) meanwhile
                    pass

            def log_message(self, *args):
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def unique(self) -> dict[str, Received]:
        """First arrival per webhook-id: what a de-duplicating receiver keeps."""
        with self._lock:
            seen: dict[str, Received] = {}
            for r in self.received:
                seen.setdefault(r.msg_id, r)
            return seen

    def wait_for(self, count: int, *, stall: float = 30) -> dict[str, Received]:
        """The first arrival per webhook-id once ``count`` have arrived; fails once none arrived for ``stall`` seconds."""
        arrived = progress_wait(lambda: len(self.unique()), done=lambda n: n >= count, stall=stall, poll=0.02)
        if arrived < count:
            raise AssertionError(f"{arrived} distinct webhooks arrived, expected {count}: {json.dumps([r.type for r in self.received])}")
        return self.unique()
