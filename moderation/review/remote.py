"""A LangGraph deployment's decided interrupt resumed exactly once (``moderation.review.apply`` calls it).

Locking contract of ``deployment_resume``: under the *remote* thread's resume lock
(``core.resumelock``; parallel interrupts of one thread are several items, so an item's own
thread lock is not enough) it re-reads the thread's pending interrupts and resumes only
one still pending, with ``Command(resume={interrupt_id: value})`` and
``multitask_strategy="reject"``. LangGraph Server itself does not refuse a second resume of
one interrupt (sent after the first finished, it answers 200 with the first one's state),
so the re-read under the lock is what makes it once. A 409 (a run in flight: someone
else's resume) is waited out and the interrupts read again, never resumed blindly. An
unreachable deployment raises ``RemoteUnavailable`` before anything is recorded: the apply
keeps the decision and tries again later. No database lock is held meanwhile.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings

from moderation.core.resumelock import thread_resume_lock
from moderation.graphs.asks import AskSpec, ask_resume_langchain
from moderation.graphs.passthrough import NAME as PASSTHROUGH
from moderation.graphs.remote import (
    Connection,
    RemoteBusy,
    RemoteThread,
    RemoteUnavailable,
    remote_resume,
    remote_thread_read,
)
from moderation.models import AskStatus, Deployment, QueueItem, ReviewAsk

RESOLVED_OUTSIDE = "resolved outside reviewqueue"
# A 409 is a run in flight; waited out this long (the run is someone else's resume) before reading again.
BUSY_WAIT_SECONDS = 60.0


def deployment_connection(deployment: Deployment) -> Connection:
    return Connection(url=deployment.url, api_key=deployment.api_key)


def deployment_of_item(*, item: QueueItem) -> Deployment | None:
    """The deployment an item asks for (None for every other item).

    A deployment's interrupts are submitted as asks (the pass-through graph) by its own client:
    any other item is answered without a query, so the apply of an ordinary item pays nothing.
    """
    if item.submitted_by_id is None or item.graph != PASSTHROUGH:
        return None
    return Deployment.objects.filter(client_id=item.submitted_by_id).first()


def deployment_resume(*, deployment: Deployment, item: QueueItem, asks: list[ReviewAsk]) -> dict[str, Any]:
    """Resume the item's remote interrupt with its decision, exactly once (see the module docstring); the outcome.

    ``asks``: the item's decided, unapplied asks (its one pass-through ask). A withdrawn one
    (resolved outside, or withdrawn by the agent) resumes nothing. RemoteUnavailable when the
    deployment cannot be reached: nothing is recorded, the caller tries again.
    """
    external = item.graph_input["external"]
    thread_id, interrupt_id = external["thread_id"], external["interrupt_id"]
    decided = [a for a in asks if a.status == AskStatus.DECIDED]
    value = None
    if decided:
        value = ask_resume_langchain(spec=AskSpec.from_payload(decided[0].payload), decisions=decided[0].decisions)
    thread, resumed = remote_resume_once(connection=deployment_connection(deployment), lock=f"langgraph:{deployment.pk}",
                                         thread_id=thread_id, interrupt_id=interrupt_id, value=value,
                                         resume=bool(decided))
    outcome: dict[str, Any] = {"thread_id": thread_id, "interrupt_id": interrupt_id, "thread_status": thread.status,
                               "resumed": resumed}
    if not resumed:
        # Withdrawn (found resolved by a sweep or a webhook), or decided here while it was being resolved there.
        outcome["resolved"] = RESOLVED_OUTSIDE
    if thread.error:
        outcome["error"] = thread.error[:500]
    if thread.interrupts:
        outcome["asks_next"] = len(thread.interrupts)
    return outcome


def remote_resume_once(
    *, connection: Connection, lock: str, thread_id: str, interrupt_id: str, value: Any, resume: bool = True,
) -> tuple[RemoteThread, bool]:
    """Under the thread's resume lock (named ``lock:thread_id``), resume ``interrupt_id`` with ``value`` if the
    thread still waits on it; (the thread after, whether this call resumed it). ``resume=False``: only read it."""
    with thread_resume_lock(f"{lock}:{thread_id}", timeout=settings.APPLY_LOCK_TIMEOUT):
        thread = remote_thread_read(connection=connection, thread_id=thread_id)
        if not resume:
            return thread, False
        return _resume_once(connection=connection, thread=thread, interrupt_id=interrupt_id, value=value)


def _resume_once(*, connection: Connection, thread: RemoteThread, interrupt_id: str, value: Any) -> tuple[RemoteThread, bool]:
    while True:
        if thread.status != "busy" and interrupt_id not in {i.interrupt_id for i in thread.interrupts}:
            return thread, False
        if thread.status != "busy":
            try:
                remote_resume(connection=connection, thread=thread, answers={interrupt_id: value})
                return _settled_read(connection=connection, thread_id=thread.thread_id), True
            except RemoteBusy:
                pass
        # A run in flight (someone else's): wait for it to end, then read what it left.
        thread = _settled_read(connection=connection, thread_id=thread.thread_id)


def _settled_read(*, connection: Connection, thread_id: str) -> RemoteThread:
    deadline = time.monotonic() + BUSY_WAIT_SECONDS
    while True:
        thread = remote_thread_read(connection=connection, thread_id=thread_id)
        if thread.status != "busy" or time.monotonic() > deadline:
            if thread.status == "busy":
                raise RemoteUnavailable(f"thread {thread_id} still has a run in flight after {BUSY_WAIT_SECONDS:.0f} s")
            return thread
        time.sleep(0.2)
