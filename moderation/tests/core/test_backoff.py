"""moderation.core.backoff: the retry delay doubles, with jitter, up to its cap."""

from moderation.core.backoff import retry_delay


def test_backoff_doubles_with_jitter_and_is_capped():
    for tries, ceiling in [(1, 10), (2, 20), (3, 40), (5, 100), (30, 100)]:
        delays = {retry_delay(tries=tries, base=10, most=100) for _ in range(50)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays) and len(delays) > 1
