"""Issue 27.12: on the embedded default (SQLite, in-memory channel layer) what the task
worker does reaches the item pages open on this server, as it does through Redis.

The worker is another process (``manage.py db_worker``, as ``make run`` starts it), so its
events cannot cross the in-memory layer; the server relays them from the database
(``moderation.records.relay``). A page that was not listening yet when the outcome came
learns it from the state its socket reads on connect.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio
from playwright.async_api import Route, expect

from e2e.conftest import e2e_server_running
from e2e.pages import item_path, item_ready, page_mark, page_same, race
from e2e.server import LiveServer

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Generous: the worker's graph run on a loaded machine. Nothing but the worker's outcome
# can bring "Done" to these pages: they were rendered before it.
APPLIED_MS = 30_000
DONE = "Done: the decision was carried out"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(e2e_template, tmp_path_factory):
    # As `make run`: no REDIS_URL, decisions applied by a separate worker process.
    env = {"REVIEWQUEUE_APPLY_INLINE": ""}
    async with e2e_server_running(e2e_template, tmp_path_factory.mktemp("e2e-live-worker"), env=env) as live:
        yield live


async def worker_running(server: LiveServer) -> None:
    if not any(worker.poll() is None for worker in server.workers):
        worker_id = f"e2e-live-worker-{len(server.workers)}"
        server.worker_start(worker_id=worker_id)
        await asyncio.to_thread(server.worker_wait_ready, worker_id)


def workers_kill(server: LiveServer) -> None:
    for worker in server.workers:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


async def applied_wait(server: LiveServer, item_id: str, *, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while (await server.arows([item_id]))[item_id].apply_state != "":
        assert time.monotonic() < deadline, "the worker did not apply the decision"
        await asyncio.sleep(0.1)


async def test_an_open_item_page_shows_the_outcome_the_worker_applied(server, crowd):
    await worker_running(server)
    [item] = await server.items_create(1, "Applied by the worker")
    path = item_path(item["id"])
    bob = await crowd.login("bob", next_path=path)
    await item_ready(bob)
    token = await page_mark(bob)
    alice = await crowd.login("alice", next_path=path)
    await item_ready(alice, ["bob"])
    await item_ready(bob, ["alice"])

    [sub] = await race([(alice, "alice", "approve")])
    assert sub.won, sub

    # bob's page was open before the decision: only the worker's item.applied can bring this.
    done = bob.locator("#applied-result[data-state=finished]")
    await expect(done).to_contain_text(DONE, timeout=APPLIED_MS)
    assert await page_same(bob, token), "bob's page was reloaded; the outcome must arrive live"
    await expect(alice.locator("#applied-result[data-state=finished]")).to_contain_text(DONE, timeout=APPLIED_MS)


async def test_a_page_rendered_while_applying_learns_the_outcome_it_missed(server, crowd):
    workers_kill(server)  # nothing applies the decision until this test says so
    [item] = await server.items_create(1, "Applied before the page listened")
    alice = await crowd.login("alice", next_path=item_path(item["id"]))
    await item_ready(alice)
    # The answer page's socket opens only once the outcome is recorded: it misses item.applied.
    released = asyncio.Event()

    async def held(route: Route) -> None:
        await released.wait()
        await route.continue_()

    await alice.route("**/static/moderation/live.js", held)
    [sub] = await race([(alice, "alice", "approve")])
    assert sub.won, sub
    await expect(alice.locator("#applying")).to_contain_text("applying…")
    token = await page_mark(alice)

    await worker_running(server)
    await applied_wait(server, item["id"])
    released.set()
    await expect(alice.locator("#applied-result[data-state=finished]")).to_contain_text(DONE, timeout=APPLIED_MS)
    await expect(alice.locator("#applying")).to_have_count(0)
    assert await page_same(alice, token), "alice's page was reloaded; the outcome must arrive live"
