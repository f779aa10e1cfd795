"""A LangChain.js agent (createAgent + humanInTheLoopMiddleware) in its own Node process asks through
``@reviewqueue/client``; a moderator edits one argument of its tool call in the browser; the agent,
resumed by webhook, runs the tool once with the edited arguments, typed, and reports its outcome."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import expect

from e2e.agents import agent_effects
from e2e.conftest import e2e_server_running
from e2e.node import node_modules_ready, postgres_database, ts_agent
from e2e.pages import item_path, item_ready
from e2e.server import free_port
from e2e.test_remote_agent import GRACE_DAYS, _outcome
from moderation.lab.waits import progress_wait

pytestmark = [pytest.mark.either_pass, pytest.mark.asyncio(loop_scope="module")]

WORKER = "e2e-ts-agent-hooks"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(e2e_template, tmp_path_factory):
    await asyncio.to_thread(node_modules_ready)
    async with e2e_server_running(e2e_template, tmp_path_factory.mktemp("e2e-ts-agent")) as live:
        live.worker_start(worker_id=WORKER)  # sends the webhooks
        await asyncio.to_thread(live.worker_wait_ready, WORKER)
        yield live


async def test_a_node_agent_resumes_with_the_moderators_edit_and_its_tool_runs_once(server, crowd, tmp_path):
    token = (await asyncio.to_thread(server.manage, "apiclient_create", "e2e-ts-agent")).strip()
    port = free_port()
    secret = (
        (
            await asyncio.to_thread(
                server.manage,
                "shell",
                "-c",
                "from moderation.delivery.models import WebhookEndpoint as E; "
                f"print(E.objects.create(name='ts-agent', url='http://127.0.0.1:{port}/hooks', events=['item.decided']).secret)",
            )
        )
        .strip()
        .splitlines()[-1]
    )
    with postgres_database() as postgres_url:
        agent = ts_agent(server=server, workdir=tmp_path, port=port, token=token, secret=secret, postgres_url=postgres_url)
        try:
            assert await asyncio.to_thread(agent.ready) == []  # forwarded; nothing decided yet
            async with httpx.AsyncClient(base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {token}"}) as api:
                [item] = (await api.get("/items", params={"graph": "ask"})).json()["items"]
            assert item["external"]["thread_id"] == "support-thread-1" and item["title"] == "Approve delete_customer"

            alice = await crowd.login("alice", next_path=item_path(item["id"]))
            await item_ready(alice)
            await expect(alice.locator("#agent-context")).to_contain_text("Please delete customer C-7.")
            await expect(alice.locator(".action-description")).to_have_text("Tool execution requires approval")
            await expect(alice.locator(GRACE_DAYS)).to_have_value("30")
            await alice.locator(GRACE_DAYS).fill("14")
            await alice.get_by_role("button", name="Submit edited delete_customer").click()
            await expect(alice.locator(".notice-success")).to_be_visible()

            while not agent_effects(tmp_path):  # the worker's webhook reaches the Node agent, which resumes
                assert agent.process.poll() is None, "".join(agent.output)
                await asyncio.sleep(0.1)
            await asyncio.sleep(1)  # room for a wrong second run to show
            assert agent_effects(tmp_path) == [{"customer_id": "C-7", "grace_days": 14}]
            reported = await asyncio.to_thread(
                progress_wait, lambda: _outcome(server, token, item["id"]), done=lambda outcome: outcome is not None, stall=60
            )
            assert reported is not None and (reported["status"], reported["message"]) == ("done", "done"), reported
            await alice.reload()
            await expect(alice.locator("#agent-outcome")).to_contain_text("The agent reports: done")
        finally:
            await asyncio.to_thread(agent.stop)
