"""How long a failed try waits before the next: the one backoff for webhook deliveries and applies."""

from __future__ import annotations

import random


def retry_delay(*, tries: int, base: float, most: float) -> float:
    """Seconds before the next try after ``tries`` failed ones: exponential with jitter, between half and
    all of ``base``·2^(tries-1), that ceiling capped at ``most`` (jitter keeps retries of one outage apart)."""
    ceiling: float = min(most, base * 2 ** max(0, tries - 1))  # an int power: no float overflow at any try
    return ceiling / 2 + random.uniform(0, ceiling / 2)
