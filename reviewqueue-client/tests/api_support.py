"""A real HTTP server playing reviewqueue's outcome endpoint, with the faults a test scripts before it answers.

``OutcomeServer(faults=["500", "503 retry-after 1", "drop"])`` answers the first requests
with those (a 500, a 503 with ``Retry-After: 1``, a connection closed without an answer),
then as reviewqueue does: the first report is stored (201), the same one again is a
success (200), a different one ``409 outcome_already_reported``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ITEM = {
    "id": "it-1",
    "status": "edited",
    "graph": "ask",
    "external_id": None,
    "external": None,
    "resume": None,
    "asks": [],
    "applied_result": {},
}


class OutcomeServer:
    def __init__(self, *, faults: list[str]) -> None:
        self.faults = list(faults)
        self.arrivals: list[float] = []  # time.monotonic() of each request
        self.stored: dict[str, Any] | None = None
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                sent = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with owner._lock:
                    owner.arrivals.append(time.monotonic())
                    fault = owner.faults.pop(0) if owner.faults else None
                    if fault is None:
                        status = 200 if owner.stored == sent else 409 if owner.stored else 201
                        owner.stored = owner.stored or sent
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)  # no answer at all: what a crashed proxy leaves
                    return
                if fault is not None:
                    code, _, retry_after = fault.partition(" retry-after ")
                    self._answer(
                        int(code),
                        {"error": "http_error", "message": "not now"},
                        {"Retry-After": retry_after} if retry_after else {},
                    )
                elif status == 409:
                    self._answer(409, {"error": "outcome_already_reported", "message": "another report stands"})
                else:
                    self._answer(status, {**ITEM, "outcome": {**sent, "reported_at": "2026-12-04T00:00:00Z"}})

            def _answer(self, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> OutcomeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()
