"""Per-reviewer limit on decision requests, so one client cannot flood the guard.

A fixed-window counter in Django's cache: the cache is Redis when REDIS_URL is set,
so every server process counts against the same window.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.core.cache import cache


def reviewer_rate_check(*, user_id: int) -> int | None:
    """Count one decision request; return seconds to wait if over the limit, else None."""
    limit = settings.DECISION_RATE_LIMIT
    if limit <= 0:
        return None
    window = settings.DECISION_RATE_WINDOW
    window_start = int(time.time()) // window * window
    key = f"decision-rate:{user_id}:{window_start}"
    cache.add(key, 0, timeout=window + 1)
    try:
        count = cache.incr(key)
    except ValueError:  # expired between add and incr: this request opens a new window
        cache.set(key, 1, timeout=window + 1)
        count = 1
    if count > limit:
        return max(1, window_start + window - int(time.time()))
    return None
