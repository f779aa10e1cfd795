"""Readiness of what a decision needs: the database, the checkpointer, the channel layer."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection

from moderation.checkpointer import checkpointer_get


def _database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return connection.vendor


def _checkpointer() -> str:
    saver = checkpointer_get()
    saver.get_tuple({"configurable": {"thread_id": f"healthz-{uuid.uuid4()}", "checkpoint_ns": ""}})
    return type(saver).__name__


def _channel_layer() -> str:
    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("no channel layer configured")
    async_to_sync(layer.group_send)("healthz", {"type": "healthz.ping"})
    return type(layer).__name__


CHECKS: dict[str, Callable[[], str]] = {
    "database": _database,
    "checkpointer": _checkpointer,
    "channel_layer": _channel_layer,
}


def health_report() -> tuple[bool, dict[str, dict[str, object]]]:
    """Run every check; return (all ok, per-check detail). Never raises."""
    report: dict[str, dict[str, object]] = {}
    for name, check in CHECKS.items():
        start = time.perf_counter()
        try:
            report[name] = {"ok": True, "backend": check()}
        except Exception as exc:  # a health endpoint reports failures, it does not have them
            report[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        report[name]["ms"] = round((time.perf_counter() - start) * 1000, 1)
    return all(r["ok"] for r in report.values()), report
