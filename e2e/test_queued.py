"""Queued starts in the browser (moderation.review.starts): a batch accepted through the API
reaches open queues once a real worker has started it, and an item still starting says so
and offers nothing to decide."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import expect

from e2e.conftest import e2e_server_running
from e2e.pages import item_path, item_ready, live_wait, race

pytestmark = pytest.mark.asyncio(loop_scope="module")

HOLD = 2.0  # seconds the worker holds each start between its graph's run and the row's record
WORKER = "e2e-starts"
# Two held starts, then the worker's event reaches this server through the relay (another
# process: the in-memory layer cannot carry it; moderation.records.relay), and some slack.
ARRIVAL_MS = int((2 * HOLD + 8) * 1000)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(e2e_template, tmp_path_factory):
    # The worker starts the graphs, as in production (the suite's default starts them in the server).
    env = {"REVIEWQUEUE_APPLY_INLINE": ""}
    async with e2e_server_running(e2e_template, tmp_path_factory.mktemp("e2e-queued"), env=env) as live:
        live.worker_start(worker_id=WORKER, faults=f"after_start_run:sleep={HOLD}")
        await asyncio.to_thread(live.worker_wait_ready, WORKER)
        yield live


async def test_a_queued_batch_enters_open_queues_once_started_and_is_not_decidable_before(server, crowd):
    token = (await asyncio.to_thread(server.manage, "apiclient_create", "e2e-pipeline")).strip()
    alice = await crowd.login("alice")
    await live_wait(alice)

    async with httpx.AsyncClient(base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {token}"}) as api:
        answer = await api.post(
            "/items:batch",
            json={
                "start": "queued",
                "items": [{"title": f"Queued {name}", "body": "Some harmless text.", "source": "e2e-pipeline"} for name in "AB"],
            },
        )
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert [(r["outcome"], r["item"]["status"]) for r in results] == [("accepted", "starting")] * 2
    first, second = (r["item"]["id"] for r in results)

    # The second waits behind the first's held start: its page says so, with nothing to decide.
    waiting = await crowd.page("alice", item_path(second))
    await expect(waiting.locator("#starting")).to_contain_text("starting this item's graph")
    await expect(waiting.locator('input[name="ask"]')).to_have_count(0)

    for title in ("Queued A", "Queued B"):
        await expect(alice.get_by_role("link", name=title)).to_be_visible(timeout=ARRIVAL_MS)
    await waiting.goto(item_path(second))
    await expect(waiting.locator("#starting")).to_have_count(0)
    await alice.goto(item_path(first))
    await item_ready(alice)
    [sub] = await race([(alice, "alice", "approve")])
    assert sub.won, sub
    rows = await server.arows([first, second])
    assert (rows[first].status, rows[first].winner, rows[second].status) == ("approved", "alice", "pending")
