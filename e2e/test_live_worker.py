"""Issue 27.12: on the embedded default (SQLite, in-memory channel layer) what the task
worker does reaches the item pages open on this server, as it does through Redis.

The worker is another process (``manage.py db_worker``, as ``make run`` starts it), so its
events cannot cross the in-memory layer; the server relays them from the database
(``moderation.records.relay``). A page that was not listening yet when the outcome came
learns it from the state its socket reads on connect.
"""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from playwright.async_api import Route, expect

from e2e.conftest import e2e_server_running
from e2e.pages import item_path, item_ready, page_mark, page_same, race

pytestmark = pytest.mark.asyncio(loop_scope="module")

WORKER = "e2e-live-worker"
# Generous: a worker's start-up and graph run on a loaded machine.
APPLIED_MS = 60_000
DONE = "Done: the decision was carried out"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(e2e_template, tmp_path_factory):
    # As `make run`: no REDIS_URL, decisions applied by a separate worker process, which
    # the test starts once the decision is made, so the pages are rendered before the outcome.
    env = {"REVIEWQUEUE_APPLY_INLINE": ""}
    async with e2e_server_running(e2e_template, tmp_path_factory.mktemp("e2e-live-worker"), env=env) as live:
        yield live


async def test_open_item_pages_learn_the_outcome_the_worker_applied(server, crowd):
    [item] = await server.items_create(1, "Applied by the worker")
    path = item_path(item["id"])
    bob = await crowd.login("bob", next_path=path)
    await item_ready(bob)
    alice = await crowd.login("alice", next_path=path)
    await item_ready(alice, ["bob"])
    await item_ready(bob, ["alice"])
    # alice's answer page opens its socket only when the test says: after the worker's item.applied.
    released = asyncio.Event()

    async def held(route: Route) -> None:
        await released.wait()
        await route.continue_()

    await alice.route("**/static/moderation/live.js", held)
    [sub] = await race([(alice, "alice", "approve")])
    assert sub.won, sub
    await expect(alice.locator("#applying")).to_contain_text("applying…")
    tokens = {page: await page_mark(page) for page in (alice, bob)}

    server.worker_start(worker_id=WORKER)
    # bob's page was open all along: the worker's item.applied, relayed by the server, brings it.
    await expect(bob.locator("#applied-result[data-state=finished]")).to_contain_text(DONE, timeout=APPLIED_MS)
    # The server has passed that event on, to no socket of alice's: her page learns it from its state.
    released.set()
    await expect(alice.locator("#applied-result[data-state=finished]")).to_contain_text(DONE, timeout=APPLIED_MS)
    for page, token in tokens.items():
        await expect(page.locator("#applying")).to_have_count(0)
        assert await page_same(page, token), "a page was reloaded; the outcome must arrive live"
