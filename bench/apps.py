"""Stamp the winner's commit onto the live ``item.decided`` event (bench servers only).

``decisions`` registers ``events.decision_broadcast`` with ``transaction.on_commit``,
so it runs right after the winner's COMMIT. The wrapper records ``time.time()`` on
entry and ``_send_all`` copies it into the message as ``bench_committed_at``; watchers on
the same machine subtract it from their receipt time. Everything between (the counts
queries, the layer, Redis, the consumer) is in the measured latency.
"""

from __future__ import annotations

import threading
import time

from django.apps import AppConfig

_stamp = threading.local()


class BenchConfig(AppConfig):
    name = "bench"
    label = "bench"

    def ready(self) -> None:
        from moderation.records import events

        broadcast, send_all = events.decision_broadcast, events._send_all

        def decision_broadcast(*, outcome):
            _stamp.committed_at = time.time()
            try:
                return broadcast(outcome=outcome)
            finally:
                _stamp.committed_at = None

        def _send_all(sends):
            committed_at = getattr(_stamp, "committed_at", None)
            if committed_at is not None:
                sends = [
                    (group, {**message, "bench_committed_at": committed_at} if message.get("type") == "item.decided" else message)
                    for group, message in sends
                ]
            return send_all(sends)

        events.decision_broadcast = decision_broadcast
        events._send_all = _send_all
