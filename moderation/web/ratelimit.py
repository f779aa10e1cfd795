"""Per-reviewer limit on decision requests, so one client cannot flood the guard.

A fixed-window counter in Django's cache: the cache is Redis when REDIS_URL is set,
so every server process counts against the same window. If the cache cannot be
reached, each process counts on its own instead (and a warning is logged): a Redis
outage must not turn every decision into a server error, nor lift the limit. Across
N processes a reviewer then gets at most N times the limit. After a failure the cache
is left alone for ``CACHE_RETRY_SECONDS``, so a Redis that hangs (a black hole) costs
one timeout per process per interval, not one per decision.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.core.cache import cache

logger = logging.getLogger(__name__)

# user id -> (window start, requests counted in it), used only while the cache is down.
# One entry per reviewer: an entry is reset, not added, when its window ends.
_local_windows: dict[int, tuple[int, int]] = {}
_local_lock = threading.Lock()
CACHE_RETRY_SECONDS = 10.0
_cache_down_until = 0.0


def reviewer_rate_check(*, user_id: int) -> int | None:
    """Count one decision request; return seconds to wait if over the limit, else None."""
    limit = settings.DECISION_RATE_LIMIT
    if limit <= 0:
        return None
    window = settings.DECISION_RATE_WINDOW
    window_start = int(time.time()) // window * window
    key = f"decision-rate:{user_id}:{window_start}"
    global _cache_down_until
    if time.monotonic() < _cache_down_until:
        count = _count_local(user_id=user_id, window_start=window_start)
    else:
        try:
            count = _count(key, timeout=window + 1)
        except Exception as exc:  # the cache backend's own errors (redis.ConnectionError, timeouts)
            _cache_down_until = time.monotonic() + CACHE_RETRY_SECONDS
            logger.warning(
                "decision rate limit counted in this process only for %.0f s: the cache is unreachable (%s: %s)",
                CACHE_RETRY_SECONDS,
                type(exc).__name__,
                exc,
            )
            count = _count_local(user_id=user_id, window_start=window_start)
    if count > limit:
        return max(1, window_start + window - int(time.time()))
    return None


def _count(key: str, *, timeout: int) -> int:
    cache.add(key, 0, timeout=timeout)
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr: this request opens a new window
        cache.set(key, 1, timeout=timeout)
        return 1


def _count_local(*, user_id: int, window_start: int) -> int:
    with _local_lock:
        start, count = _local_windows.get(user_id, (window_start, 0))
        count = count + 1 if start == window_start else 1
        _local_windows[user_id] = (window_start, count)
        return count
