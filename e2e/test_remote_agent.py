"""An agent in its own OS process asks over /api/v1; a moderator reads why it asks (its last
messages) and edits one argument of its tool call through that argument's own input in the
browser; the agent, resumed by webhook, runs the tool once with the edited arguments, typed
(a number stays a number), and reports its outcome; the item page shows what the edit changed."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import expect

from e2e.agents import AgentProcess, agent_effects
from e2e.conftest import e2e_server_running
from e2e.pages import item_path, item_ready
from e2e.server import free_port
from moderation.lab.waits import progress_wait

pytestmark = pytest.mark.asyncio(loop_scope="module")

WORKER = "e2e-agent-hooks"
# LangChain's middleware sends no args_schema: each argument's input is typed by the value the agent proposed.
GRACE_DAYS = 'input[name="action-0-arg-grace_days"]'


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(e2e_template, tmp_path_factory):
    async with e2e_server_running(e2e_template, tmp_path_factory.mktemp("e2e-remote-agent")) as live:
        live.worker_start(worker_id=WORKER)  # sends the webhooks
        await asyncio.to_thread(live.worker_wait_ready, WORKER)
        yield live


def _outcome(server, token: str, item_id: str) -> dict | None:
    """The outcome the agent reported on the item, as the API reads it (None: not yet)."""
    return httpx.get(f"{server.url}/api/v1/items/{item_id}", headers={"Authorization": f"Bearer {token}"}).json()["outcome"]


async def test_a_remote_agent_resumes_with_the_moderators_edit_and_its_tool_runs_once(server, crowd, tmp_path):
    token = (await asyncio.to_thread(server.manage, "apiclient_create", "e2e-agent")).strip()
    port = free_port()
    secret = (
        (
            await asyncio.to_thread(
                server.manage,
                "shell",
                "-c",
                "from moderation.delivery.models import WebhookEndpoint as E; "
                f"print(E.objects.create(name='agent', url='http://127.0.0.1:{port}/hooks', events=['item.decided']).secret)",
            )
        )
        .strip()
        .splitlines()[-1]
    )
    agent = AgentProcess(server=server, workdir=tmp_path, port=port, token=token, secret=secret)
    try:
        assert await asyncio.to_thread(agent.ready) == []  # forwarded; nothing decided yet
        async with httpx.AsyncClient(base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {token}"}) as api:
            [item] = (await api.get("/items", params={"graph": "ask"})).json()["items"]
        assert item["external"]["thread_id"] == "support-thread-1" and item["status"] == "pending"

        alice = await crowd.login("alice", next_path=item_path(item["id"]))
        await item_ready(alice)
        await expect(alice.locator("#external")).to_contain_text("support-thread-1")
        assert item["title"] == "Approve delete_customer"
        await expect(alice.locator("#agent-context")).to_contain_text("Please delete customer C-7.")
        await expect(alice.locator(".action-description")).to_have_text("Tool execution requires approval")
        await expect(alice.locator(GRACE_DAYS)).to_have_attribute("type", "number")
        await expect(alice.locator(GRACE_DAYS)).to_have_value("30")
        await alice.locator(GRACE_DAYS).fill("14")
        await alice.get_by_role("button", name="Submit edited delete_customer").click()
        await expect(alice.locator(".notice-success")).to_be_visible()

        while not agent_effects(tmp_path):  # the worker's webhook reaches the agent, which resumes
            assert agent.process.poll() is None, "".join(agent.output)
            await asyncio.sleep(0.1)
        await asyncio.sleep(1)  # room for a wrong second run to show
        assert agent_effects(tmp_path) == [{"customer_id": "C-7", "grace_days": 14}]
        async with httpx.AsyncClient(base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {token}"}) as api:
            decided = (await api.get(f"/items/{item['id']}")).json()
        # What the agent was resumed with: the edited argument a number, the other one as it proposed it.
        [decision] = decided["resume"]["decisions"]
        assert decision["edited_action"]["args"] == {"customer_id": "C-7", "grace_days": 14}
        assert type(decision["edited_action"]["args"]["grace_days"]) is int
        assert decided["asks"][0]["edits"][0]["changes"] == [
            {"arg": "grace_days", "change": "changed", "before": 30, "after": 14}
        ]

        # The agent reports its outcome right after its resume: wait for it while it is on its way, then look.
        reported = await asyncio.to_thread(
            progress_wait, lambda: _outcome(server, token, item["id"]), done=lambda outcome: outcome is not None, stall=60
        )
        assert reported is not None and reported["status"] == "done", reported
        await alice.reload()
        await expect(alice.locator("#agent-outcome")).to_contain_text("The agent reports: done")
        await expect(alice.locator("#agent-outcome-message")).to_have_text("done")
        await expect(alice.locator("#agent-outcome")).to_contain_text("e2e-agent")
        changed = alice.locator("#decisions .diff .change-changed")
        await expect(changed.locator("th")).to_have_text("grace_days")
        await expect(changed.locator("del")).to_have_text("30")
        await expect(changed.locator("ins")).to_have_text("14")
    finally:
        await asyncio.to_thread(agent.stop)
