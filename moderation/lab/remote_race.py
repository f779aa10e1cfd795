"""The race lab against a real LangGraph Server: reviewers resuming one interrupt at once, naive or guarded.

- ``naive``: what a client without reviewqueue does. Each reviewer reads the thread, sees
  the interrupt pending, and resumes it; a 409 (a run in flight) is retried until the server
  answers. LangGraph Server runs the first resume and answers every later one with 200 and
  the first one's state: each reviewer is told their decision went through, and all but one
  are lost.
- ``guarded``: the same reviewers through ``moderation.review.remote.remote_resume_once``:
  under the thread's resume lock, the interrupts read again before the resume. One resumes;
  the others find the interrupt gone and are told who won.

Judged by the history checker (``moderation.lab.history``) from the server's own record:
the thread's final state names the winner (the graph keeps its resume value in ``outcome``,
as ``moderation/tests/langgraph_app``'s ``hitl`` does), its checkpoints count the resumes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from moderation.graphs.remote import (
    Connection,
    RemoteBusy,
    remote_counts,
    remote_resume,
    remote_thread_read,
    remote_thread_start,
    remote_values,
)
from moderation.lab.history import Anomaly, FinalItem, HistoryRecorder, history_check
from moderation.lab.worker import BARRIER_TIMEOUT
from moderation.review.remote import remote_resume_once

MODES = ("naive", "guarded")
# Before the first resume a thread holds two checkpoints: its input, and the state paused at the interrupt.
CHECKPOINTS_AT_INTERRUPT = 2


@dataclass
class RemoteRaceReport:
    mode: str
    thread_id: str
    told_won: list[str]
    winner: str | None
    runs: int
    resumes: int
    anomalies: list[Anomaly]

    def summary(self) -> str:
        told = ", ".join(self.told_won) or "nobody"
        return (
            f"{self.mode}: told they won: {told}; the thread's outcome is {self.winner}'s; "
            f"{self.runs} runs, {self.resumes} resume(s) took effect; anomalies: "
            + ("; ".join(map(str, self.anomalies)) or "none")
        )


def naive_resume(*, connection: Connection, thread_id: str, interrupt_id: str, value: Any) -> bool:
    """Check, then resume, retrying a 409 until answered; True when the server said yes (it always does, at last)."""
    thread = remote_thread_read(connection=connection, thread_id=thread_id)
    if interrupt_id not in {i.interrupt_id for i in thread.interrupts}:
        return False
    while True:
        try:
            remote_resume(connection=connection, thread=thread, answers={interrupt_id: value})
            return True
        except RemoteBusy:
            time.sleep(0.05)


def remote_race(*, url: str, assistant: str, reviewers: list[str], mode: str) -> RemoteRaceReport:
    """Start a thread of ``assistant`` to its interrupt, release ``reviewers`` onto it together, judge."""
    connection = Connection(url=url)
    thread_id = remote_thread_start(connection=connection, assistant=assistant, graph_input={})
    interrupt_id = remote_thread_read(connection=connection, thread_id=thread_id).interrupts[0].interrupt_id
    history = HistoryRecorder()
    barrier = threading.Barrier(len(reviewers))

    def reviewer(name: str) -> None:
        value = {"decisions": [{"type": "reject", "message": name}]}
        barrier.wait(timeout=BARRIER_TIMEOUT)
        op = history.invoke(reviewer=name, item=thread_id, decision="reject")
        try:
            if mode == "naive":
                won = naive_resume(connection=connection, thread_id=thread_id, interrupt_id=interrupt_id, value=value)
            else:
                _, resumed = remote_resume_once(
                    connection=connection, lock="racelab", thread_id=thread_id, answers={interrupt_id: value}
                )
                won = bool(resumed)
        except Exception as exc:  # noqa: BLE001 - the reviewer does not know what came of it
            history.complete(op, completion="unknown", error=f"{type(exc).__name__}: {exc}")
            return
        history.complete(op, completion="ok" if won else "fail", told_winner=name if won else _winner(connection, thread_id))

    threads = [threading.Thread(target=reviewer, args=(name,)) for name in reviewers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    runs, checkpoints = remote_counts(connection=connection, thread_id=thread_id)
    winner = _winner(connection, thread_id)
    final = FinalItem(
        winner=winner, winning_attempts=1 if winner else 0, resumes=checkpoints - CHECKPOINTS_AT_INTERRUPT, decision="reject"
    )
    return RemoteRaceReport(
        mode=mode,
        thread_id=thread_id,
        winner=winner,
        runs=runs,
        resumes=final.resumes,
        told_won=sorted(op.reviewer for op in history.ops if op.completion == "ok"),
        anomalies=history_check(ops=history.ops, final={thread_id: final}),
    )


def _winner(connection: Connection, thread_id: str) -> str | None:
    outcome = remote_values(connection=connection, thread_id=thread_id).get("outcome")
    try:
        return outcome["decisions"][0]["message"]
    except (TypeError, KeyError, IndexError):
        return None
