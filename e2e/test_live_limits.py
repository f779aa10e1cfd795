"""What a page does when the server limits its live socket (static/moderation/live.js).

A login over its socket cap is told so on the page and stops reconnecting (4409); a page
whose socket floods is closed (4429), backs off for 8-16 s instead of reconnecting at
once, then is live again. The server runs with a cap of 2 sockets per login.
"""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from playwright.async_api import expect

from e2e.conftest import e2e_server_running
from e2e.pages import item_path, live_wait

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Keeps every socket live.js opens, and the codes they were closed with.
SOCKETS_JS = """
(() => {
  const Native = window.WebSocket;
  window.__sockets = [];
  window.__closes = [];
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      window.__sockets.push(this);
      this.addEventListener("close", (e) => window.__closes.push(e.code));
    }
  };
})();
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(e2e_template, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("e2e-live-limits")
    async with e2e_server_running(e2e_template, workdir, env={"LIVE_SOCKETS_PER_SESSION": "2"}) as live:
        yield live


async def test_a_page_over_the_socket_cap_says_so_and_stops(server, crowd):
    (item,) = await server.items_create(1, "Cap")
    first = await crowd.login("alice")
    second = await crowd.page("alice", item_path(item["id"]))
    await asyncio.gather(live_wait(first), live_wait(second))

    third = await crowd.page("alice", "/")
    notice = third.locator("#live-stopped-notice")
    await expect(notice).to_have_text(
        "Live updates are off for this page: this login already has 2 live pages open; close some tabs and reload this one."
    )
    await live_wait(third, "offline")

    await first.close()  # a place frees up, but the page said it stopped: it stays so until reloaded
    await asyncio.sleep(1.5)
    await live_wait(third, "offline")
    await third.reload()
    await live_wait(third)
    await expect(third.locator("#live-stopped-notice")).to_have_count(0)


async def test_a_flooding_page_is_closed_backs_off_and_comes_back(server, crowd):
    page = await crowd.login("bob")
    await page.context.add_init_script(SOCKETS_JS)
    await page.reload()
    await live_wait(page)

    await page.evaluate(
        '() => { const ws = window.__sockets.at(-1); for (let i = 0; i < 200; i++) ws.send(\'{"type": "heartbeat"}\'); }'
    )
    await live_wait(page, "reconnecting", timeout=5_000)
    assert await page.evaluate("() => window.__closes") == [4429]
    await asyncio.sleep(4)  # the backoff after 4429 is at least 8 s
    assert await page.evaluate("() => window.__sockets.length") == 1
    await live_wait(page, timeout=20_000)
    assert await page.evaluate("() => window.__sockets.length") == 2
