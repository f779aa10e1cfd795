"""A real webhook receiver for the delivery tests: a threaded http.server that verifies signatures.

It can answer 500 to the next N requests, stall the next M (longer than the sender's
timeout, or until ``release`` is set; a request both stalled and failed is held, then refused),
or be stopped and restarted on the same port (down for a while). Every request whose
signature verifies with ``standardwebhooks.Webhook(secret).verify`` is kept, in
arrival order, with the moment it arrived.

Hostile answers: the next K requests can be answered by trickling (a 200 sent one byte every
``trickle_interval`` seconds, each byte well within a per-read timeout), and a refusal can
carry a body (``fail_body`` sent ``fail_body_times`` over, e.g. 64 MiB). ``answers`` records,
per answer of either kind, the body bytes it got out and whether the sender hung up first.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook, WebhookVerificationError

from moderation.lab.waits import progress_wait


@dataclass(frozen=True)
class Received:
    msg_id: str
    type: str
    data: dict
    at: float  # time.time() on arrival


@dataclass
class Answer:
    """One trickled or bodied answer as it went: how far it got before it ended."""

    kind: str  # "trickle" or "fail_body"
    total: int  # bytes it meant to send
    sent: int = 0
    cut: bool = False  # the sender closed the connection before the end
    done: threading.Event = field(default_factory=threading.Event)


class Receiver:
    def __init__(self, secret: str = "", *, port: int = 0) -> None:
        self.secret = secret
        self.port = port
        self.fail_next = 0  # answer 500 to this many requests
        self.stall_next = 0  # hold this many requests for stall_seconds before answering
        self.stall_seconds = 0.0
        self.release = threading.Event()  # set: stalled requests go on at once
        self.trickle_next = 0  # answer this many requests a byte at a time (verified or not)
        self.trickle_interval = 0.05
        self.fail_body = b""  # the body of the 500 answers, sent fail_body_times over
        self.fail_body_times = 1
        self.answers: list[Answer] = []
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
                    trickle = receiver.trickle_next > 0
                    receiver.trickle_next -= trickle
                if stall:
                    receiver.release.wait(receiver.stall_seconds)
                if trickle:
                    self._trickle()
                    return
                if fail:
                    if receiver.fail_body:
                        self._fail_with_body()
                    else:
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

            def _trickle(self) -> None:
                raw = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
                self._send_recorded(
                    Answer("trickle", len(raw)), [raw[n : n + 1] for n in range(len(raw))], pause=receiver.trickle_interval
                )

            def _fail_with_body(self) -> None:
                body, times = receiver.fail_body, receiver.fail_body_times
                head = f"HTTP/1.1 500 Internal Server Error\r\ncontent-length: {len(body) * times}\r\n\r\n".encode()
                answer = Answer("fail_body", len(body) * times)
                self.wfile.write(head)
                self._send_recorded(answer, (body for _ in range(times)))

            def _send_recorded(self, answer: Answer, chunks, *, pause: float = 0.0) -> None:
                with receiver._lock:
                    receiver.answers.append(answer)
                self.close_connection = True
                try:
                    for chunk in chunks:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                        answer.sent += len(chunk)
                        time.sleep(pause)
                except OSError:  # the sender hung up
                    answer.cut = True
                finally:
                    answer.done.set()

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
            raise AssertionError(
                f"{arrived} distinct webhooks arrived, expected {count}: {json.dumps([r.type for r in self.received])}"
            )
        return self.unique()
