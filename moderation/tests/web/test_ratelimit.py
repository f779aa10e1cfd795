"""The decision rate limit, including while its shared cache (Redis) cannot be reached."""

import pytest
from django.urls import reverse

from e2e.server import free_port
from moderation.items.models import ItemStatus, QueueItem
from moderation.web import ratelimit


@pytest.fixture
def unreachable_cache(settings, monkeypatch):
    """A Redis cache on a port nothing listens on: every call fails with a connection error."""
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
    monkeypatch.setattr(ratelimit, "_local_windows", {})
    monkeypatch.setattr(ratelimit, "_cache_down_until", 0.0)


@pytest.mark.django_db
def test_with_the_cache_down_decisions_work_and_each_process_still_limits(
    client, alice, make_item, settings, unreachable_cache, caplog
):
    settings.DECISION_RATE_LIMIT = 3
    settings.DECISION_RATE_WINDOW = 60
    items = [make_item() for _ in range(4)]
    client.force_login(alice)
    statuses = [
        client.post(
            reverse("moderation:api-decide", args=[item.public_id]), data={"decision": "approve"}, content_type="application/json"
        ).status_code
        for item in items
    ]
    assert statuses == [200, 200, 200, 429]
    assert QueueItem.objects.get(pk=items[3].pk).status == ItemStatus.PENDING
    assert "counted in this process only for 10 s: the cache is unreachable" in caplog.text


def test_the_fallback_counts_per_reviewer_and_per_window(settings, unreachable_cache, monkeypatch):
    settings.DECISION_RATE_LIMIT = 2
    settings.DECISION_RATE_WINDOW = 10
    now = [1_000_000.0]
    monkeypatch.setattr(ratelimit.time, "time", lambda: now[0])
    assert [ratelimit.reviewer_rate_check(user_id=1) for _ in range(3)] == [None, None, 10]
    assert ratelimit.reviewer_rate_check(user_id=2) is None  # another reviewer has a window of their own
    now[0] += 10  # the next window starts afresh
    assert ratelimit.reviewer_rate_check(user_id=1) is None


def test_a_failed_cache_is_left_alone_for_a_while_so_a_hanging_one_costs_one_timeout(settings, monkeypatch):
    calls = []

    class HangingCache:
        def add(self, *args, **kwargs):
            calls.append("add")
            raise TimeoutError("Timeout reading from socket")

    settings.DECISION_RATE_LIMIT = 5
    monkeypatch.setattr(ratelimit, "cache", HangingCache())
    monkeypatch.setattr(ratelimit, "_local_windows", {})
    monkeypatch.setattr(ratelimit, "_cache_down_until", 0.0)
    clock = [100.0]
    monkeypatch.setattr(ratelimit.time, "monotonic", lambda: clock[0])
    for _ in range(4):
        assert ratelimit.reviewer_rate_check(user_id=7) is None
    assert calls == ["add"]  # one timeout, then this process counts on its own
    clock[0] += ratelimit.CACHE_RETRY_SECONDS
    ratelimit.reviewer_rate_check(user_id=7)
    assert calls == ["add", "add"]  # tried again after the interval
