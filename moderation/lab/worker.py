"""The body of one reviewer process in a cross-process race.

Kept free of Django imports at module level: a child process unpickles its target
before Django is set up, so nothing here may touch models until ``django.setup()``.
"""

from __future__ import annotations

import os
import threading
import traceback

BARRIER_TIMEOUT = 120.0


def reviewer_main(env, inbox, barrier, results) -> None:
    """One reviewer process: set Django up once, then race every job it is sent.

    A job is (strategy, items, username, decision, delay, at_deadline); ``None`` ends the process.
    """
    # The whole environment of the parent at start: the fork server's own may be older.
    os.environ.clear()
    os.environ.update(env)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connections

    from moderation.lab.attempts import Attempt, attempt_run
    from moderation.lab.strategies import STRATEGIES

    for strategy, items, username, decision, delay, at_deadline in iter(inbox.get, None):
        decide = STRATEGIES[strategy]
        user = get_user_model().objects.get(username=username)
        for item in items:
            try:
                barrier.wait(timeout=BARRIER_TIMEOUT)
            except threading.BrokenBarrierError:
                results.put(
                    Attempt(
                        item=item,
                        reviewer=username,
                        decision=decision,
                        won=None,
                        told_winner=None,
                        error="barrier broken: " + traceback.format_exc(limit=1),
                        latency_ms=0.0,
                    )
                )
                continue
            results.put(attempt_run(decide, item=item, user=user, decision=decision, delay=delay, at_deadline=at_deadline))
        # Idle between jobs without holding a database connection.
        connections.close_all()
