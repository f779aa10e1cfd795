"""A test-time guard: no outbound network call while the calling thread holds a database connection or transaction.

A wait on the outside while holding a pooled connection keeps it from everyone else, and inside
``atomic`` also keeps its locks (contributors/tests.md, "No outbound call while holding the database").

``io_guard_install`` hooks httpcore's connection pools (below httpx, the LangGraph SDK and the
webhook sender), ``socket.getaddrinfo``, and the lookups ``moderation.core.addresses`` hands to
its resolver's threads (checked in the thread that asks, which is the one holding). A call made inside ``atomic`` (other than a test
case's own transaction) or, with ``pool_check``, while holding a connection from Django's
PostgreSQL pool is written to the report file; the call goes on, and the root ``conftest.py``
fails the test on the report. The suite sets ``REVIEWQUEUE_IO_GUARD``; ``moderation.apps``
installs the guard in every process that has it.
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
    from moderation.core import addresses

    resolver_submit = addresses._resolver.submit

    def guarded_submit(fn: Any, host: Any, /, *args: Any, **kwargs: Any) -> Any:
        io_guard_check(f"DNS {host!r}")
        return resolver_submit(fn, host, *args, **kwargs)

    addresses._resolver.submit = guarded_submit  # type: ignore[method-assign,assignment]  # checked where it is asked


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
