"""Webhooks end to end with real processes: daphne, `manage.py db_worker`, and a real receiver.

One server and one worker on a SQLite file, short retry settings, and the receiver of
moderation/tests/webhook_receiver.py (verifies every signature). Decisions go through
the server's HTTP API; the receiver must see each exactly once after de-duplication by
webhook-id, after its item's item.created, through failures, timeouts, downtime, a
worker killed mid-delivery and a server killed right after the commit, and at 10
decisions/s (how fast they arrive is measure 9 of ``make bench``). Then a hung receiver beside
a healthy one: the hung one's attempts must not hold up the healthy one's deliveries. Nothing
here is timed against a fixed figure: every wait gives up only once nothing arrived for a while.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from e2e.server import LiveServer
from moderation.tests.real_server import Dropped, Reviewer, progress_wait
from moderation.tests.webhook_receiver import Receiver

pytestmark = [pytest.mark.timeout(180)]

ITEMS = 60
WEBHOOK_ENV = {
    "WEBHOOK_TIMEOUT": "1",
    "WEBHOOK_RETRY_BASE": "0.2",
    "WEBHOOK_RETRY_MAX": "1",
    "WEBHOOK_SWEEP_INTERVAL": "0.3",
    "WEBHOOK_LEASE_GRACE": "0.3",
    "DECISION_RATE_LIMIT": "0",
}
_ENDPOINT = """
from moderation.delivery.models import WebhookEndpoint
e = WebhookEndpoint.objects.create(name={name!r}, url={url!r}, events={events!r})
print("SECRET " + e.secret)
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    receiver = Receiver().start()
    server = LiveServer(tmp_path_factory.mktemp("delivery"), db_name="delivery", extra_env=WEBHOOK_ENV)
    server.manage("migrate", "--no-input", "-v0")
    _subscribe(server, receiver, ["item.created", "item.decided", "item.cancelled"])
    seeded = server.seed(users=["alice", "bob"], items=ITEMS, prefix="Hook")
    server.start()
    site = SimpleNamespace(
        server=server,
        receiver=receiver,
        items=seeded.items,
        worker=server.worker_start(),
        alice=Reviewer(server, "alice", seeded.sessions["alice"]),
        bob=Reviewer(server, "bob", seeded.sessions["bob"]),
    )
    try:
        receiver.wait_for(ITEMS)  # every seeded item's item.created
        yield site
    finally:
        server.close()
        receiver.stop()
        print(f"\n--- worker log ---\n{server.log_tail(60, worker=True)}")


def _subscribe(server: LiveServer, receiver: Receiver, events: list[str], *, name: str = "receiver") -> None:
    """An endpoint for ``events`` pointing at the receiver, which learns its signing secret."""
    out = server.manage("shell", "-c", _ENDPOINT.format(name=name, url=receiver.url, events=events))
    receiver.secret = next(line for line in out.splitlines() if line.startswith("SECRET ")).removeprefix("SECRET ")


def _firsts(receiver: Receiver) -> list:
    """First arrival per webhook-id, in arrival order."""
    return sorted(receiver.unique().values(), key=lambda r: r.at)


def _decided_wait(receiver: Receiver, items: list[str], *, stall: float = 30) -> dict[str, object]:
    """Each item's first item.decided, once all arrived or none arrived for ``stall`` seconds."""

    def decided() -> dict[str, object]:
        return {r.data["id"]: r for r in _firsts(receiver) if r.type == "item.decided" and r.data["id"] in items}

    return progress_wait(decided, done=lambda found: len(found) == len(items), stall=stall, poll=0.02)


def _check_once_and_in_order(receiver: Receiver, items: list[str], winners: dict[str, str]) -> None:
    firsts = _firsts(receiver)
    for item in items:
        events = [r for r in firsts if r.data.get("id") == item]
        assert [(r.type, r.data["sequence"]) for r in events] == [("item.created", 1), ("item.decided", 2)], events
        assert events[1].data["decision"]["by"] == winners[item]
    assert receiver.bad_signatures == 0


def _delivery_rows(server: LiveServer, item: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{server.db_path}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute(
            "SELECT event, status, attempts FROM moderation_webhookdelivery WHERE item_public_id = ? ORDER BY sequence",
            [item.replace("-", "")],
        ).fetchall()
    finally:
        conn.close()


def _rows_settled(server: LiveServer, items: list[str]) -> dict[str, list[tuple]]:
    """Each item's delivery rows once none is pending (the receiver answers before the worker
    records it), or once they stopped changing for a while."""
    return progress_wait(
        lambda: {item: _delivery_rows(server, item) for item in items},
        done=lambda rows: all(row[1] != "pending" for found in rows.values() for row in found),
        stall=30,
        poll=0.05,
    )


def test_every_decision_arrives_once_in_order_through_failures_timeouts_and_downtime(site):
    receiver, items = site.receiver, site.items[:15]
    receiver.fail_next, receiver.stall_next, receiver.stall_seconds = 3, 1, 2.0  # 2 s > WEBHOOK_TIMEOUT
    requests_before = receiver.requests
    for n, item in enumerate(items[:10]):
        assert site.alice.decide(item, "approve" if n % 2 else "reject")[0] == 200
    receiver.wait_for(ITEMS + 10)
    receiver.stop()  # down for a while: decisions keep being made
    for item in items[10:]:
        assert site.alice.decide(item, "approve")[0] == 200
    time.sleep(1.5)
    receiver.start()  # back on the same port

    decided = _decided_wait(receiver, items)
    assert set(decided) == set(items)
    _check_once_and_in_order(receiver, items, {item: "alice" for item in items})
    # Failed, timed-out and refused attempts were retried under the same webhook-ids.
    assert receiver.requests - requests_before > len(items)
    rows = _rows_settled(site.server, items)
    assert all(row[1] == "delivered" for item in items for row in rows[item]), rows


def test_worker_killed_mid_delivery_is_retried_and_nothing_is_lost(site):
    receiver, item = site.receiver, site.items[20]
    receiver.stall_next, receiver.fail_next, receiver.stall_seconds = 1, 1, 3.0  # held, then refused
    requests_before = receiver.requests
    assert site.bob.decide(item, "approve")[0] == 200
    # The attempt is in flight at the receiver (held there).
    in_flight = progress_wait(lambda: receiver.requests, done=lambda n: n > requests_before, stall=60, poll=0.01)
    assert in_flight > requests_before, "the worker never sent the decision"
    site.worker.kill()
    site.worker.wait()
    assert _decided_wait(receiver, [item], stall=0.5) == {}
    site.worker = site.server.worker_start()

    assert list(_decided_wait(receiver, [item])) == [item]
    _check_once_and_in_order(receiver, [item], {item: "bob"})
    assert _rows_settled(site.server, [item])[item][1][1:] == ("delivered", 2)


def test_server_killed_right_after_the_commit_still_delivers_the_decision(site):
    server, item = site.server, site.items[21]
    server.stop()
    server.start(faults="after_commit:kill")
    try:
        with pytest.raises(Dropped):
            site.alice.decide(item, "reject")
        assert server.wait_dead() == -9
    finally:
        server.start()
    assert list(_decided_wait(site.receiver, [item])) == [item]
    _check_once_and_in_order(site.receiver, [item], {item: "alice"})


def test_decisions_at_10_per_second_each_arrive_once_in_order(site):
    receiver, items = site.receiver, site.items[30:60]

    def decide(item: str) -> None:
        assert site.alice.decide(item, "approve")[0] == 200

    threads = []
    for item in items:  # paced at 10/s whatever each decision takes
        threads.append(threading.Thread(target=decide, args=(item,)))
        threads[-1].start()
        time.sleep(0.1)
    for thread in threads:
        thread.join()
    assert set(_decided_wait(receiver, items)) == set(items)
    _check_once_and_in_order(receiver, items, {item: "alice" for item in items})


# --- The worker's delivery lane: a webhook never waits behind a slow graph ------------------

APPLY_HOLD = 3.0  # seconds every apply spends in the graph's apply node (a slow agent tool)


@pytest.fixture(scope="module")
def slow_applies(tmp_path_factory):
    """A server whose decisions are applied by a worker (not inline); the receiver hears decisions and applies."""
    receiver = Receiver().start()
    server = LiveServer(
        tmp_path_factory.mktemp("lane"), db_name="lane", extra_env={**WEBHOOK_ENV, "REVIEWQUEUE_APPLY_INLINE": ""}
    )
    server.manage("migrate", "--no-input", "-v0")
    _subscribe(server, receiver, ["item.decided", "item.applied"])
    seeded = server.seed(users=["alice"], items=4, prefix="Lane")
    server.start()
    try:
        yield SimpleNamespace(
            server=server, receiver=receiver, items=seeded.items, alice=Reviewer(server, "alice", seeded.sessions["alice"])
        )
    finally:
        server.close()
        receiver.stop()
        print(f"\n--- worker log ---\n{server.log_tail(40, worker=True)}")


def _applied_at(server: LiveServer, item: str) -> float:
    """When the worker recorded ``item``'s apply (its graph run, held APPLY_HOLD, over), as a Unix time."""
    conn = sqlite3.connect(f"file:{server.db_path}?mode=ro", uri=True, timeout=10)
    try:
        ((at,),) = conn.execute(
            "SELECT a.applied_at FROM moderation_reviewask a JOIN moderation_queueitem q ON q.id = a.item_id "
            "WHERE q.public_id = ?",
            [item.replace("-", "")],
        ).fetchall()
    finally:
        conn.close()
    return datetime.fromisoformat(at).replace(tzinfo=UTC).timestamp()


def _webhooks_behind_slow_applies(site, items: list[str], *, delivery_lane: bool) -> tuple[list[float], float]:
    """Decide ``items`` half a second apart while each apply is held APPLY_HOLD in the graph;
    when each item.decided webhook arrived, and when the first item's apply ended (Unix times)."""
    worker_id = f"lane-{'on' if delivery_lane else 'off'}"
    worker = site.server.worker_start(
        worker_id=worker_id, faults=f"in_apply_node:sleep={APPLY_HOLD}", delivery_lane=delivery_lane
    )
    try:
        site.server.worker_wait_ready(worker_id)
        for item in items:
            assert site.alice.decide(item, "approve")[0] == 200
            time.sleep(0.5)  # the first item's apply is under way when the next decision lands
        decided = _decided_wait(site.receiver, items)
        applied = progress_wait(
            lambda: {r.data["id"] for r in _firsts(site.receiver) if r.type == "item.applied"},
            done=lambda found: found >= set(items),
            stall=30,
            poll=0.05,
        )
        assert applied >= set(items), "an apply never finished"
    finally:
        worker.kill()
        worker.wait()
    return [decided[item].at for item in items], _applied_at(site.server, items[0])


def test_a_webhook_never_waits_behind_a_slow_apply(slow_applies):
    arrived, first_applied = _webhooks_behind_slow_applies(slow_applies, slow_applies.items[:2], delivery_lane=True)
    # Both decisions' webhooks arrived while the first apply was still held in the graph.
    assert max(arrived) < first_applied, [round(at - first_applied, 2) for at in arrived]


def test_control_without_the_lane_the_second_webhook_waits_for_the_first_apply(slow_applies):
    arrived, first_applied = _webhooks_behind_slow_applies(slow_applies, slow_applies.items[2:], delivery_lane=False)
    # The second decision's delivery is queued behind the first item's apply, which holds the worker.
    assert arrived[1] > first_applied, [round(at - first_applied, 2) for at in arrived]


# --- A hung receiver holds its own deliveries only ----------------------------------------

HUNG_ITEMS = 12
HUNG_TIMEOUT = 30  # WEBHOOK_TIMEOUT here: each attempt to the hung receiver lasts this long


@pytest.fixture(scope="module")
def hung_and_healthy(tmp_path_factory):
    """Two endpoints for item.created, one hung (holds every request past the timeout), and a
    burst of items already recorded when the worker starts."""
    hung, healthy = Receiver().start(), Receiver().start()
    hung.stall_next, hung.stall_seconds = 10**6, 2 * HUNG_TIMEOUT
    server = LiveServer(
        tmp_path_factory.mktemp("hung"), db_name="hung", extra_env={**WEBHOOK_ENV, "WEBHOOK_TIMEOUT": str(HUNG_TIMEOUT)}
    )
    server.manage("migrate", "--no-input", "-v0")
    _subscribe(server, hung, ["item.created"], name="hung")
    _subscribe(server, healthy, ["item.created"], name="healthy")
    server.seed(items=HUNG_ITEMS, prefix="Hung")
    try:
        yield SimpleNamespace(server=server, hung=hung, healthy=healthy)
    finally:
        hung.release.set()  # its attempts end, so the worker stops without waiting for them
        server.close()
        hung.stop()
        healthy.stop()
        print(f"\n--- worker log ---\n{server.log_tail(40, worker=True)}")


def _attempts_ended(server: LiveServer, endpoint: str) -> int:
    """Attempts to the endpoint that have ended (an attempt's row is written when it ends)."""
    conn = sqlite3.connect(f"file:{server.db_path}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute(
            """
            SELECT count(*) FROM moderation_deliveryattempt a
            JOIN moderation_webhookdelivery d ON d.id = a.delivery_id
            JOIN moderation_webhookendpoint e ON e.id = d.endpoint_id WHERE e.name = ?""",
            [endpoint],
        ).fetchone()[0]
    finally:
        conn.close()


@pytest.mark.timeout(360)  # its server's set-up, on a busy machine, and a hung attempt in the control
def test_a_hung_endpoint_does_not_delay_another_endpoints_deliveries(hung_and_healthy):
    """Which comes first: every delivery to the healthy receiver, or the end of an attempt to the hung one?"""
    site = hung_and_healthy
    site.server.worker_start()
    deadline = time.monotonic() + 2 * HUNG_TIMEOUT  # a safety net: the first hung attempt ends after HUNG_TIMEOUT
    while len(site.healthy.unique()) < HUNG_ITEMS and _attempts_ended(site.server, "hung") == 0:
        assert time.monotonic() < deadline, "neither receiver saw any progress"
        time.sleep(0.1)
    arrived, hung_ended = len(site.healthy.unique()), _attempts_ended(site.server, "hung")
    assert (arrived, hung_ended) == (HUNG_ITEMS, 0), (
        f"{arrived} of {HUNG_ITEMS} arrived before {hung_ended} hung attempt(s) ended"
    )
    assert 0 < site.hung.requests < HUNG_ITEMS  # it holds some lanes, never all of them
    assert site.healthy.bad_signatures == 0
