"""item_decision_wait: woken by the item's group, never by polling the database; and against a real
server, waits beyond the database pool (holding no connection while they sleep) and the caps on waits."""

from __future__ import annotations

import asyncio
import http.client
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from channels.layers import get_channel_layer

from e2e.server import LiveServer
from moderation.api import longpoll
from moderation.records import events
from moderation.tests.api.test_api_server import ApiHttp
from moderation.tests.cluster_support import channel_prefix, cluster_env, fresh_database, services_require
from moderation.tests.real_server import Reviewer, progress_wait

ITEM_ID = str(uuid.uuid4())


@pytest.fixture
def item_reads(monkeypatch, settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "reviewqueue.channel_layers.InMemoryChannelLayer"}}
    state = {"status": "pending", "reads": 0}

    def read(*, client_id: int, public_id: str):
        state["reads"] += 1
        return SimpleNamespace(status=state["status"], public_id=public_id)

    monkeypatch.setattr(longpoll, "client_item_get", read)
    return state


@pytest.mark.asyncio
async def test_an_idle_wait_reads_the_row_twice_and_no_more(item_reads):
    wait = 1.0
    started = time.monotonic()
    item = await longpoll.item_decision_wait(client_id=1, public_id=ITEM_ID, timeout=wait)
    # At its timeout: not before, and not a second timeout later.
    assert item.status == "pending" and 0.9 * wait <= time.monotonic() - started < 2 * wait
    # Once before joining the group, once after: a sleep loop would read again and again.
    assert item_reads["reads"] == 2


@pytest.mark.asyncio
async def test_the_decided_event_ends_the_wait_at_once(item_reads):
    layer = get_channel_layer()

    async def decide_later() -> None:
        await asyncio.sleep(0.2)
        item_reads["status"] = "approved"
        await layer.group_send(events.item_group(ITEM_ID), {"type": "item.decided"})

    started = time.monotonic()
    decider = asyncio.create_task(decide_later())
    item = await longpoll.item_decision_wait(client_id=1, public_id=ITEM_ID, timeout=30)
    await decider
    assert item.status == "approved" and time.monotonic() - started < 30 / 2  # woken, not timed out
    assert item_reads["reads"] == 3
    assert not layer.groups.get(events.item_group(ITEM_ID)), "the wait left the group"


@pytest.mark.asyncio
async def test_a_decision_before_the_join_is_seen_by_the_second_read(item_reads, monkeypatch):
    layer = get_channel_layer()
    group_add = layer.group_add

    async def decided_meanwhile(group, channel):
        item_reads["status"] = "rejected"  # committed after the first read, before the join
        await group_add(group, channel)

    monkeypatch.setattr(layer, "group_add", decided_meanwhile)
    started = time.monotonic()
    item = await longpoll.item_decision_wait(client_id=1, public_id=ITEM_ID, timeout=30)
    assert item.status == "rejected" and time.monotonic() - started < 30 / 2  # seen, not timed out


# --- against a real server: waits beyond the connection pool, and the caps ----------------------------

POOL = 3  # DB_POOL_SIZE: fewer connections than waits
PER_CLIENT = 8  # LONGPOLL_WAITS_PER_CLIENT: client A's waits, all held at once
PER_PROCESS = 10  # LONGPOLL_WAITS_PER_PROCESS: A's 8 and B's 2
SUBMIT = {"title": "Waited on", "body": "Some harmless text.", "source": "longpoll"}


def _healthz_longpoll(server, staff) -> dict:
    status, body = _get(server, "/healthz", staff.cookie)
    assert status == 200, body
    return json.loads(body)["longpoll"]


def _get(server, path: str, cookie: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
    try:
        conn.request("GET", path, headers={"Cookie": cookie})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _refusal(server, token: str, item: str) -> tuple[int, str, str | None]:
    """(status, error code, Retry-After) of a wait expected to be refused at once."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
    try:
        conn.request("GET", f"/api/v1/items/{item}/decision?wait=60", headers={"Authorization": f"Bearer {token}"})
        response = conn.getresponse()
        return response.status, json.loads(response.read()).get("error"), response.getheader("Retry-After")
    finally:
        conn.close()


def _waits_open(server, staff, count: int) -> None:
    """Progress, not a clock: the server reports ``count`` waits open (each joined and sleeping)."""
    opened = progress_wait(lambda: _healthz_longpoll(server, staff)["waits"], done=lambda n: n == count, stall=60)
    assert opened == count, f"{opened} of {count} waits open, and no more for 60 s"


def _waits_beyond_the_pool(tmp_path, *, extra_env: dict[str, str], database_url: str | None = None) -> None:
    env = {
        **extra_env,
        "DB_POOL_SIZE": str(POOL),
        "LONGPOLL_WAITS_PER_CLIENT": str(PER_CLIENT),
        "LONGPOLL_WAITS_PER_PROCESS": str(PER_PROCESS),
    }
    server = LiveServer(tmp_path, database_url=database_url, extra_env=env)
    seeded = server.seed(users=["alice"], staff=["alice"])
    tokens = [server.manage("apiclient_create", name).strip() for name in ("client-a", "client-b")]
    server.start()
    try:
        alice = Reviewer(server, "alice", seeded.sessions["alice"])
        items = []
        for token in tokens:
            status, body = ApiHttp(server, token).call("POST", "/items", SUBMIT)
            assert status == 201, body
            items.append(body["id"])

        def wait(token: str, item: str) -> tuple[int, dict]:
            return ApiHttp(server, token, timeout=120).call("GET", f"/items/{item}/decision?wait=60")

        with ThreadPoolExecutor(PER_PROCESS) as pool:
            waits = [pool.submit(wait, tokens[0], items[0]) for _ in range(PER_CLIENT)]
            _waits_open(server, alice, PER_CLIENT)
            assert _refusal(server, tokens[0], items[0]) == (429, "too_many_waits", "5")
            waits += [pool.submit(wait, tokens[1], items[1]) for _ in range(PER_PROCESS - PER_CLIENT)]
            _waits_open(server, alice, PER_PROCESS)
            assert _refusal(server, tokens[1], items[1]) == (503, "busy", "5")

            # More waits than connections, all asleep: a moderator's queue page still answers.
            status, page = _get(server, "/", alice.cookie)
            assert status == 200 and b"Waited on" in page, status

            for item in items:
                assert alice.decide(item, "approve")[0] == 200
            answers = [w.result() for w in waits]
        assert [status for status, _ in answers] == [200] * PER_PROCESS, answers
        assert {body["decision"]["by"] for _, body in answers} == {"alice"}
        assert _healthz_longpoll(server, alice) == {"waits": 0, "clients": 0}
        assert "Internal Server Error" not in server.log_path.read_text(errors="replace"), server.log_tail(80)
    finally:
        server.close()


@pytest.mark.timeout(300)
def test_waits_beyond_the_pool_leave_pages_answering_and_the_caps_refuse_the_rest_sqlite(tmp_path):
    _waits_beyond_the_pool(tmp_path, extra_env={})


@pytest.mark.timeout(300)
@pytest.mark.cluster
def test_waits_beyond_the_pool_leave_pages_answering_and_the_caps_refuse_the_rest_postgres(tmp_path):
    admin_url, redis_url = services_require()
    env = cluster_env(redis_url=redis_url, prefix=channel_prefix("longpoll"))
    with fresh_database(admin_url, "longpoll") as database_url:
        _waits_beyond_the_pool(tmp_path, extra_env=env, database_url=database_url)
