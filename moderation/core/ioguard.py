"""A test-time guard: no outbound network call while the calling thread holds a database connection or transaction.

A request or task that waits on the outside (a LangGraph deployment, a webhook receiver, a
DNS server) while it holds a pooled connection keeps that connection from everyone else for
as long as the outside takes: a burst of such waits empties the pool the moderators' pages
draw on. Inside ``atomic`` it also keeps the transaction's locks. The rule is in the
contributors' docs; this guard makes the tests enforce it.

``io_guard_install`` hooks where every outbound call of the product starts: httpcore's
connection pools (below httpx, so the LangGraph SDK's clients and the webhook sender, which
uses httpcore directly) and ``socket.getaddrinfo`` for a name (a numeric address needs no
DNS). A call that starts while the thread is inside ``atomic`` (other than a test case's own
transaction), or, with ``pool_check``, holds a connection checked out of Django's PostgreSQL
pool, is written, with where it came from, to the report file; the call itself goes on, so
the test fails on the report (root ``conftest.py``), not on a changed behaviour.

The suite sets ``REVIEWQUEUE_IO_GUARD`` to a report file; ``moderation.apps`` installs the
guard in every process that has it (the servers and workers the tests start inherit it).
The test process checks transactions only: its main thread's connection is the test's own,
held across the test's own calls to the outside.
"""

from __future__ import annotations

import os
import socket
import threading
import traceback
from pathlib import Path
from typing import Any

ENV = "REVIEWQUEUE_IO_GUARD"
_ROOT = str(Path(__file__).resolve().parents[2])
_state: dict[str, Any] = {"report": "", "pool_check": True, "installed": False}
_lock = threading.Lock()


def io_guard_install(*, report: str, pool_check: bool = True) -> None:
    """Hook the outbound points (once per process) and write what they find to ``report``."""
    _state.update(report=report, pool_check=pool_check)
    if _state["installed"]:
        return
    _state["installed"] = True
    import httpcore

    sync_request = httpcore.ConnectionPool.handle_request
    async_request = httpcore.AsyncConnectionPool.handle_async_request
    getaddrinfo = socket.getaddrinfo

    def handle_request(self: Any, request: Any) -> Any:
        io_guard_check(f"HTTP {request.method.decode()} {request.url.host.decode()}")
        return sync_request(self, request)

    async def handle_async_request(self: Any, request: Any) -> Any:
        io_guard_check(f"HTTP {request.method.decode()} {request.url.host.decode()}")
        return await async_request(self, request)

    def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, (str, bytes)) and not _numeric(host):
            io_guard_check(f"DNS {host!r}")
        return getaddrinfo(host, *args, **kwargs)

    httpcore.ConnectionPool.handle_request = handle_request  # type: ignore[method-assign]  # the guard is a patch
    httpcore.AsyncConnectionPool.handle_async_request = handle_async_request  # type: ignore[method-assign]
    socket.getaddrinfo = guarded_getaddrinfo


def _numeric(host: str | bytes) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host.decode() if isinstance(host, bytes) else host.strip("[]"))
    except ValueError:
        return False
    return True


def io_guard_held() -> str:
    """What this thread holds that an outbound call must not wait with: "" for nothing."""
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        own = [block for block in conn.atomic_blocks if not getattr(block, "_from_testcase", False)]
        if own:
            return f"inside atomic on {conn.alias!r}"
        pooled = conn.vendor == "postgresql" and conn.settings_dict.get("OPTIONS", {}).get("pool")
        if _state["pool_check"] and pooled and conn.connection is not None and not conn.atomic_blocks:
            return f"holding a pooled connection of {conn.alias!r}"
    return ""


def io_guard_check(what: str) -> None:
    held = io_guard_held()
    if not held or not _state["report"]:
        return
    frames = [
        f
        for f in traceback.extract_stack()[:-2]
        if f.filename.startswith(_ROOT) and "/.venv/" not in f.filename and f.filename != __file__
    ]
    where = " <- ".join(f"{Path(f.filename).relative_to(_ROOT)}:{f.lineno} {f.name}" for f in reversed(frames[-8:]))
    line = f"pid {os.getpid()} {threading.current_thread().name}: {what} {held}: {where}\n"
    with _lock, open(_state["report"], "a") as report:
        report.write(line)
