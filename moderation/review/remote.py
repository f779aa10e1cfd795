"""A LangGraph deployment's decided interrupts resumed exactly once, and its later questions asked on the same item.

``moderation.review.apply`` calls ``deployment_resume`` after resuming the item's own
pass-through thread, whose state keeps each answer under the agent's interrupt id
(``ask_answers``).

Locking contract of ``deployment_resume``: under the *remote* thread's resume lock
(``moderation.core.resumelock``; two items may ask about one thread), it re-reads the
thread's pending interrupts and resumes it once with every answer still pending there
(``multitask_strategy="reject"``); LangGraph Server does not refuse a second resume, so this
re-read is what makes it once. A 409 (a run in flight) is waited out and read again. An
unreachable deployment raises ``RemoteUnavailable`` before anything is recorded. No database
lock is held meanwhile.

New interrupts after a resume are the item's next round: claimed as ``DeploymentInterrupt``
rows in a transaction of their own (a racing discoverer that claimed one first keeps them),
then asked through the item's own thread (``graph_run_again``). A killed apply, run again,
claims and asks nothing twice.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from moderation.core.dbpool import connection_release
from moderation.core.faults import fault_point
from moderation.core.resumelock import thread_resume_lock
from moderation.graphs.passthrough import NAME as PASSTHROUGH
from moderation.graphs.passthrough import ask_answers, ask_interrupts, ask_round_input, asks_answered, asks_asked
from moderation.graphs.remote import (
    Connection,
    RemoteBusy,
    RemoteThread,
    RemoteUnavailable,
    remote_resume,
    remote_thread_read,
)
from moderation.graphs.runtime import graph_run_again, graph_state_read, graph_values
from moderation.items.models import AskStatus, QueueItem, ReviewAsk
from moderation.review.models import Deployment, DeploymentInterrupt

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
    """Resume the item's remote thread with its answers, exactly once, and put what the thread asks next to the
    item as its next round (see the module docstring); the outcome.

    ``asks``: the item's decided, unapplied asks, already answered on its own thread. Only
    withdrawn ones (resolved outside, or withdrawn by the agent) resume nothing, and open no round.
    RemoteUnavailable when the deployment cannot be reached: nothing is recorded, the caller
    tries again.
    """
    thread_id = item.graph_input["external"]["thread_id"]
    answers: dict[str, Any] = {}
    decided = any(a.status == AskStatus.DECIDED for a in asks)
    if decided:
        answers = ask_answers(graph_input=item.graph_input, values=graph_values(name=item.graph, thread_id=item.thread_id))
    thread, resumed = remote_resume_once(
        connection=deployment_connection(deployment), lock=f"langgraph:{deployment.pk}", thread_id=thread_id, answers=answers
    )
    fault_point("after_remote_resume", item_key=item.thread_id)
    asked_next = _round_open(deployment=deployment, item=item, thread=thread) if decided else []
    outcome: dict[str, Any] = {
        "thread_id": thread_id,
        "interrupt_ids": deployment_item_interrupts(item=item),
        "thread_status": thread.status,
        "resumed": resumed,
    }
    if not resumed:
        # Withdrawn (found resolved by a sweep or a webhook), or decided here while it was being resolved there.
        outcome["resolved"] = RESOLVED_OUTSIDE
    if thread.error:
        outcome["error"] = thread.error[:500]
    if thread.interrupts:
        outcome["asks_next"] = len(thread.interrupts)
    if asked_next:
        outcome["round"] = asked_next  # the thread's interrupts this item asks about now
    return outcome


def deployment_item_interrupts(*, item: QueueItem) -> list[str]:
    """The agent's interrupt ids the item asks about, every round's, in the order it was asked them."""
    return list(item.deployment_interrupts.order_by("id").values_list("interrupt_id", flat=True))


def deployment_interrupts_claim(*, deployment: Deployment, item: QueueItem, thread_id: str, interrupt_ids: list[str]) -> None:
    """Record that ``item`` asks about these interrupts of the thread, in the caller's transaction;
    IntegrityError (and the caller's transaction spoiled) if another item asks about one of them."""
    DeploymentInterrupt.objects.bulk_create(
        [
            DeploymentInterrupt(deployment=deployment, thread_id=thread_id, interrupt_id=interrupt_id, item=item)
            for interrupt_id in interrupt_ids
        ]
    )


def deployment_item_entered(*, item: QueueItem) -> None:
    """In the transaction that writes a new item: the interrupts a deployment's item asks about (nothing for
    any other item). IntegrityError if another item asks about one of them already: the item is not made."""
    if "asks" not in (item.graph_input or {}):
        return
    deployment = deployment_of_item(item=item)
    if deployment is not None:
        deployment_interrupts_claim(
            deployment=deployment,
            item=item,
            thread_id=item.graph_input["external"]["thread_id"],
            interrupt_ids=ask_interrupts(graph_input=item.graph_input),
        )


def _round_open(*, deployment: Deployment, item: QueueItem, thread: RemoteThread) -> list[str]:
    """The thread's interrupts this item asks about next: claimed for it (if no item asks about them yet and
    its own thread has finished its asks) and asked by its own thread (if not yet)."""
    if thread.status == "busy" or not thread.interrupts:
        return []
    claimed = set(deployment_item_interrupts(item=item))
    local = graph_state_read(name=item.graph, thread_id=item.thread_id)
    fresh = [i.interrupt_id for i in thread.interrupts if i.interrupt_id not in claimed]
    if fresh and local.finished:
        try:
            with transaction.atomic():
                deployment_interrupts_claim(deployment=deployment, item=item, thread_id=thread.thread_id, interrupt_ids=fresh)
            claimed.update(fresh)
        except IntegrityError:
            pass  # another item asks about them (found by discovery after they were resolved elsewhere)
    # Not those it answered that the thread still waits on: withdrawn ones, which resume nothing.
    answered, asked = asks_answered(values=local.values), asks_asked(values=local.values)
    mine = [i for i in thread.interrupts if i.interrupt_id in claimed and i.interrupt_id not in answered]
    unasked = [i for i in mine if i.interrupt_id not in asked]
    if unasked and local.finished:
        graph_run_again(
            name=item.graph,
            thread_id=item.thread_id,
            state=ask_round_input(asks=[{"interrupt_id": i.interrupt_id, "value": i.value} for i in unasked]),
        )
    return [i.interrupt_id for i in mine]


def remote_resume_once(
    *,
    connection: Connection,
    lock: str,
    thread_id: str,
    answers: dict[str, Any],
) -> tuple[RemoteThread, list[str]]:
    """Under the thread's resume lock (named ``lock:thread_id``), resume it with those of ``answers``
    (``{interrupt_id: value}``) it still waits on, if any; (the thread after, the interrupt ids this
    call resumed, sorted). Empty ``answers``: only read it."""
    with thread_resume_lock(f"{lock}:{thread_id}", timeout=settings.APPLY_LOCK_TIMEOUT):
        # The lock is on the checkpointer's pool; Django's connection is given back while the deployment runs.
        connection_release()
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
