"""A LangGraph deployment's decided interrupts resumed exactly once (``moderation.review.apply`` calls it).

The item's own pass-through thread is resumed first (``moderation.graphs.passthrough``):
its state keeps every answer under the agent's interrupt id, so what the remote thread is
owed is read from there (``ask_answers``), also by an apply tried again later.

Locking contract of ``deployment_resume``: under the *remote* thread's resume lock
(``core.resumelock``; a later round's interrupts of one thread are another item, so an
item's own thread lock is not enough) it re-reads the thread's pending interrupts and
resumes it once with every answer still pending there, ``Command(resume={interrupt_id:
value, ...})`` and ``multitask_strategy="reject"``; an answered interrupt the thread no
longer waits on (resumed already, or elsewhere) is never sent. LangGraph Server itself does not refuse a second resume of
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
from moderation.graphs.passthrough import NAME as PASSTHROUGH
from moderation.graphs.passthrough import ask_answers, ask_interrupts
from moderation.graphs.runtime import graph_values
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
    """Resume the item's remote thread with its answers, exactly once (see the module docstring); the outcome.

    ``asks``: the item's decided, unapplied asks, already answered on its own thread. Only
    withdrawn ones (resolved outside, or withdrawn by the agent) resume nothing.
    RemoteUnavailable when the deployment cannot be reached: nothing is recorded, the caller
    tries again.
    """
    thread_id = item.graph_input["external"]["thread_id"]
    answers: dict[str, Any] = {}
    if any(a.status == AskStatus.DECIDED for a in asks):
        answers = ask_answers(graph_input=item.graph_input, values=graph_values(name=item.graph, thread_id=item.thread_id))
    thread, resumed = remote_resume_once(connection=deployment_connection(deployment), lock=f"langgraph:{deployment.pk}",
                                         thread_id=thread_id, answers=answers)
    outcome: dict[str, Any] = {"thread_id": thread_id, "interrupt_ids": ask_interrupts(graph_input=item.graph_input),
                               "thread_status": thread.status, "resumed": resumed}
    if not resumed:
        # Withdrawn (found resolved by a sweep or a webhook), or decided here while it was being resolved there.
        outcome["resolved"] = RESOLVED_OUTSIDE
    if thread.error:
        outcome["error"] = thread.error[:500]
    if thread.interrupts:
        outcome["asks_next"] = len(thread.interrupts)
    return outcome


def remote_resume_once(
    *, connection: Connection, lock: str, thread_id: str, answers: dict[str, Any],
) -> tuple[RemoteThread, list[str]]:
    """Under the thread's resume lock (named ``lock:thread_id``), resume it with those of ``answers``
    (``{interrupt_id: value}``) it still waits on, if any; (the thread after, the interrupt ids this
    call resumed, sorted). Empty ``answers``: only read it."""
    with thread_resume_lock(f"{lock}:{thread_id}", timeout=settings.APPLY_LOCK_TIMEOUT):
        thread = remote_thread_read(connection=connection, thread_id=thread_id)
        if not answers:
            return thread, []
        return _resume_once(connection=connection, thread=thread, answers=answers)


def _resume_once(*, connection: Connection, thread: RemoteThread, answers: dict[str, Any]) -> tuple[RemoteThread, list[str]]:
    while True:
        if thread.status != "busy":
            pending = {i.interrupt_id for i in thread.interrupts}
            owed = {interrupt_id: value for interrupt_id, value in answers.items() if interrupt_id in pending}
            if not owed:
                return thread, []
            try:
                remote_resume(connection=connection, thread=thread, answers=owed)
                return _settled_read(connection=connection, thread_id=thread.thread_id), sorted(owed)
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
