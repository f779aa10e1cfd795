"""The LangGraph glue for async agents (``ainvoke``, an async web service): ``reviewqueue_client.langgraph``'s flow as coroutines.

The same steps with an ``AsyncReviewQueue`` and the graph's async methods: ``ainterrupts_forward``
after a run, ``AsyncWebhookResumer`` or ``adecision_wait_resume`` when the decision comes back,
``ainterrupts_reconcile`` on start-up, each resume reported with ``aoutcome_report``. The
check-then-resume is the sync glue's, under an ``AsyncThreadLock``
(``reviewqueue_client.locks.async_checkpointer_thread_lock`` by default: lock files beside an
``AsyncSqliteSaver``'s database, a PostgreSQL advisory lock beside an ``AsyncPostgresSaver``,
an ``asyncio.Lock`` for an in-memory one), so replicas sharing a checkpointer, duplicate
deliveries and a webhook racing a long-poll resume a thread once; the event loop runs on
while a resume waits for the lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from reviewqueue_client.client import AsyncReviewQueue, Item, ReviewQueueError
from reviewqueue_client.langgraph import (
    RESUMING_EVENTS,
    Resumed,
    _asks,
    _command,
    _config,
    _decision,
    _external_id,
    _outcome,
    _reasked,
    _reported,
    _resumed,
    _unreported,
    _waits_on,
)
from reviewqueue_client.locks import AsyncThreadLock, async_checkpointer_thread_lock
from reviewqueue_client.webhooks import webhook_verify


async def ainterrupts_forward(
    client: AsyncReviewQueue,
    graph: Any,
    *,
    thread_id: str,
    source: str,
    run_id: str | None = None,
    context: Mapping[str, Any] | str | None = "messages",
    **fields: Any,
) -> list[Item]:
    """``interrupts_forward``: submit every interrupt ``thread_id`` waits on, one item each, idempotently."""
    state = await graph.aget_state(_config(thread_id))
    items = []
    for ask in _asks(state, thread_id=thread_id, source=source, run_id=run_id, context=context):
        try:
            items.append(await client.submit(**ask, **fields))
        except ReviewQueueError as exc:
            existing = await anext(aiter(client.list(external_id=_external_id(ask))), None) if _reasked(exc) else None
            if existing is None:
                raise
            items.append(existing)
    return items


async def adecision_resume(
    graph: Any, *, thread_id: str, interrupt_id: str, resume: Any, thread_lock: AsyncThreadLock | None = None
) -> Resumed:
    """``decision_resume``: resume with ``{interrupt_id: resume}`` if, under the thread's lock, it still waits on it.

    ``thread_lock`` None: the lock the graph's checkpointer shares (``async_checkpointer_thread_lock``).
    """
    async with (thread_lock or async_checkpointer_thread_lock(graph.checkpointer))(thread_id):
        state = await graph.aget_state(_config(thread_id))
        if not _waits_on(state, interrupt_id):
            return Resumed(resumed=False, thread_id=thread_id, interrupt_id=interrupt_id)
        result = await graph.ainvoke(_command(interrupt_id, resume), _config(thread_id))
    return _resumed(state, result, thread_id=thread_id, interrupt_id=interrupt_id)


async def aoutcome_report(client: AsyncReviewQueue, *, item_id: str, resumed: Resumed) -> Resumed:
    """``outcome_report``: report what a resume did (nothing for a no-op), retried by the client; ``reported`` set."""
    if not resumed.resumed:
        return resumed
    status, message = _outcome(resumed)
    try:
        await client.report_outcome(item_id, status=status, message=message)
    except ReviewQueueError as exc:  # AsyncReviewQueue wraps transport errors in it too
        return _unreported(resumed, item_id=item_id, status=status, exc=exc)
    return _reported(resumed)


async def aitem_resume(
    graph: Any, item: Item | Mapping[str, Any], *, client: AsyncReviewQueue | None, thread_lock: AsyncThreadLock | None = None
) -> Resumed:
    """``item_resume``: resume from an item or a webhook's ``data`` carrying a decision, then report with ``client``."""
    decision = _decision(item)
    if decision is None:
        return Resumed(resumed=False)
    resumed = await adecision_resume(
        graph, thread_id=decision.thread_id, interrupt_id=decision.interrupt_id, resume=decision.resume, thread_lock=thread_lock
    )
    if client is None or not decision.item_id:
        return resumed
    return await aoutcome_report(client, item_id=decision.item_id, resumed=resumed)


async def adecision_wait_resume(
    client: AsyncReviewQueue,
    graph: Any,
    *,
    item_id: str,
    timeout: float,
    thread_lock: AsyncThreadLock | None = None,
    report: bool = True,
) -> Resumed:
    """``decision_wait_resume``: long-poll the decision for up to ``timeout`` seconds, resume with it, report."""
    item = await client.wait(item_id, timeout=timeout)
    if item is None:
        return Resumed(resumed=False)
    return await aitem_resume(graph, item, thread_lock=thread_lock, client=client if report else None)


async def ainterrupts_reconcile(
    client: AsyncReviewQueue,
    graph: Any,
    *,
    thread_ids: Iterable[str],
    source: str,
    thread_lock: AsyncThreadLock | None = None,
    **fields: Any,
) -> list[Resumed]:
    """``interrupts_reconcile``: forward each thread's asks again and resume, once, those already decided."""
    done = []
    for thread_id in thread_ids:
        for item in await ainterrupts_forward(client, graph, thread_id=thread_id, source=source, **fields):
            if item.resume is not None:
                done.append(await aitem_resume(graph, item, thread_lock=thread_lock, client=client))
    return done


class AsyncWebhookResumer:
    """``WebhookResumer`` for an async handler: ``await resumer(headers, body)`` verifies, resumes once, reports.

    ``WebhookInvalid`` is a 400 to answer; anything else a 2xx (a no-op included).
    """

    def __init__(self, graph: Any, *, client: AsyncReviewQueue, secret: str, thread_lock: AsyncThreadLock | None = None) -> None:
        self.graph = graph
        self.client = client
        self.secret = secret
        self.thread_lock = thread_lock

    async def __call__(self, headers: Mapping[str, str], body: bytes | str) -> Resumed:
        event = webhook_verify(secret=self.secret, headers=headers, body=body)
        if event.type not in RESUMING_EVENTS:
            return Resumed(resumed=False)
        return await aitem_resume(self.graph, event.data, thread_lock=self.thread_lock, client=self.client)
