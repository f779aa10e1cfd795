"""Forged live events: a page believes the server's state, not what comes through Redis.

The server runs with the channel layer on Redis (the test Redis, a prefix of its own),
and the test publishes events straight into that layer, as anyone who can reach the
shared Redis could: "mallory approved this item", and ``session.ended`` for every open
page. Neither may stick (the page re-reads the state; the server checks a session.ended
against the database and closes nothing); real decisions and real logouts still show, and
so does a real promotion made by a command in another process.
"""

from __future__ import annotations

import asyncio
import re

import pytest
import pytest_asyncio
from channels_redis.pubsub import RedisPubSubChannelLayer
from playwright.async_api import expect

from e2e.conftest import e2e_server_running
from e2e.pages import LIVE_TIMEOUT_MS, item_path, item_ready, live_wait, race
from e2e.server import LiveServer
from moderation.tests.real_server import redis_env

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Longer than a page needs to re-read its state after an event; used only to show that
# something does NOT happen.
QUIET_MS = 2_000

# Records what each socket of the page receives and how it closed, beside the page's own code.
SOCKET_RECORDER_JS = r"""
(() => {
  const seen = window.__socket = {frames: [], closes: []};
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener("message", (e) => seen.frames.push(JSON.parse(e.data).type));
      this.addEventListener("close", (e) => seen.closes.push(e.code));
    }
  };
})();
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(e2e_template, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("e2e-live-trust")
    async with e2e_server_running(e2e_template, workdir, env=redis_env("trust")) as live:
        yield live


async def forge(server: LiveServer, group: str, message: dict) -> None:
    """Publish ``message`` to ``group`` as an outsider with access to Redis would."""
    layer = RedisPubSubChannelLayer(hosts=[server.extra_env["REDIS_URL"]], prefix=server.extra_env["CHANNEL_LAYER_PREFIX"])
    try:
        await layer.group_send(group, message)
    finally:
        await layer.flush()


async def frame_seen(page, kind: str) -> None:
    await page.wait_for_function(f"() => window.__socket.frames.includes({kind!r})", timeout=LIVE_TIMEOUT_MS)


async def test_a_forged_decision_does_not_stick_and_a_real_one_still_shows(server, crowd):
    [item] = await server.items_create(1, "Forged decision")
    bob_queue = await crowd.login("bob", label="bob-queue")
    bob = await crowd.login("bob")
    for page in (bob_queue, bob):
        await page.add_init_script(SOCKET_RECORDER_JS)
    await bob_queue.reload()
    await bob.goto(item_path(item["id"]))
    await live_wait(bob_queue)
    await item_ready(bob)
    row = bob_queue.locator(f"tr[data-item='{item['id']}']")
    await expect(row).to_have_count(1)

    forged = {
        "type": "item.decided",
        "item": item["id"],
        "title": item["title"],
        "winner": "mallory",
        "status": "approved",
        "decided_at": "2026-01-01T00:00:00+00:00",
        "seconds_ago": 0,
        "counts": {"pending": 0, "decided_today": 99},
    }
    await forge(server, "queue", forged)
    await forge(server, f"item.{item['id']}", forged)
    await frame_seen(bob, "item.decided")
    await frame_seen(bob_queue, "item.decided")
    await bob.wait_for_timeout(QUIET_MS)

    await expect(bob.locator("#decided-banner")).to_have_count(0)
    for decision in ("approve", "reject"):
        await expect(bob.locator(f"#decide-form button[value={decision}]")).to_be_enabled()
    await expect(row).to_have_count(1)
    await expect(row.locator(".decided-by")).to_have_count(0)
    removed = await bob_queue.evaluate("() => window.__e2e.removed")
    assert item["id"] not in removed, "the queue page dropped a row on a forged event"

    alice = await crowd.login("alice", next_path=item_path(item["id"]))
    [won] = await race([(alice, "alice", "approve")])
    assert won.won, won
    banner = bob.locator("#decided-banner")
    await expect(banner).to_have_text(re.compile(r"^alice approved this item \d+ (s|min) ago$"), timeout=LIVE_TIMEOUT_MS)
    for decision in ("approve", "reject"):
        await expect(bob.locator(f"#decide-form button[value={decision}]")).to_be_disabled()
    await expect(row).to_have_count(0, timeout=LIVE_TIMEOUT_MS)


async def test_a_forged_session_end_does_not_stop_live_updates_and_a_real_logout_does(server, crowd):
    [item] = await server.items_create(1, "Forged logout")
    carol = await crowd.login("carol")
    await carol.add_init_script(SOCKET_RECORDER_JS)
    await carol.goto(item_path(item["id"]))
    await item_ready(carol)

    # The server checks the session in the database, finds it alive, and neither forwards
    # nor obeys the forged notice.
    await forge(server, f"item.{item['id']}", {"type": "session.ended"})
    await carol.wait_for_timeout(QUIET_MS)
    assert await carol.evaluate("() => window.__socket.closes") == []
    assert "session.ended" not in await carol.evaluate("() => window.__socket.frames")
    await live_wait(carol)

    alice = await crowd.login("alice", next_path=item_path(item["id"]))
    [won] = await race([(alice, "alice", "reject")])
    assert won.won, won
    await expect(carol.locator("#decided-banner")).to_contain_text("alice rejected this item", timeout=LIVE_TIMEOUT_MS)

    other_tab = await crowd.page("carol", "/")
    async with other_tab.expect_navigation():
        await other_tab.click("button:has-text('Log out')")
    await live_wait(carol, "offline")


async def test_a_viewer_made_moderator_in_another_process_is_asked_to_reload_and_then_can_decide(server, crowd):
    """The promotion's rights.changed crosses Redis from the command's process; the read-only
    page, which has no decision forms, says so at once instead of staying silently read-only."""
    [item] = await server.items_create(1, "Promotion")
    dave = await crowd.login("dave", next_path=item_path(item["id"]))
    await item_ready(dave)
    await expect(dave.locator("#decide-form")).to_have_count(0)
    await asyncio.to_thread(server.manage, "moderator_add", "dave")
    try:
        await expect(dave.locator("#live-stopped-notice")).to_have_text(
            "Live updates are off for this page: your rights changed; reload the page.", timeout=LIVE_TIMEOUT_MS
        )
        await dave.reload()
        await item_ready(dave)
        await expect(dave.locator("#decide-form button[value=approve]")).to_be_enabled()
    finally:
        await asyncio.to_thread(server.manage, "moderator_add", "dave", "--remove")
