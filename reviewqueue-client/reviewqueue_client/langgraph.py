"""Durable LangGraph glue: an agent's own graph pauses at its own ``interrupt()``; humans decide in reviewqueue.

1. After a run, ``interrupts_forward`` sends each interrupt the thread waits on as an ask,
   with ``external = {thread_id, interrupt_id}``: reviewqueue's natural key, so forwarding
   again (a retry, a restart that reconciles) answers with the same item. Each ask is titled
   with its tools' names ("Approve refund_payment") and carries, as its ``context``, the
   thread's last messages (when its state has ``messages``), so a reviewer sees why the agent asks.
2. The decision comes back by webhook (``WebhookResumer``) or long-poll (``decision_wait_resume``),
   and ``decision_resume`` runs ``Command(resume={interrupt_id: resume})`` exactly once:
   under a per-thread lock it re-reads the thread's pending interrupts and resumes only if
   the interrupt is still among them. So a duplicate delivery, a webhook racing a
   long-poll, and a decision for an interrupt the thread no longer waits on are no-ops.
   The lock is the one the graph's checkpointer lets every process share
   (``reviewqueue_client.locks.checkpointer_thread_lock``: a lock file beside a SQLite
   checkpointer, a PostgreSQL advisory lock beside a PostgreSQL one, a lock in this process
   for an in-memory one), so replicas of the agent service sharing a checkpointer resume
   once too; ``thread_lock`` takes any other ``thread_id -> context manager`` (a Redis lock).
3. After a crash or a restart, ``interrupts_reconcile`` forwards again what each thread
   still waits on (idempotent: the same items come back) and resumes those already decided,
   through the same check-then-resume: a decision received but never resumed is resumed
   once, and a redelivery racing the reconcile is a no-op.
4. The glue then reports what the resumed run did (``POST /items/{id}/outcome``), with the
   client every entry point is given: ``failed`` with its tools' errors when a tool of the
   run failed (an error ``ToolMessage``; LangChain's stand-in for a rejected call is the
   decision, not a failure), else ``done`` with the agent's answer. It is shown on the
   item's page. A report the server could not take is sent again until it is stored
   (``ReviewQueue.report_outcome``: bounded, backoff with jitter, ``Retry-After``
   honoured; safe, since the same report again is a success). One that still could not
   be sent is logged and left (``Resumed.reported`` False). ``item_resume(..., client=None)``
   and ``decision_wait_resume(..., report=False)`` resume without reporting.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from langgraph.types import Command

from reviewqueue_client.client import Item, ReviewQueue, ReviewQueueError
from reviewqueue_client.locks import (  # noqa: F401 - the locks, importable from here too
    ThreadLock,
    checkpointer_thread_lock,
    file_thread_lock,
    local_thread_lock,
    postgres_thread_lock,
)
from reviewqueue_client.webhooks import webhook_verify

_TITLE_MAX = 200
# The ask's default context: the thread's last messages, within reviewqueue's bounds (CONTEXT_* in its
# moderation.review.submissions): a message's content, and the whole context as JSON, leaving room to spare.
CONTEXT_MESSAGES = 6
_CONTEXT_MESSAGE_MAX = 4000
_CONTEXT_MAX_BYTES = 30_000
# reviewqueue's bound on an outcome's message (OUTCOME_MESSAGE_MAX_LENGTH); it refuses control characters but these.
OUTCOME_MESSAGE_MAX = 500
_KEPT_CONTROLS = "\t\n\r"
# How LangChain's HumanInTheLoopMiddleware words its error ToolMessage for a rejected call.
_REJECTED = "User rejected the tool call for `"
# The webhook events that carry what a thread resumes with.
RESUMING_EVENTS = ("item.decided", "item.cancelled")

logger = logging.getLogger(__name__)


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def interrupts_forward(
    client: ReviewQueue,
    graph: Any,
    *,
    thread_id: str,
    source: str,
    run_id: str | None = None,
    context: Mapping[str, Any] | str | None = "messages",
    **fields: Any,
) -> list[Item]:
    """Submit every interrupt ``thread_id`` waits on (after a run, or on restart to reconcile); one item each, idempotently.

    ``context``: why the agent asks, shown above the ask: ``"messages"`` (the default) sends the
    thread state's last ``CONTEXT_MESSAGES`` messages, if its state has ``messages``; a mapping is
    sent as it is (``{"summary": "<markdown>", "messages": [{"role", "content", "name"?}]}``);
    None sends none. ``fields``: any other field of ``POST /items`` (``team``, ``policy``,
    ``requested_by``, ``priority``).
    """
    state = graph.get_state(_config(thread_id))
    items = []
    for ask in _asks(state, thread_id=thread_id, source=source, run_id=run_id, context=context):
        try:
            items.append(client.submit(**ask, **fields))
        except ReviewQueueError as exc:
            existing = next(client.list(external_id=_external_id(ask)), None) if _reasked(exc) else None
            if existing is None:
                raise
            items.append(existing)
    return items


def _asks(
    state: Any, *, thread_id: str, source: str, run_id: str | None, context: Mapping[str, Any] | str | None
) -> list[dict[str, Any]]:
    """What ``interrupts_forward`` submits for each interrupt the thread's ``state`` waits on (``submit``'s keywords)."""
    if context == "messages":
        context = context_from_messages((state.values or {}).get("messages") if isinstance(state.values, dict) else None)
    asks = []
    for pending in state.interrupts:
        external = {"thread_id": thread_id, "interrupt_id": pending.id, **({"run_id": run_id} if run_id else {})}
        title, body = _describe(pending.value)
        extra = {"context": dict(context)} if isinstance(context, Mapping) and context else {}
        asks.append({"title": title, "body": body, "source": source, "ask": pending.value, "external": external, **extra})
    return asks


def _reasked(exc: ReviewQueueError) -> bool:
    # Asked already, by a version of this client that titled or described it otherwise: the
    # same thread and interrupt are the same ask, so its item is the answer.
    return exc.code == "idempotency_key_reused"


def _external_id(ask: Mapping[str, Any]) -> str:
    return f"{ask['external']['thread_id']}:{ask['external']['interrupt_id']}"


def context_from_messages(messages: Any, *, last: int = CONTEXT_MESSAGES) -> dict[str, Any] | None:
    """An ask's ``context`` from a thread's LangChain messages: the ``last`` ones with something to say,
    oldest first, as plain text within reviewqueue's bounds; None when there are none."""
    picked: list[dict[str, str]] = []
    size = 0
    for message in reversed(messages if isinstance(messages, list) else []):
        one = _context_message(message)
        if one is None:
            continue
        size += len(json.dumps(one, ensure_ascii=False).encode())
        if len(picked) == last or size > _CONTEXT_MAX_BYTES:
            break
        picked.append(one)
    return {"messages": picked[::-1]} if picked else None


def _context_message(message: Any) -> dict[str, str] | None:
    role = getattr(message, "type", None)
    if not isinstance(role, str) or not role:
        return None
    content = getattr(message, "content", "")
    if isinstance(content, list):  # content blocks: their text
        content = "\n".join(
            p if isinstance(p, str) else str(p.get("text", ""))
            for p in content
            if isinstance(p, str) or (isinstance(p, dict) and p.get("type") == "text")
        )
    text = content if isinstance(content, str) else ""
    calls = [str(c["name"]) for c in getattr(message, "tool_calls", None) or [] if isinstance(c, dict) and c.get("name")]
    if not text.strip() and calls:
        text = "calls " + ", ".join(calls)
    if not text.strip():
        return None
    one = {"role": role[:32], "content": _printable(text, limit=_CONTEXT_MESSAGE_MAX)}
    name = getattr(message, "name", None)
    if role == "tool" and isinstance(name, str) and name:
        one["name"] = _printable(name, limit=100)
    return one


# LangChain's HumanInTheLoopMiddleware ends a description it writes itself with the call
# ("...\n\nTool: <name>\nArgs: {...}"); reviewqueue shows the call on its own.
def _description(action: Mapping[str, Any]) -> str:
    name, description = str(action.get("name", "")), str(action.get("description") or "")
    return re.sub(rf"(?:^|\n\n?)Tool: {re.escape(name)}\nArgs: [^\n]*(?=\n|\Z)", "", description).strip()


def _describe(value: Any) -> tuple[str, str]:
    """What the queue shows of an ask: its tools' names, and their descriptions (the call itself is shown beside)."""
    if isinstance(value, dict) and isinstance(value.get("action_requests"), list):
        actions = [a for a in value["action_requests"] if isinstance(a, dict)]
    elif isinstance(value, dict) and value.get("type") == "tool_approval":  # LangChain's per-call ask: one tool call
        actions = [value]
    else:
        return "Review requested", json.dumps(value, ensure_ascii=False)
    title = "Approve " + ", ".join(str(a.get("name", "?")) for a in actions)
    body = "\n".join(f"{a.get('name')}: {d}" if (d := _description(a)) else str(a.get("name")) for a in actions)
    return title[:_TITLE_MAX], body or title


@dataclass(frozen=True)
class Resumed:
    """What a decision did: ``resumed`` False when it was a no-op (already resumed, or no longer waited on)."""

    resumed: bool
    thread_id: str | None = None
    interrupt_id: str | None = None
    result: Any = None
    errors: tuple[str, ...] = ()  # the resumed run's tool errors ("refund_payment: ..."), rejected calls left out
    reported: bool = False  # its outcome was reported to reviewqueue


def run_tool_errors(messages: Any) -> list[str]:
    """The errors of the tools in ``messages`` (error ``ToolMessage``s, but not a reviewer's rejection)."""
    errors = []
    for m in messages if isinstance(messages, list) else []:
        if getattr(m, "type", None) != "tool" or getattr(m, "status", None) != "error":
            continue
        text = m.content if isinstance(m.content, str) else json.dumps(m.content, ensure_ascii=False, default=str)
        if not text.startswith(_REJECTED):
            errors.append(f"{m.name}: {text.rpartition(chr(10) + 'Tool response:' + chr(10))[2]}")
    return errors


def _answer(result: Any) -> str:
    messages = result.get("messages") if isinstance(result, dict) else None
    for m in reversed(messages if isinstance(messages, list) else []):
        if getattr(m, "type", None) == "ai" and not getattr(m, "tool_calls", None) and isinstance(m.content, str):
            return m.content
    return ""


def _printable(text: str, *, limit: int) -> str:
    text = "".join(c if c.isprintable() or c in _KEPT_CONTROLS else " " for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def outcome_report(client: ReviewQueue, *, item_id: str, resumed: Resumed) -> Resumed:
    """Report what a resume did to the item that asked (nothing for a no-op); ``resumed`` with ``reported`` set."""
    if not resumed.resumed:
        return resumed
    status, message = _outcome(resumed)
    try:
        client.report_outcome(item_id, status=status, message=message)
    except (ReviewQueueError, httpx.HTTPError) as exc:
        return _unreported(resumed, item_id=item_id, status=status, exc=exc)
    return _reported(resumed)


def _outcome(resumed: Resumed) -> tuple[str, str]:
    """The status and message that report what a resume did: ``failed`` with its tools' errors, else ``done`` with the answer."""
    status = "failed" if resumed.errors else "done"
    message = "; ".join(resumed.errors) if resumed.errors else _answer(resumed.result)
    return status, _printable(message, limit=OUTCOME_MESSAGE_MAX)


def _unreported(resumed: Resumed, *, item_id: str, status: str, exc: Exception) -> Resumed:
    logger.warning("reviewqueue: the outcome of item %s (%s) was not reported: %s", item_id, status, exc)
    return resumed


def _reported(resumed: Resumed) -> Resumed:
    return Resumed(**{**resumed.__dict__, "reported": True})


def decision_resume(
    graph: Any, *, thread_id: str, interrupt_id: str, resume: Any, thread_lock: ThreadLock | None = None
) -> Resumed:
    """Resume the thread with ``{interrupt_id: resume}`` if, under its lock, it still waits on that interrupt.

    ``thread_lock`` None: the lock the graph's checkpointer shares (``checkpointer_thread_lock``).
    """
    with (thread_lock or checkpointer_thread_lock(graph.checkpointer))(thread_id):
        state = graph.get_state(_config(thread_id))
        if not _waits_on(state, interrupt_id):
            return Resumed(resumed=False, thread_id=thread_id, interrupt_id=interrupt_id)
        result = graph.invoke(_command(interrupt_id, resume), _config(thread_id))
    return _resumed(state, result, thread_id=thread_id, interrupt_id=interrupt_id)


def _waits_on(state: Any, interrupt_id: str) -> bool:
    """The check of check-then-resume: the thread still waits on this interrupt."""
    return interrupt_id in {i.id for i in state.interrupts}


def _command(interrupt_id: str, resume: Any) -> Command[Any]:
    return Command(resume={interrupt_id: resume})


def _resumed(before: Any, result: Any, *, thread_id: str, interrupt_id: str) -> Resumed:
    """What a resume from the state ``before`` it did: the result, and the errors of the tools it ran."""
    seen = len((before.values or {}).get("messages") or []) if isinstance(before.values, dict) else 0
    new = (result.get("messages") or [])[seen:] if isinstance(result, dict) else []
    return Resumed(
        resumed=True, thread_id=thread_id, interrupt_id=interrupt_id, result=result, errors=tuple(run_tool_errors(new))
    )


def item_resume(
    graph: Any, item: Item | Mapping[str, Any], *, client: ReviewQueue | None, thread_lock: ThreadLock | None = None
) -> Resumed:
    """Resume the agent an item (an API read, or a webhook's ``data``) was asked by, once it carries a decision;
    then report the run's outcome with ``client`` (``outcome_report``; None: no report)."""
    decision = _decision(item)
    if decision is None:
        return Resumed(resumed=False)
    resumed = decision_resume(
        graph, thread_id=decision.thread_id, interrupt_id=decision.interrupt_id, resume=decision.resume, thread_lock=thread_lock
    )
    return (
        outcome_report(client, item_id=decision.item_id, resumed=resumed) if client is not None and decision.item_id else resumed
    )


@dataclass(frozen=True)
class _Decision:
    item_id: str | None
    thread_id: str
    interrupt_id: str
    resume: Any


def _decision(item: Item | Mapping[str, Any]) -> _Decision | None:
    """The decision an item (an API read, or a webhook's ``data``) carries for an agent's thread; None without one."""
    external = item.external if isinstance(item, Item) else item.get("external")
    resume = item.resume if isinstance(item, Item) else (item.get("decision") or {}).get("resume")
    if not external or resume is None or not external.get("thread_id") or not external.get("interrupt_id"):
        return None
    return _Decision(
        item_id=item.id if isinstance(item, Item) else item.get("id"),
        thread_id=external["thread_id"],
        interrupt_id=external["interrupt_id"],
        resume=resume,
    )


def decision_wait_resume(
    client: ReviewQueue, graph: Any, *, item_id: str, timeout: float, thread_lock: ThreadLock | None = None, report: bool = True
) -> Resumed:
    """Long-poll the item's decision for up to ``timeout`` seconds and resume its agent with it (then report its outcome)."""
    item = client.wait(item_id, timeout=timeout)
    if item is None:
        return Resumed(resumed=False)
    return item_resume(graph, item, thread_lock=thread_lock, client=client if report else None)


def interrupts_reconcile(
    client: ReviewQueue,
    graph: Any,
    *,
    thread_ids: Iterable[str],
    source: str,
    thread_lock: ThreadLock | None = None,
    **fields: Any,
) -> list[Resumed]:
    """On start-up, for each of ``thread_ids``: forward what it waits on again, and resume it with what is already decided.

    Forwarding is idempotent (the natural key answers with the same items, as they are now),
    so an ask the agent sent before it died is not asked twice, one it never sent is sent
    now, and a decision whose webhook it received but never acted on is resumed, once.
    ``fields`` as in ``interrupts_forward``. One ``Resumed`` per decided item.
    """
    done = []
    for thread_id in thread_ids:
        for item in interrupts_forward(client, graph, thread_id=thread_id, source=source, **fields):
            if item.resume is not None:
                done.append(item_resume(graph, item, thread_lock=thread_lock, client=client))
    return done


class WebhookResumer:
    """A framework-neutral webhook handler: ``resumer(headers, body)`` verifies, resumes once, reports the outcome.

    Call it from any web framework's view with the request's headers and raw body; a
    ``WebhookInvalid`` is a 400 to answer, anything else a 2xx (a no-op included, so
    reviewqueue stops retrying). ``client`` reports each resume's outcome (``outcome_report``).
    """

    def __init__(self, graph: Any, *, client: ReviewQueue, secret: str, thread_lock: ThreadLock | None = None) -> None:
        self.graph = graph
        self.client = client
        self.secret = secret
        self.thread_lock = thread_lock

    def __call__(self, headers: Mapping[str, str], body: bytes | str) -> Resumed:
        event = webhook_verify(secret=self.secret, headers=headers, body=body)
        if event.type not in RESUMING_EVENTS:
            return Resumed(resumed=False)
        return item_resume(self.graph, event.data, thread_lock=self.thread_lock, client=self.client)
