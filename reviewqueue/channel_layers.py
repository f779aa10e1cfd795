"""The embedded channel layer: channels' in-memory layer, made to cost O(1) per message.

Channels' layer walks every channel's queue and every group's members to drop expired
entries on each ``receive`` and each ``group_send``: with N open pages that is O(N) work
per socket per event, O(N²) per decision seen by all of them (100 queue pages at 10
decisions a second: ~400,000 membership checks a second on the one event loop). Expiry
here is a backstop for consumers that vanished without leaving (messages live 60 s,
memberships a day), so sweeping once a second loses nothing.
"""

from __future__ import annotations

import time

from channels.layers import InMemoryChannelLayer as ChannelsInMemoryChannelLayer

SWEEP_INTERVAL_SECONDS = 1.0


class InMemoryChannelLayer(ChannelsInMemoryChannelLayer):
    _swept_at = float("-inf")

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now - self._swept_at < SWEEP_INTERVAL_SECONDS:
            return
        self._swept_at = now
        super()._clean_expired()
