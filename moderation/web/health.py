"""Health of what a decision needs: the database, the checkpointer, the channel layer (/healthz, for load
balancers); and readiness (/readyz, for monitoring): those, and task workers applying the decisions.

The checks run at the same time under one bound (``HEALTH_CHECK_TIMEOUT``, 2 s): a
dependency that accepts connections and never answers (a black-holed Redis) must turn
into a quick 503, not hold the load balancer's probe for the client's socket timeout.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import DatabaseError, connection

from moderation.core.checkpointer import checkpointer_get
from moderation.records.workers import WorkState, work_state

logger = logging.getLogger(__name__)

# The blocking checks run here, not in the caller's thread, so the caller can stop waiting.
# A hung check keeps its worker until its own client gives up; the pool's size caps how
# many a hung dependency can hold, and further checks then time out like the hung one.
_WORKERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="healthz")

HealthChecks = dict[str, dict[str, object]]


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return connection.vendor
    finally:
        connection.close()  # a worker thread's connection, not a request's


def _checkpointer() -> str:
    saver = checkpointer_get()
    saver.get_tuple({"configurable": {"thread_id": f"healthz-{uuid.uuid4()}", "checkpoint_ns": ""}})
    return type(saver).__name__


async def _channel_layer() -> str:
    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("no channel layer configured")
    await layer.group_send("healthz", {"type": "healthz.ping"})
    return type(layer).__name__


CHECKS: dict[str, Callable[[], str] | Callable[[], Awaitable[str]]] = {
    "database": _database,
    "checkpointer": _checkpointer,
    "channel_layer": _channel_layer,
}


async def _check_run(name: str, check, timeout: float) -> tuple[str, dict[str, object]]:
    start = time.perf_counter()
    if inspect.iscoroutinefunction(check):
        pending = check()
    else:
        pending = asyncio.get_running_loop().run_in_executor(_WORKERS, check)
    try:
        result: dict[str, object] = {"ok": True, "backend": await asyncio.wait_for(pending, timeout)}
    except TimeoutError:
        result = {"ok": False, "error": f"no answer within {timeout:g} s"}
    except Exception as exc:  # a health endpoint reports failures, it does not have them
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    result["ms"] = round((time.perf_counter() - start) * 1000, 1)
    return name, result


async def _checks_run(timeout: float) -> HealthChecks:
    return dict(await asyncio.gather(*(_check_run(name, check, timeout) for name, check in CHECKS.items())))


def health_report() -> tuple[bool, HealthChecks]:
    """Run every check at once; return (all ok, per-check detail). Never raises, never waits past the bound."""
    checks = async_to_sync(_checks_run)(settings.HEALTH_CHECK_TIMEOUT)
    for name, check in checks.items():
        if not check["ok"]:
            # The detail (hosts, ports) is not shown to anonymous probes; operators find it here.
            logger.warning("health check %s failed: %s", name, check["error"])
    return all(check["ok"] for check in checks.values()), checks


def health_redact(checks: HealthChecks) -> HealthChecks:
    """Status only: what anyone who can reach /healthz may see."""
    return {name: {"ok": check["ok"]} for name, check in checks.items()}


def readiness_report() -> tuple[bool, HealthChecks, WorkState | None]:
    """/healthz's checks, and whether anything applies the decisions: workers heard from within
    ``WORKER_HEARTBEAT_GRACE``, no decision unapplied for longer than ``READY_UNAPPLIED_MAX``.

    Never raises: with the database down, the workers' state is unknown (None) and not ok.
    """
    ok, checks = health_report()
    state = None
    if checks["database"]["ok"]:
        try:
            state = work_state()
        except DatabaseError as exc:
            logger.warning("readiness: the workers' state could not be read: %s", exc)
    if state is None:
        checks["workers"] = checks["unapplied"] = {"ok": False, "error": "database unavailable"}
        return False, checks, None
    checks["workers"] = {
        "ok": state.workers_ok,
        "alive": state.alive,
        "last_beat_seconds": _rounded(state.last_beat_seconds),
        "grace_seconds": settings.WORKER_HEARTBEAT_GRACE,
    }
    checks["unapplied"] = {
        "ok": state.unapplied_ok,
        "oldest_seconds": _rounded(state.unapplied_oldest_seconds),
        "max_seconds": settings.READY_UNAPPLIED_MAX,
    }
    return ok and state.workers_ok and state.unapplied_ok, checks, state


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)
