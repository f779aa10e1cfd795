"""How many long-poll waits (``GET /api/v1/items/<id>/decision?wait=``) a server process holds, and whose.

A sleeping wait holds no database connection (``moderation.api.longpoll`` gives it back
before sleeping), but it still holds a request, its thread and a channel. So one API
client may hold ``LONGPOLL_WAITS_PER_CLIENT`` waits at once and the process
``LONGPOLL_WAITS_PER_PROCESS``; past either, a wait is refused at once (429 for the
client's own cap, 503 for the process's), with ``Retry-After``, instead of queueing.

Counted per process, in memory: what a cap protects is this process's threads and
memory, and a process that dies takes its waits with it. Used on the server's event loop
only, so a check and its count happen with no other wait in between.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings

from moderation.records.metrics import metrics_open_track

# What a refused wait is told to wait before trying again (seconds): a wait ends within its
# own ``wait`` (at most 60 s), usually much sooner when its item is decided.
WAIT_RETRY_AFTER_SECONDS = 5

# API client id -> its waits open in this process.
_OPEN: Counter[int] = Counter()


class WaitRefused(Exception):
    """A cap is reached: ``status`` 429 (this client's) or 503 (this process's), ``code`` for the body."""

    def __init__(self, *, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.retry_after = WAIT_RETRY_AFTER_SECONDS


@contextmanager
def wait_slot_hold(*, client_id: int) -> Iterator[None]:
    """Count one wait of the client for as long as the block runs; WaitRefused past a cap (0 = no cap)."""
    per_client, per_process = settings.LONGPOLL_WAITS_PER_CLIENT, settings.LONGPOLL_WAITS_PER_PROCESS
    if per_client and _OPEN[client_id] >= per_client:
        raise WaitRefused(
            status=429,
            code="too_many_waits",
            message=f"this client already has {per_client} waits open (LONGPOLL_WAITS_PER_CLIENT); retry once one has ended",
        )
    if per_process and sum(_OPEN.values()) >= per_process:
        raise WaitRefused(
            status=503,
            code="busy",
            message=f"this server already holds {per_process} waits (LONGPOLL_WAITS_PER_PROCESS); retry later",
        )
    _OPEN[client_id] += 1
    try:
        with metrics_open_track(kind="long_poll"):
            yield
    finally:
        _OPEN[client_id] -= 1
        if not _OPEN[client_id]:
            del _OPEN[client_id]


def waits_stats() -> dict[str, int]:
    """This process's open waits and the clients holding them (for /healthz)."""
    return {"waits": sum(_OPEN.values()), "clients": len(_OPEN)}
