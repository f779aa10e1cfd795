"""The embedded default's live events of other processes: recorded in the database, passed on by the server."""

import queue
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from moderation.records import events, relay
from moderation.records.models import RelayedEvent
from moderation.records.relay import RELAY_KEEP_SECONDS, relay_follow, relay_last, relay_read, relay_record
from moderation.review.decisions import item_decide

pytestmark = pytest.mark.postgres_variant  # ids made visible in order: SQLite's single writer, PostgreSQL's table lock

# A bound on waiting for the follower's thread, never reached when it works.
PATIENCE_SECONDS = 30


@pytest.fixture
def worker_process(settings, monkeypatch):
    """This process as the task worker or a command is, without Redis: an in-memory layer, no server loop."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "reviewqueue.channel_layers.InMemoryChannelLayer"}}
    settings.LIVE_RELAY = True
    monkeypatch.setattr(events, "_server_loop", None)


@pytest.mark.django_db(transaction=True)
def test_a_process_without_sockets_records_its_events_for_the_server(worker_process, alice, make_item):
    item = make_item(title="Relayed")
    start = relay_last()
    # The suite applies decisions in the deciding process: the worker's item.applied is made here too.
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve").won

    _, recorded = relay_read(after=start)
    both = sorted(["queue", events.item_group(str(item.public_id))])
    assert [(sends[0][1]["type"], sorted(group for group, _ in sends)) for sends in recorded] == [
        ("item.decided", both),
        ("item.applied", both),
    ]
    applied = recorded[1][0][1]
    assert (applied["item"], applied["status"], applied["applied"]["state"]) == (str(item.public_id), "approved", "finished")


@pytest.mark.django_db(transaction=True)
def test_the_server_and_the_in_process_suite_record_nothing(settings, alice, make_item):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "reviewqueue.channel_layers.InMemoryChannelLayer"}}
    item = make_item()
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve").won
    assert not RelayedEvent.objects.exists()  # LIVE_RELAY is off here: the events went to this process's layer


@pytest.mark.django_db
def test_rows_past_the_keep_time_go_with_the_next_record():
    relay_record(sends=[("queue", {"type": "item.created"})])
    RelayedEvent.objects.update(made_at=timezone.now() - timedelta(seconds=RELAY_KEEP_SECONDS + 1))
    relay_record(sends=[("queue", {"type": "item.decided"})])
    assert list(RelayedEvent.objects.values_list("sends", flat=True)) == [[["queue", {"type": "item.decided"}]]]


def _follower_start(**kwargs) -> threading.Thread:
    """``relay_follow`` in a thread of its own, as the server runs it."""

    def follow() -> None:
        try:
            relay_follow(**kwargs)
        finally:
            connection.close()

    follower = threading.Thread(target=follow)
    follower.start()
    return follower


@pytest.mark.django_db(transaction=True)
def test_the_server_passes_on_what_is_recorded_while_its_pages_listen(monkeypatch):
    monkeypatch.setattr(relay, "RELAY_FOLLOW_SECONDS", 0.01)
    relay_record(sends=[("queue", {"type": "before the server followed"})])
    delivered: queue.Queue = queue.Queue()
    pages_open, stop = threading.Event(), threading.Event()
    looks = threading.Semaphore(0)  # one release per look the follower takes

    def listening() -> bool:
        looks.release()
        return pages_open.is_set()

    def looked_twice() -> None:
        # The second look began after the first ended: after anything recorded before this call.
        for _ in range(2):
            assert looks.acquire(timeout=PATIENCE_SECONDS)

    follower = _follower_start(deliver=delivered.put, listening=listening, stop=stop)
    try:
        looked_twice()
        relay_record(sends=[("queue", {"type": "while no page listened"})])
        while looks.acquire(blocking=False):  # looks taken before that record say nothing of it
            pass
        looked_twice()  # a look found no page, after the record: that event had nobody to reach
        pages_open.set()
        relay_record(sends=[("item.x", {"type": "item.applied"}), ("queue", {"type": "item.applied"})])
        assert delivered.get(timeout=PATIENCE_SECONDS) == [
            ("item.x", {"type": "item.applied"}),
            ("queue", {"type": "item.applied"}),
        ]
        relay_record(sends=[("queue", {"type": "item.created"})])
        assert delivered.get(timeout=PATIENCE_SECONDS) == [("queue", {"type": "item.created"})]
    finally:
        stop.set()
        follower.join(PATIENCE_SECONDS)
    assert delivered.empty()


@pytest.mark.django_db(transaction=True)
def test_an_event_made_while_a_slow_follower_had_not_yet_looked_is_not_skipped(monkeypatch):
    """A page opens, an event is made, and only then does the follower look (a busy machine):
    the event was made after the follower last saw nobody listening, so it is passed on."""
    monkeypatch.setattr(relay, "RELAY_FOLLOW_SECONDS", 0.01)
    delivered: queue.Queue = queue.Queue()
    stop, quiet_seen, go_on = threading.Event(), threading.Event(), threading.Event()
    calls = []

    def listening() -> bool:
        calls.append(1)
        if len(calls) == 1:
            quiet_seen.set()
            return False
        assert go_on.wait(PATIENCE_SECONDS)  # the follower is held here, as if descheduled
        return True

    follower = _follower_start(deliver=delivered.put, listening=listening, stop=stop)
    try:
        assert quiet_seen.wait(PATIENCE_SECONDS)
        time.sleep(0.3)  # longer than any look's interval: the old rule took "now - interval" as the start
        relay_record(sends=[("item.y", {"type": "item.applied"})])
        time.sleep(0.3)
        go_on.set()
        assert delivered.get(timeout=PATIENCE_SECONDS) == [("item.y", {"type": "item.applied"})]
    finally:
        stop.set()
        go_on.set()
        follower.join(PATIENCE_SECONDS)
