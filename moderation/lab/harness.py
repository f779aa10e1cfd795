"""Release N reviewers onto the same item at the same instant, many times, and judge.

Two modes: ``threads`` (one process, one thread per reviewer) and ``processes`` (one
spawned OS process per reviewer, sharing only the database and the checkpointer).
Each worker walks the same item list; a barrier releases all of them onto each item
together. Judging reads the final rows and the graphs' checkpoint history.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection, connections

from moderation.graph import graph_pending_review, graph_resume_count
from moderation.lab.strategies import STRATEGIES
from moderation.lab.worker import BARRIER_TIMEOUT, Attempt, process_main
from moderation.models import QueueItem

@dataclass
class ItemVerdict:
    item: str
    winner: str | None
    acknowledged: list[str]
    resumes: int
    still_paused: bool
    lost: list[str] = field(default_factory=list)
    misinformed: list[str] = field(default_factory=list)


@dataclass
class RaceReport:
    attempts: list[Attempt]
    verdicts: list[ItemVerdict]
    seconds: float

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
    def misinformed_losers(self) -> int:
        return sum(len(v.misinformed) for v in self.verdicts)

    @property
    def errors(self) -> list[str]:
        return [a.error for a in self.attempts if a.error]


def decision_for(index: int) -> str:
    return "approve" if index % 2 == 0 else "reject"


def attempt_run(strategy: Callable[..., Any], *, item: str, user, decision: str, delay: float) -> Attempt:
    start = time.perf_counter()
    try:
        outcome = strategy(item_public_id=item, reviewer=user, decision=decision, delay=delay)
        won, told, error = outcome.won, outcome.winner, None
    except Exception as exc:  # the harness counts every failure instead of stopping
        won, told, error = None, None, f"{type(exc).__name__}: {exc}"
    return Attempt(
        item=item, reviewer=user.get_username(), decision=decision, won=won, told_winner=told, error=error,
        latency_ms=(time.perf_counter() - start) * 1000,
    )


def race_threads(*, strategy: str, items: Sequence[str], usernames: Sequence[str], delay: float) -> RaceReport:
    decide = STRATEGIES[strategy]
    users = {u.username: u for u in get_user_model().objects.filter(username__in=usernames)}
    barrier = threading.Barrier(len(usernames))
    attempts: list[Attempt] = []
    attempts_lock = threading.Lock()

    def reviewer(index: int, username: str) -> None:
        try:
            for item in items:
                barrier.wait(timeout=BARRIER_TIMEOUT)
                result = attempt_run(decide, item=item, user=users[username], decision=decision_for(index), delay=delay)
                with attempts_lock:
                    attempts.append(result)
        finally:
            connection.close()

    start = time.perf_counter()
    threads = [threading.Thread(target=reviewer, args=(i, name)) for i, name in enumerate(usernames)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return race_judge(attempts=attempts, items=items, seconds=time.perf_counter() - start)


def race_processes(*, strategy: str, items: Sequence[str], usernames: Sequence[str], delay: float) -> RaceReport:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(usernames))
    results = ctx.Queue()
    env = {"DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "reviewqueue.settings"),
           "DATABASE_URL": database_url_current()}
    # Children must not inherit open connections; they open their own.
    connections.close_all()
    procs = [
        ctx.Process(target=process_main, args=(env, strategy, list(items), name, decision_for(i), delay, barrier, results))
        for i, name in enumerate(usernames)
    ]
    start = time.perf_counter()
    for p in procs:
        p.start()
    attempts: list[Attempt] = []
    expected = len(items) * len(usernames)
    deadline = time.monotonic() + BARRIER_TIMEOUT + 30 * len(items)
    while len(attempts) < expected and time.monotonic() < deadline:
        try:
            attempts.append(results.get(timeout=1))
        except Exception:
            if not any(p.is_alive() for p in procs) and results.empty():
                break
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    seconds = time.perf_counter() - start
    if len(attempts) < expected:
        missing = expected - len(attempts)
        attempts.extend(
            Attempt(item="?", reviewer="?", decision="?", won=None, told_winner=None,
                    error="worker process died before reporting", latency_ms=0.0)
            for _ in range(missing)
        )
    return race_judge(attempts=attempts, items=items, seconds=seconds)


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
    final = {str(i.public_id): i for i in QueueItem.objects.filter(public_id__in=items).select_related("decided_by")}
    verdicts = []
    for item_id in items:
        row = final[item_id]
        winner = row.decided_by.get_username() if row.decided_by else None
        mine = [a for a in attempts if a.item == item_id]
        acknowledged = [a.reviewer for a in mine if a.won]
        verdicts.append(
            ItemVerdict(
                item=item_id,
                winner=winner,
                acknowledged=acknowledged,
                resumes=graph_resume_count(thread_id=row.thread_id),
                still_paused=graph_pending_review(thread_id=row.thread_id) is not None,
                lost=[r for r in acknowledged if r != winner],
                misinformed=[a.reviewer for a in mine if a.won is False and a.told_winner != winner],
            )
        )
    return RaceReport(attempts=list(attempts), verdicts=verdicts, seconds=seconds)
