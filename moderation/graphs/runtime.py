"""Running any registered graph under an item's thread: start, read its asks, resume, inspect.

Callers that resume hold the thread's resume lock (``moderation.review.apply``): LangGraph
itself lets two concurrent resumes of one thread both run, forking its checkpoints.

Resumes run with ``durability="sync"``: each step's checkpoint is written before the next
step starts. A process killed inside a node leaves the thread ``GraphState.stalled``, and
``graph_continue`` runs that node again from its start, or takes its saved writes if it had
finished. So a node may run twice, never after its writes were saved: nodes must be
idempotent (a tool with side effects keys them on the thread id and the ask's interrupt id).
See contributors/architecture.md.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from django.db import Error as DjangoDatabaseError
from django.db import InterfaceError as DjangoInterfaceError
from django.db import OperationalError as DjangoOperationalError
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.types import INTERRUPT, RESUME
from langgraph.types import Command

from moderation.core.checkpointer import checkpointer_pinned_current, checkpointer_shared
from moderation.graphs.asks import AskSpec, ask_spec_from_interrupt
from moderation.graphs.registry import graph_factory

_compiled: dict[tuple[str, int], Any] = {}
_compiled_lock = threading.Lock()


@dataclass(frozen=True)
class PendingAsk:
    interrupt_id: str
    spec: AskSpec


def graph_get(*, name: str, checkpointer: BaseCheckpointSaver | None = None) -> Any:
    """The compiled graph ``name`` on ``checkpointer``, else on this thread's saver (``checkpointer_get``).

    Compiled once per saver that lives as long as its process; a saver pinned to a resume lock's
    connection (``checkpointer_pinned``, one per lock taken) gets a copy of the shared saver's graph.
    """
    pinned = checkpointer_pinned_current() if checkpointer is None else None
    base = checkpointer or checkpointer_shared()
    key = (name, id(base))
    graph = _compiled.get(key)
    # An id can be reused once a closed saver is collected; the identity check catches it.
    if graph is None or graph.checkpointer is not base:
        with _compiled_lock:
            graph = _compiled[key] = graph_factory(name=name)(base)
    return graph if pinned is None else graph.copy(update={"checkpointer": pinned})


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


@dataclass(frozen=True)
class GraphState:
    """What a thread is doing now, from one read of its checkpoint."""

    asks: list[PendingAsk]
    error: str | None  # the error of the node that last failed, if any
    finished: bool
    values: dict[str, Any]
    checkpointed: bool = True  # False: nothing was ever saved on the thread (never started, or a start that failed)

    @property
    def stalled(self) -> bool:
        """Left between its steps: nodes still to run, none of them waiting for review or failed.

        Only a run that died mid-graph leaves a thread so (see the module docstring).
        """
        return self.checkpointed and not self.finished and not self.asks and self.error is None


def graph_state_read(*, name: str, thread_id: str) -> GraphState:
    state = graph_get(name=name).get_state(_config(thread_id))
    return GraphState(
        asks=_asks(state),
        error=next((str(task.error) for task in state.tasks if task.error), None),
        # Not ``state.next == ()``: a run killed after a step's node saved its writes, before the step's
        # checkpoint, leaves that node out of ``next`` (its work is done) with nothing after it scheduled yet.
        finished=state.created_at is not None and not state.tasks,
        values=state.values,
        checkpointed=state.created_at is not None,
    )


def _asks(state: Any) -> list[PendingAsk]:
    return [
        PendingAsk(
            interrupt_id=i.id, spec=ask_spec_from_interrupt(value=i.value, response_schema=getattr(i, "response_schema", None))
        )
        for i in state.interrupts
    ]


# In the metadata of the checkpoint a start writes (LangGraph keeps a run's config metadata there).
_START_MARK = {"reviewqueue_run": "start"}
# PostgreSQL's unique index on the start-marked checkpoints (migration 0031): one start per thread.
START_INDEX = "checkpoints_one_start"
# How long a start that lost to another waits for that start's interrupts, written just after its checkpoint.
START_JOIN_SECONDS = 10.0
# Failures of the storage under a run (the checkpointer's database), not of the graph: ours, and worth trying again.
_STORAGE_ERRORS = (DjangoDatabaseError, psycopg.Error, sqlite3.Error, MemoryError)
# Of those, a connection the database ended (a terminated backend, a failover) or a database busy for too long:
# the same run, tried again on a new connection, goes through.
STORAGE_LOST = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    DjangoOperationalError,
    DjangoInterfaceError,
    sqlite3.OperationalError,
)
START_ERROR_MAX_CHARS = 500


class GraphStartRefused(Exception):
    """The graph raised while running from its start state: the submitter's input, not the
    server, is at fault (a refund agent handed ``messages`` that are not messages)."""


def graph_start(*, name: str, thread_id: str, state: dict[str, Any]) -> GraphState:
    """Run a new item's graph up to its first interrupt(s); return its state there (what it asks).

    ``durability="exit"`` saves one checkpoint, at the interrupt, instead of one per
    step: a start that fails midway leaves nothing to resume and no item row either
    (``item_create`` commits the row only after this returns). Resumes keep the
    default, so ``graph_resume_count`` can read their per-step history. The checkpoint
    carries ``_START_MARK`` in its metadata, so ``graph_start_count`` can tell a start
    from a resume.

    Anything the graph raises, except a storage failure, is ``GraphStartRefused`` with the
    graph's own message (no NUL, at most ``START_ERROR_MAX_CHARS``), and the thread is
    deleted: even with ``durability="exit"`` LangGraph saves the failed run's checkpoint,
    and a thread that never asked holds nothing anyone needs.

    Callers hold the thread's resume lock, so a second start does not run. Where that lock
    can be lost under a running start (PostgreSQL's, with its backend terminated), a second
    start may run all the same; its checkpoint then breaks ``START_INDEX``, and it returns
    the first start's state instead of its own: one start, whose interrupts every caller names.
    A first start that never saved its interrupts (its connection ended between its checkpoint
    and them) left a start no caller can join: it is cleared and the graph started again.
    """
    graph = graph_get(name=name)
    try:
        started = _start_run(graph=graph, name=name, thread_id=thread_id, state=state)
        if not started.asks and started.checkpointed and not started.finished:
            # Its lock's fence (moderation.core.resumelock) ended that start's writes with its connection.
            graph.checkpointer.delete_thread(thread_id)
            started = _start_run(graph=graph, name=name, thread_id=thread_id, state=state)
    except _STORAGE_ERRORS:
        raise
    except Exception as exc:  # noqa: BLE001 - a graph may raise anything; the submitter is told what
        graph.checkpointer.delete_thread(thread_id)
        message = f"the {name} graph refused its start: {type(exc).__name__}: {exc}".replace("\x00", "\\x00")
        raise GraphStartRefused(message[:START_ERROR_MAX_CHARS]) from exc
    if not started.asks:
        raise RuntimeError(f"graph {name!r} for {thread_id} finished without asking for review")
    return started


def _start_run(*, graph: Any, name: str, thread_id: str, state: dict[str, Any]) -> GraphState:
    """One start from ``state``; the thread's state after it (or after the start that saved its checkpoint first)."""
    try:
        graph.invoke(state, {**_config(thread_id), "metadata": _START_MARK}, durability="exit")
    except psycopg.errors.UniqueViolation as exc:
        if exc.diag.constraint_name != START_INDEX:
            raise
        return _start_joined(name=name, thread_id=thread_id)
    return graph_state_read(name=name, thread_id=thread_id)


def _start_joined(*, name: str, thread_id: str) -> GraphState:
    """The state the thread's first start left: its checkpoint is saved, its interrupts (pending writes) follow it."""
    deadline = time.monotonic() + START_JOIN_SECONDS
    while True:
        started = graph_state_read(name=name, thread_id=thread_id)
        if started.asks or time.monotonic() >= deadline:
            return started
        time.sleep(0.05)


def graph_asks_pending(*, name: str, thread_id: str) -> list[PendingAsk]:
    """Every interrupt the thread is paused at, in task order."""
    return _asks(graph_get(name=name).get_state(_config(thread_id)))


def graph_resume(*, name: str, thread_id: str, answers: dict[str, Any]) -> None:
    """Resume the thread with ``{interrupt_id: value}``; interrupts not named stay pending."""
    graph_get(name=name).invoke(Command(resume=answers), _config(thread_id), durability="sync")


def graph_resume_values(*, name: str, thread_id: str) -> dict[str, Any]:
    """What each interrupt of the thread was resumed with, by interrupt id (``recover --all`` compares them with the rows).

    Read from the checkpointer's pending writes: a resume writes, on the checkpoint that
    held the interrupts, each task's answers (``RESUME``, in the order the task raised
    them) beside that task's interrupts (``INTERRUPT``). Once written they never change.
    """
    answers: dict[str, Any] = {}
    for saved in graph_get(name=name).checkpointer.list(_config(thread_id)):
        asked: dict[str, list[Any]] = {}
        resumed: dict[str, list[Any]] = {}
        for task_id, channel, value in saved.pending_writes or ():
            if channel == INTERRUPT:
                asked.setdefault(task_id, []).extend(value)
            elif channel == RESUME:
                resumed.setdefault(task_id, []).extend(value if isinstance(value, list) else [value])
        for task_id, interrupts in asked.items():
            answers.update((i.id, v) for i, v in zip(interrupts, resumed.get(task_id, []), strict=False))
    return answers


def graph_values(*, name: str, thread_id: str) -> dict[str, Any]:
    return graph_get(name=name).get_state(_config(thread_id)).values


def graph_is_finished(*, name: str, thread_id: str) -> bool:
    return graph_state_read(name=name, thread_id=thread_id).finished


def graph_continue(*, name: str, thread_id: str) -> None:
    """Run on from the last checkpoint: the node that failed, or the nodes a killed run left (``GraphState.stalled``)."""
    graph_get(name=name).invoke(None, _config(thread_id), durability="sync")


def graph_run_again(*, name: str, thread_id: str, state: dict[str, Any]) -> None:
    """Run a finished thread from its start again, ``state`` over its values, to its end or next interrupt(s)
    (the pass-through's next round of asks: ``moderation.graphs.passthrough``)."""
    graph_get(name=name).invoke(state, _config(thread_id), durability="sync")


def graph_error_read(*, name: str, thread_id: str) -> str | None:
    """The error of the node that last failed on this thread, if any."""
    return graph_state_read(name=name, thread_id=thread_id).error


@dataclass(frozen=True)
class RunCounts:
    starts: int  # runs from an input (``graph_start``)
    resumes: int  # runs on from an interrupt
    settled: bool  # its latest checkpoint is at its end or at an interrupt (not ``GraphState.stalled``)


def graph_run_counts(*, name: str, thread_id: str) -> RunCounts:
    """How many times the thread was started and resumed, from one read of its checkpoint history.

    One start writes one checkpoint, marked; two racing starts write one each, as does
    a start run again on a thread already paused. A resume leaves its first checkpoint
    as a child of the checkpoint that held the interrupts; two racing resumes leave two
    sibling children. The latest state alone would hide both. A second start on a
    paused thread is a child of that checkpoint too: it counts as a start, not a resume.
    """
    history = list(graph_get(name=name).get_state_history(_config(thread_id)))  # newest first
    asking = {s.config["configurable"]["checkpoint_id"] for s in history if s.interrupts}
    # Its latest state as a resume would find it (a step's record, as the history gives, names an interrupt
    # even once answered, and a node whose step was never checkpointed as still to run).
    now = graph_state_read(name=name, thread_id=thread_id)
    return RunCounts(
        settled=now.finished or bool(now.asks),
        starts=sum(1 for s in history if _is_start(s)),
        resumes=sum(
            1
            for s in history
            if s.parent_config and s.parent_config["configurable"]["checkpoint_id"] in asking and not _is_start(s)
        ),
    )


def graph_resume_count(*, name: str, thread_id: str) -> int:
    """How many resumes the thread took (``graph_run_counts``)."""
    return graph_run_counts(name=name, thread_id=thread_id).resumes


def graph_start_count(*, name: str, thread_id: str) -> int:
    """How many times the thread was started (``graph_run_counts``)."""
    return graph_run_counts(name=name, thread_id=thread_id).starts


def _is_start(snapshot: Any) -> bool:
    return all((snapshot.metadata or {}).get(k) == v for k, v in _START_MARK.items())


def graph_forks(*, name: str, thread_id: str) -> int:
    """Checkpoints with more than one child: each is a thread resumed twice from one point."""
    history = list(graph_get(name=name).get_state_history(_config(thread_id)))
    children: dict[str, int] = {}
    for s in history:
        if s.parent_config:
            parent = s.parent_config["configurable"]["checkpoint_id"]
            children[parent] = children.get(parent, 0) + 1
    return sum(1 for n in children.values() if n > 1)
