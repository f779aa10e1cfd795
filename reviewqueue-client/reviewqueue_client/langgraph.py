"""Durable LangGraph glue: an agent's own graph pauses at its own ``interrupt()``; humans decide in reviewqueue.

1. After a run, ``interrupts_forward`` sends each interrupt the thread waits on as an ask,
   with ``external = {thread_id, interrupt_id}``: reviewqueue's natural key, so forwarding
   again (a retry, a restart that reconciles) answers with the same item.
2. The decision comes back by webhook (``WebhookResumer``) or long-poll (``decision_wait_resume``),
   and ``decision_resume`` runs ``Command(resume={interrupt_id: resume})`` exactly once:
   under a per-thread lock it re-reads the thread's pending interrupts and resumes only if
   the interrupt is still among them. So a duplicate delivery, a webhook racing a
   long-poll, and a decision for an interrupt the thread no longer waits on are no-ops.
   Within one process the default lock does; replicas of the agent service need a lock
   they share (``thread_lock`` takes any ``thread_id -> context manager``: a PostgreSQL
   advisory lock, a Redis lock, or ``file_thread_lock`` on one host), as they share the
   checkpointer.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from langgraph.types import Command

from reviewqueue_client.client import Item, ReviewQueue
from reviewqueue_client.webhooks import webhook_verify

ThreadLock = Callable[[str], AbstractContextManager[Any]]
_TITLE_MAX = 200

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


@contextmanager
def local_thread_lock(thread_id: str) -> Iterator[None]:
    """One lock per thread id in this process: enough for a single agent process."""
    with _locks_guard:
        lock = _locks.setdefault(thread_id, threading.Lock())
    with lock:
        yield


def file_thread_lock(directory: str) -> ThreadLock:
    """A per-thread lock shared by the processes of one host (``flock`` on a file per thread)."""
    os.makedirs(directory, exist_ok=True)

    @contextmanager
    def lock(thread_id: str) -> Iterator[None]:
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in thread_id)
        with open(os.path.join(directory, f"{name}.lock"), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    return lock


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def interrupts_forward(
    client: ReviewQueue, graph: Any, *, thread_id: str, source: str, run_id: str | None = None, **fields: Any,
) -> list[Item]:
    """Submit every interrupt ``thread_id`` waits on (after a run, or on restart to reconcile); one item each, idempotently.

    ``fields``: any other field of ``POST /items`` (``team``, ``policy``, ``requested_by``, ``priority``).
    """
    items = []
    for pending in graph.get_state(_config(thread_id)).interrupts:
        external = {"thread_id": thread_id, "interrupt_id": pending.id, **({"run_id": run_id} if run_id else {})}
        title, body = _describe(pending.value)
        items.append(client.submit(title=title, body=body, source=source, ask=pending.value, external=external, **fields))
    return items


def _describe(value: Any) -> tuple[str, str]:
    """What the queue shows of an ask: its actions' names, and their descriptions or arguments."""
    if isinstance(value, dict) and isinstance(value.get("action_requests"), list):
        actions = [a for a in value["action_requests"] if isinstance(a, dict)]
        title = "Approve " + ", ".join(str(a.get("name", "?")) for a in actions)
        body = "\n".join(f"{a.get('name')}: {a.get('description') or json.dumps(a.get('args'), ensure_ascii=False)}"
                         for a in actions)
    else:
        title, body = "Review requested", json.dumps(value, ensure_ascii=False)
    return title[:_TITLE_MAX], body or title


@dataclass(frozen=True)
class Resumed:
    """What a decision did: ``resumed`` False when it was a no-op (already resumed, or no longer waited on)."""

    resumed: bool
    thread_id: str | None = None
    interrupt_id: str | None = None
    result: Any = None


def decision_resume(graph: Any, *, thread_id: str, interrupt_id: str, resume: Any,
                    thread_lock: ThreadLock = local_thread_lock) -> Resumed:
    """Resume the thread with ``{interrupt_id: resume}`` if, under its lock, it still waits on that interrupt."""
    with thread_lock(thread_id):
        pending = {i.id for i in graph.get_state(_config(thread_id)).interrupts}
        if interrupt_id not in pending:
            return Resumed(resumed=False, thread_id=thread_id, interrupt_id=interrupt_id)
        result = graph.invoke(Command(resume={interrupt_id: resume}), _config(thread_id))
    return Resumed(resumed=True, thread_id=thread_id, interrupt_id=interrupt_id, result=result)


def item_resume(graph: Any, item: Item | Mapping[str, Any], *, thread_lock: ThreadLock = local_thread_lock) -> Resumed:
    """Resume the agent an item (an API read, or a webhook's ``data``) was asked by, once it carries a decision."""
    external = item.external if isinstance(item, Item) else item.get("external")
    resume = item.resume if isinstance(item, Item) else (item.get("decision") or {}).get("resume")
    if not external or resume is None or not external.get("thread_id") or not external.get("interrupt_id"):
        return Resumed(resumed=False)
    return decision_resume(graph, thread_id=external["thread_id"], interrupt_id=external["interrupt_id"],
                           resume=resume, thread_lock=thread_lock)


def decision_wait_resume(client: ReviewQueue, graph: Any, *, item_id: str, timeout: float,
                         thread_lock: ThreadLock = local_thread_lock) -> Resumed:
    """Long-poll the item's decision for up to ``timeout`` seconds and resume its agent with it."""
    item = client.wait(item_id, timeout=timeout)
    return Resumed(resumed=False) if item is None else item_resume(graph, item, thread_lock=thread_lock)


class WebhookResumer:
    """A framework-neutral webhook handler: ``resumer(headers, body)`` verifies, then resumes once.

    Call it from any web framework's view with the request's headers and raw body; a
    ``WebhookInvalid`` is a 400 to answer, anything else a 2xx (a no-op included, so
    reviewqueue stops retrying).
    """

    def __init__(self, graph: Any, *, secret: str, thread_lock: ThreadLock = local_thread_lock) -> None:
        self.graph = graph
        self.secret = secret
        self.thread_lock = thread_lock

    def __call__(self, headers: Mapping[str, str], body: bytes | str) -> Resumed:
        event = webhook_verify(secret=self.secret, headers=headers, body=body)
        if event.get("type") not in ("item.decided", "item.cancelled"):
            return Resumed(resumed=False)
        return item_resume(self.graph, event.get("data") or {}, thread_lock=self.thread_lock)
