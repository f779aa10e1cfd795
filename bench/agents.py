"""Benches of agents running elsewhere: asks over /api/v1, decisions back to the agent (issue 29).

- 21. Ask submitted → visible in a moderator's queue: from the moment an agent POSTs its
  ask (``reviewqueue_client.ReviewQueue.submit``, the pass-through graph started in the
  request) to the ``item.created`` frame on a moderator's queue socket, p99.
- 22. Decision answered → agent resumed, by webhook and by long-poll, at 10 decisions/s:
  a real LangChain agent in this process (``create_agent`` + ``HumanInTheLoopMiddleware``,
  its interrupts forwarded with ``interrupts_forward``), resumed by ``WebhookResumer`` on
  a small HTTP server (the worker's webhooks) or by ``decision_wait_resume`` (a long-poll
  per ask); the moment its tool runs minus the moment the moderator's decision was
  answered, p99; target ≤ 250 ms. And the same by webhook for a Node agent: LangChain.js's
  ``createAgent`` + ``humanInTheLoopMiddleware`` in its own Node process
  (clients/typescript/test/bench-agent.ts, ``@reviewqueue/client``'s ``WebhookResumer``),
  its tool's run read off its output by the wall clock both processes share.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from bench.api import _decide
from bench.common import ROOT, Login, Metric, Servers, log, percentile
from bench.served import _watcher_open

# The client package as it is in this checkout, whichever one the virtualenv's editable install names.
sys.path.insert(0, str(ROOT / "reviewqueue-client"))

RATE = 10.0  # decisions per second (measure 22)
WAVE = 20  # asks long-polled at once: LONGPOLL_WAITS_PER_CLIENT's default


def _agent_build(ran: dict[str, float]) -> Any:
    """The e2e's scripted support agent, with a tool that records when it ran, per thread."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.config import get_config

    from e2e.remote_agent import ScriptedModel

    @tool
    def delete_customer(customer_id: str) -> str:
        """Delete a customer."""
        ran.setdefault(get_config()["configurable"]["thread_id"], time.perf_counter())
        return f"deleted {customer_id}"

    return create_agent(
        model=ScriptedModel(),
        tools=[delete_customer],
        checkpointer=InMemorySaver(),
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"delete_customer": True})],
    )


def _asks_forward(client: Any, agent: Any, threads: list[str]) -> dict[str, str]:
    """Run the agent on each thread to its interrupt and forward it: thread → item."""
    from reviewqueue_client.langgraph import interrupts_forward

    def one(thread: str) -> tuple[str, str]:
        agent.invoke({"messages": [("user", "Please delete customer C-7.")]}, {"configurable": {"thread_id": thread}})
        [item] = interrupts_forward(client, agent, thread_id=thread, source="bench-agent")
        return thread, item.id

    with ThreadPoolExecutor(4) as pool:
        return dict(pool.map(one, threads))


def _paced_decisions(host: str, login: Login, items: dict[str, str]) -> dict[str, float]:
    """Approve each thread's item at RATE/s; thread → when the decision was answered."""
    answered = {}
    for thread, item in items.items():
        due = time.perf_counter() + 1 / RATE
        answered[thread] = _decide(host, login, item)
        time.sleep(max(0.0, due - time.perf_counter()))
    return answered


def _latencies(answered: dict[str, float], ran: dict[str, float], *, stall: float = 30) -> list[float]:
    from moderation.lab.waits import progress_wait

    progress_wait(lambda: len(set(answered) & set(ran)), done=lambda n: n == len(answered), stall=stall, poll=0.05)
    return [(ran[t] - answered[t]) * 1000 for t in answered if t in ran]


class _AgentHooks:
    """The agent's webhook endpoint: ``WebhookResumer`` behind a threaded HTTP server."""

    def __init__(self, resumer: Any) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                resumer(dict(self.headers), self.rfile.read(int(self.headers["content-length"])))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _resume_by_longpoll(host: str, login: Login, client: Any, agent: Any, ran: dict[str, float], *, waves: int) -> list[float]:
    from reviewqueue_client.langgraph import decision_wait_resume

    latencies: list[float] = []
    for wave in range(waves):
        items = _asks_forward(client, agent, [f"bench-22-poll-{wave}-{n}-{uuid.uuid4().hex[:6]}" for n in range(WAVE)])
        waiters = [
            threading.Thread(target=decision_wait_resume, args=(client, agent), kwargs={"item_id": item, "timeout": 120})
            for item in items.values()
        ]
        for waiter in waiters:
            waiter.start()
        time.sleep(0.5)  # every wait open before the first decision
        latencies += _latencies(_paced_decisions(host, login, items), ran)
        for waiter in waiters:
            waiter.join(timeout=120)
    return latencies


def _resume_by_webhook(host: str, login: Login, client: Any, agent: Any, ran: dict[str, float], *, count: int) -> list[float]:
    from moderation.delivery.models import WebhookEndpoint
    from reviewqueue_client.langgraph import WebhookResumer

    endpoint = WebhookEndpoint(name=f"bench-agent-{uuid.uuid4().hex[:8]}", events=["item.decided"])
    hooks = _AgentHooks(WebhookResumer(agent, client=client, secret=endpoint.secret))
    endpoint.url = hooks.url
    endpoint.save()
    try:
        items = _asks_forward(client, agent, [f"bench-22-hook-{n}-{uuid.uuid4().hex[:6]}" for n in range(count)])
        return _latencies(_paced_decisions(host, login, items), ran)
    finally:
        endpoint.delete()
        hooks.stop()


async def _visible(host: str, login: Login, token: str, *, count: int, rate: float) -> list[float]:
    """Submit ``count`` asks at ``rate``/s; for each, its item.created frame on the moderator's socket minus its POST."""
    ws = await _watcher_open(host, login)
    sent: dict[str, float] = {}
    seen: dict[str, float] = {}

    async def watch() -> None:
        async for raw in ws:
            frame = json.loads(raw)
            if frame.get("type") == "item.created" and frame.get("title") in sent:
                seen.setdefault(frame["title"], time.perf_counter())

    watcher = asyncio.create_task(watch())
    async with httpx.AsyncClient(
        base_url=f"http://{host}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as api:
        begin = time.perf_counter()
        for n in range(count):
            await asyncio.sleep(max(0.0, begin + n / rate - time.perf_counter()))
            title = f"Approve delete_customer #{n} {uuid.uuid4().hex[:6]}"
            ask = {
                "action_requests": [{"name": "delete_customer", "args": {"customer_id": f"C-{n}"}, "description": ""}],
                "review_configs": [{"action_name": "delete_customer", "allowed_decisions": ["approve", "reject"]}],
            }
            sent[title] = time.perf_counter()
            answer = await api.post(
                "/items",
                json={
                    "title": title,
                    "body": "An agent asks.",
                    "source": "bench-agent",
                    "ask": ask,
                    "external": {"thread_id": title, "interrupt_id": "1"},
                },
            )
            assert answer.status_code == 201, answer.text
        deadline = time.perf_counter() + 30
        while len(seen) < count and time.perf_counter() < deadline:
            await asyncio.sleep(0.05)
    watcher.cancel()
    await ws.close()
    return [(seen[t] - sent[t]) * 1000 for t in sent if t in seen]


def bench_ask_visible(servers: Servers, login: Login, *, count: int) -> list[Metric]:
    """21. An agent's ask, submitted → on a moderator's live queue."""
    from moderation.api.clients import apiclient_create

    _, token = apiclient_create(name=f"bench-asks-{uuid.uuid4().hex[:8]}", scopes=["items:write", "items:read"])
    latencies = asyncio.run(_visible(servers.host(0), login, token, count=count, rate=5.0))
    log(
        f"21. ask visible: p50 {percentile(latencies, 50):.1f} ms, p99 {percentile(latencies, 99):.1f} ms "
        f"({len(latencies)} of {count})"
    )
    return [
        Metric(
            "ask_visible_p99",
            "21. ask submitted → in a moderator's queue (live socket), p99",
            percentile(latencies, 99),
            "ms",
            percentile(latencies, 50),
            "p50 of the same run",
            detail={"asks": count, "seen": len(latencies)},
        )
    ]


def bench_agent_resumed(servers: Servers, login: Login, *, waves: int) -> list[Metric]:
    """22. Decision answered → the agent's tool running, by long-poll and by webhook (a worker must be running)."""
    from moderation.api.clients import apiclient_create
    from reviewqueue_client import ReviewQueue

    _, token = apiclient_create(name=f"bench-agent-{uuid.uuid4().hex[:8]}", scopes=["items:write", "items:read"])
    host = servers.host(0)
    ran: dict[str, float] = {}
    agent = _agent_build(ran)
    metrics = []
    with ReviewQueue(f"http://{host}", token) as client:
        for how, measure in (
            ("long-poll", lambda: _resume_by_longpoll(host, login, client, agent, ran, waves=waves)),
            ("webhook", lambda: _resume_by_webhook(host, login, client, agent, ran, count=WAVE * waves)),
        ):
            latencies = measure()
            log(
                f"22. agent resumed by {how}: p50 {percentile(latencies, 50):.1f} ms, "
                f"p99 {percentile(latencies, 99):.1f} ms ({len(latencies)} of {WAVE * waves})"
            )
            metrics.append(
                Metric(
                    f"agent_resumed_{how.replace('-', '')}_p99",
                    f"22. decision answered → agent resumed by {how}, {RATE:g} dec/s, p99",
                    percentile(latencies, 99),
                    "ms",
                    percentile(latencies, 50),
                    "p50 of the same run",
                    target=250,
                    check="value",
                    op="<=",
                    detail={"decisions": WAVE * waves, "resumed": len(latencies)},
                )
            )
    return metrics


def _node_agent_resumed(host: str, login: Login, token: str, *, count: int) -> list[float]:
    """Decide ``count`` asks of a Node agent process at RATE/s; for each, its tool's run minus the decision's answer (ms)."""
    from e2e.children import children_adopt
    from e2e.node import CLIENT, node_modules_ready
    from e2e.server import free_port
    from moderation.delivery.models import WebhookEndpoint

    node_modules_ready()
    port = free_port()
    endpoint = WebhookEndpoint(
        name=f"bench-node-agent-{uuid.uuid4().hex[:8]}", events=["item.decided"], url=f"http://127.0.0.1:{port}/hooks"
    )
    endpoint.save()
    env = {
        **os.environ,
        "REVIEWQUEUE_URL": f"http://{host}",
        "REVIEWQUEUE_TOKEN": token,
        "REVIEWQUEUE_WEBHOOK_SECRET": endpoint.secret,
    }
    agent = subprocess.Popen(
        [
            "node",
            "--import",
            "tsx",
            "test/bench-agent.ts",
            "--port",
            str(port),
            "--count",
            str(count),
            "--prefix",
            f"bench-22-node-{uuid.uuid4().hex[:6]}",
        ],
        cwd=CLIENT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    children_adopt(agent)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line.strip()) for line in agent.stdout], daemon=True).start()
    ran: dict[str, float] = {}
    try:
        items = None
        while items is None:
            line = lines.get(timeout=300)
            if line.startswith("ready "):
                items = json.loads(line.removeprefix("ready "))
        answered = {}
        for thread, item in items.items():
            due = time.perf_counter() + 1 / RATE
            at = _decide(host, login, item)
            answered[thread] = time.time() - (time.perf_counter() - at)  # the answer's moment, by the wall clock
            time.sleep(max(0.0, due - time.perf_counter()))
        deadline = time.perf_counter() + 60
        while len(ran) < len(answered) and time.perf_counter() < deadline:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            if line.startswith("ran "):
                _, thread, at_ms = line.split()
                ran.setdefault(thread, float(at_ms) / 1000)
        return [(ran[t] - answered[t]) * 1000 for t in answered if t in ran]
    finally:
        os.killpg(agent.pid, signal.SIGTERM)
        agent.wait(timeout=30)
        endpoint.delete()


def bench_node_agent_resumed(servers: Servers, login: Login, *, count: int) -> list[Metric]:
    """22. Decision answered → a Node agent's tool running, by webhook (a worker must be running)."""
    from moderation.api.clients import apiclient_create

    _, token = apiclient_create(name=f"bench-node-agent-{uuid.uuid4().hex[:8]}", scopes=["items:write", "items:read"])
    latencies = _node_agent_resumed(servers.host(0), login, token, count=count)
    log(
        f"22. Node agent resumed by webhook: p50 {percentile(latencies, 50):.1f} ms, "
        f"p99 {percentile(latencies, 99):.1f} ms ({len(latencies)} of {count})"
    )
    return [
        Metric(
            "node_agent_resumed_webhook_p99",
            f"22. decision answered → a Node agent (LangChain.js) resumed by webhook, {RATE:g} dec/s, p99",
            percentile(latencies, 99),
            "ms",
            percentile(latencies, 50),
            "p50 of the same run",
            target=250,
            check="value",
            op="<=",
            detail={"decisions": count, "resumed": len(latencies)},
        )
    ]
