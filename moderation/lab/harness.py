"""Release N reviewers onto the same item at the same instant, many times, and judge.

Two modes: ``threads`` (one process, one thread per reviewer) and ``processes`` (one
OS process per reviewer, sharing only the database and the checkpointer).
Each worker walks the same item list; a barrier releases all of them onto each item
together. Judging reads the final rows and the graphs' checkpoint history.

By default reviewers alternate approve and reject; ``decisions`` gives each worker its
own instead, e.g. ``["withdraw", "approve", "reject"]`` to race the item's submitter
(withdrawing) against two moderators, or ``"deadline"`` for the item's deadline firing
(``strategies.deadline_fire``, as the account "deadline"). With ``at_deadline`` every
racer, released by the barrier, waits for the item's deadline and acts at that instant.

On quorum items (``moderation.policies``) the checker's policy invariants are counted
too: double resolutions (more than one winning attempt or acknowledged winner) and
votes lost (acknowledged votes missing from the final votes or the resolved tally).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from uuid import UUID

from django.contrib.auth import get_user_model
from django.db import connection, connections

from moderation.graphs.runtime import graph_asks_pending
from moderation.items.models import QueueItem
from moderation.lab.attempts import Attempt, attempt_run
from moderation.lab.history import (
    Anomaly,
    FinalItem,
    Op,
    history_check,
    history_final_read,
    history_wait_applied,
)
from moderation.lab.strategies import STRATEGIES
from moderation.lab.worker import BARRIER_TIMEOUT, reviewer_main
from moderation.policies.rules import DEADLINE_USERNAME


@dataclass
class ItemVerdict:
    item: str
    winner: str | None
    acknowledged: list[str]
    resumes: int
    still_paused: bool
    lost: list[str] = field(default_factory=list)
    misinformed: list[str] = field(default_factory=list)
    double_resolution: bool = False
    votes_lost: int = 0


@dataclass
class RaceReport:
    attempts: list[Attempt]
    verdicts: list[ItemVerdict]
    seconds: float
    anomalies: list[Anomaly] = field(default_factory=list)

    @property
    def lost_decisions(self) -> int:
        return sum(len(v.lost) for v in self.verdicts)

    @property
    def false_successes(self) -> int:
        return sum(1 for v in self.verdicts if len(v.acknowledged) > 1)

    @property
    def double_resumes(self) -> int:
        return sum(1 for v in self.verdicts if v.resumes > 1)

    @property
    def double_resolutions(self) -> int:
        return sum(1 for v in self.verdicts if v.double_resolution)

    @property
    def votes_lost(self) -> int:
        return sum(v.votes_lost for v in self.verdicts)

    @property
    def deadline_wins(self) -> int:
        return sum(1 for a in self.attempts if a.reviewer == DEADLINE_USERNAME and a.won)

    @property
    def misinformed_losers(self) -> int:
        return sum(len(v.misinformed) for v in self.verdicts)

    @property
    def errors(self) -> list[str]:
        return [a.error for a in self.attempts if a.error]

    def latency_ms(self, *, percentile: float) -> float:
        """Nearest-rank percentile of the attempts' latencies (0.0 with no attempts)."""
        latencies = sorted(a.latency_ms for a in self.attempts if a.started_at)
        if not latencies:
            return 0.0
        return latencies[max(0, math.ceil(percentile / 100 * len(latencies)) - 1)]

    @property
    def decisions_per_second(self) -> float:
        """Attempts per second of racing: each item's span runs from its first attempt's
        start to its last one's end, so process start-up and item set-up do not count."""
        spans: dict[str, tuple[float, float]] = {}
        for a in self.attempts:
            if not a.started_at:
                continue
            end = a.started_at + a.latency_ms / 1000
            first, last = spans.get(a.item, (a.started_at, end))
            spans[a.item] = (min(first, a.started_at), max(last, end))
        busy = sum(last - first for first, last in spans.values())
        counted = sum(1 for a in self.attempts if a.started_at)
        return counted / busy if busy > 0 else 0.0


def decision_for(index: int) -> str:
    return "approve" if index % 2 == 0 else "reject"


def decisions_for(usernames: Sequence[str], decisions: Sequence[str] | None) -> list[str]:
    if decisions is None:
        return [decision_for(i) for i in range(len(usernames))]
    if len(decisions) != len(usernames):
        raise ValueError(f"{len(decisions)} decisions for {len(usernames)} reviewers")
    return list(decisions)


def race_threads(
    *,
    strategy: str,
    items: Sequence[str],
    usernames: Sequence[str],
    delay: float,
    on_attempt: Callable[[Attempt], None] | None = None,
    decisions: Sequence[str] | None = None,
    at_deadline: bool = False,
) -> RaceReport:
    decide = STRATEGIES[strategy]
    chosen = decisions_for(usernames, decisions)
    users = {u.username: u for u in get_user_model().objects.filter(username__in=usernames)}
    barrier = threading.Barrier(len(usernames))
    attempts: list[Attempt] = []
    attempts_lock = threading.Lock()

    def reviewer(index: int, username: str) -> None:
        try:
            for item in items:
                barrier.wait(timeout=BARRIER_TIMEOUT)
                result = attempt_run(
                    decide, item=item, user=users[username], decision=chosen[index], delay=delay, at_deadline=at_deadline
                )
                with attempts_lock:
                    attempts.append(result)
                    if on_attempt is not None:
                        on_attempt(result)
        finally:
            connection.close()

    start = time.perf_counter()
    threads = [threading.Thread(target=reviewer, args=(i, name)) for i, name in enumerate(usernames)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return race_judge(attempts=attempts, items=items, seconds=time.perf_counter() - start)


def race_processes(
    *,
    strategy: str,
    items: Sequence[str],
    usernames: Sequence[str],
    delay: float,
    on_attempt: Callable[[Attempt], None] | None = None,
    extra_env: dict[str, str] | None = None,
    decisions: Sequence[str] | None = None,
) -> RaceReport:
    """One race in fresh reviewer processes (see ``reviewer_processes`` to race many times)."""
    with reviewer_processes(size=len(usernames), extra_env=extra_env) as pool:
        return pool.race(
            strategy=strategy, items=items, usernames=usernames, delay=delay, on_attempt=on_attempt, decisions=decisions
        )


# Every reviewer process sets Django up. Spawned, each imported Django, LangGraph, LangChain
# and daphne from scratch: 1.6 s of CPU a process, and a lab run or the test suite starts
# dozens. The fork server imports them once and forks each reviewer from it: 0.3 s each, and
# four reviewers ready in 0.6 s instead of 4.1. Imports only, none that reads settings or
# opens a connection (the fork server would carry it into every child), nor daphne.server, whose
# event loop (an epoll descriptor, made on import) every child would share (e2e/forked.py).
_REVIEWER_PRELOAD = [
    "django.db.models",
    "django.test",
    "twisted.internet.asyncioreactor",
    "langgraph.graph",
    "langgraph.types",
    "langgraph.checkpoint.sqlite",
    "langchain_core.messages",
    "langchain.agents",
    "psycopg",
    "psycopg_pool",
]


class ReviewerProcesses:
    """``size`` reviewer processes sharing only the database and the checkpointer.

    Setting up Django still costs a third of a second per process, so one set of processes
    serves every race of a lab run. A race that loses a process shuts the set down;
    later races then report every attempt as an error instead of hanging.
    """

    def __init__(self, *, size: int, extra_env: dict[str, str] | None = None) -> None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(_REVIEWER_PRELOAD)
        self.size = size
        self._barrier = ctx.Barrier(size)
        self._results = ctx.Queue()
        self._inboxes = [ctx.Queue() for _ in range(size)]
        # This process's environment as it is now, as a spawned child would have had it (the
        # fork server's is the one it started with); reviewer_main makes it the child's whole.
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "reviewqueue.settings"),
            "DATABASE_URL": database_url_current(),
            **(extra_env or {}),
        }
        # Children must not inherit open connections; they open their own.
        connections.close_all()
        self._procs = [
            ctx.Process(target=reviewer_main, args=(env, inbox, self._barrier, self._results)) for inbox in self._inboxes
        ]
        for p in self._procs:
            p.start()

    def race(
        self,
        *,
        strategy: str,
        items: Sequence[str],
        usernames: Sequence[str],
        delay: float,
        on_attempt: Callable[[Attempt], None] | None = None,
        decisions: Sequence[str] | None = None,
        at_deadline: bool = False,
    ) -> RaceReport:
        if len(usernames) != self.size:
            raise ValueError(f"{len(usernames)} reviewers for {self.size} processes")
        chosen = decisions_for(usernames, decisions)
        start = time.perf_counter()
        attempts: list[Attempt] = []
        expected = len(items) * self.size
        if all(p.is_alive() for p in self._procs):
            self._barrier.reset()
            for inbox, name, decision in zip(self._inboxes, usernames, chosen, strict=False):
                inbox.put((strategy, list(items), name, decision, delay, at_deadline))
            deadline = time.monotonic() + BARRIER_TIMEOUT + 30 * len(items)
            while len(attempts) < expected and time.monotonic() < deadline:
                try:
                    result = self._results.get(timeout=1)
                except queue.Empty:
                    if not all(p.is_alive() for p in self._procs) and self._results.empty():
                        break
                    continue
                attempts.append(result)
                if on_attempt is not None:
                    on_attempt(result)
        seconds = time.perf_counter() - start
        if len(attempts) < expected:
            self.close()
            attempts.extend(
                Attempt(
                    item="?",
                    reviewer="?",
                    decision="?",
                    won=None,
                    told_winner=None,
                    error="worker process died before reporting",
                    latency_ms=0.0,
                )
                for _ in range(expected - len(attempts))
            )
        return race_judge(attempts=attempts, items=items, seconds=seconds)

    def close(self) -> None:
        for inbox, p in zip(self._inboxes, self._procs, strict=False):
            if p.is_alive():
                inbox.put(None)
        for p in self._procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()


@contextmanager
def reviewer_processes(*, size: int, extra_env: dict[str, str] | None = None) -> Iterator[ReviewerProcesses]:
    pool = ReviewerProcesses(size=size, extra_env=extra_env)
    try:
        yield pool
    finally:
        pool.close()


def database_url_current() -> str:
    """A DATABASE_URL naming the database this process uses now (the test one in tests)."""
    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    auth = db.get("USER") or ""
    if db.get("PASSWORD"):
        auth += f":{db['PASSWORD']}"
    return f"postgres://{auth}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"


def race_judge(*, attempts: Sequence[Attempt], items: Sequence[str], seconds: float) -> RaceReport:
    """Judge a race with the history checker: the attempts are the history, the rows
    and checkpoint histories the final read."""
    history_wait_applied(items=items)
    final = history_final_read(items=items)
    ops = [_op_from(attempt) for attempt in attempts if attempt.judged]
    anomalies = history_check(ops=ops, final=final)
    rows = QueueItem.objects.filter(public_id__in=items).values_list("public_id", "graph", "thread_id")
    threads = {pid: (graph, thread) for pid, graph, thread in rows}
    verdicts = []
    for item_id in items:
        state = final[item_id]
        mine = [a for a in attempts if a.item == item_id]
        acknowledged = [a.reviewer for a in mine if a.won]
        verdicts.append(
            ItemVerdict(
                item=item_id,
                winner=state.winner,
                acknowledged=acknowledged,
                resumes=state.resumes,
                still_paused=bool(graph_asks_pending(name=threads[UUID(item_id)][0], thread_id=threads[UUID(item_id)][1])),
                lost=[a.detail for a in anomalies if a.item == item_id and a.kind == "lost_decision"],
                misinformed=[a.detail for a in anomalies if a.item == item_id and a.kind == "misinformed_loser"],
                double_resolution=any(a.item == item_id and a.kind == "multiple_winners" for a in anomalies),
                votes_lost=_votes_lost(item=item_id, state=state, anomalies=anomalies),
            )
        )
    return RaceReport(attempts=list(attempts), verdicts=verdicts, seconds=seconds, anomalies=anomalies)


def _votes_lost(*, item: str, state: FinalItem, anomalies: Sequence[Anomaly]) -> int:
    """Acknowledged votes missing from the final votes (one ``vote_lost`` each), plus, when
    the resolved tally is short of the final votes (``tally_incomplete``), the votes it misses."""
    mine = [a for a in anomalies if a.item == item]
    lost = sum(1 for a in mine if a.kind == "vote_lost")
    if state.tally is not None and any(a.kind == "tally_incomplete" for a in mine):
        lost += len(set((state.votes or {}).items()) - set(state.tally.items()))
    return lost


def _op_from(attempt: Attempt) -> Op:
    op = Op(
        reviewer=attempt.reviewer,
        item=attempt.item,
        decision=attempt.decision,
        invoked_at=attempt.started_at,
        completed_at=attempt.started_at + attempt.latency_ms / 1000,
    )
    if attempt.won is None:
        op.completion, op.error = "unknown", attempt.error
    else:
        op.completion, op.told_winner = ("ok" if attempt.won or attempt.counted else "fail"), attempt.told_winner
        op.voted = attempt.counted and not attempt.won
    return op
