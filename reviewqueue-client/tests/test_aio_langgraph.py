"""The async glue with a real agent (``ainvoke``): forward its interrupt, resume its thread exactly once
under the async lock its checkpointer shares, whatever races to resume it; and the naive control."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
from collections import Counter
from datetime import UTC, datetime

import httpx
import pytest
from agent_support import InvokeAfter, agent_build
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from standardwebhooks import Webhook

from reviewqueue_client import AsyncReviewQueue, WebhookInvalid
from reviewqueue_client.aio_langgraph import (
    AsyncWebhookResumer,
    adecision_resume,
    adecision_wait_resume,
    ainterrupts_forward,
    ainterrupts_reconcile,
)
from reviewqueue_client.locks import async_checkpointer_thread_lock, async_local_thread_lock

pytestmark = pytest.mark.asyncio

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
EDIT = {"decisions": [{"type": "edit", "edited_action": {"name": "delete_customer", "args": {"customer_id": "C-8"}}}]}
CONFIG = {"configurable": {"thread_id": "th-1"}}


@contextlib.asynccontextmanager
async def _no_lock(thread_id: str):
    yield


def _slow():
    """A timed window for a second resume (the locked arms)."""
    return asyncio.sleep(0.2)


def _gated(barrier: asyncio.Barrier):
    """A naive control's gate: every replica past its check."""
    return lambda: asyncio.wait_for(barrier.wait(), 120)


def _first_two_meet():
    """A tool hook: its first two callers wait for each other; later ones pass."""
    meet, lock, entered = threading.Barrier(2), threading.Lock(), []

    def hook() -> None:
        with lock:
            entered.append(1)
            first_two = len(entered) <= 2
        if first_two:
            meet.wait(120)

    return hook


async def _started(checkpointer, runs: Counter, **build):
    agent = agent_build(checkpointer=checkpointer, runs=runs, **build)
    await agent.ainvoke({"messages": [HumanMessage(content="delete C-7")]}, CONFIG)
    return agent


async def _interrupt_id(agent) -> str:
    [pending] = (await agent.aget_state(CONFIG)).interrupts
    return pending.id


def _fake_api(calls: Counter, *, resume=None) -> AsyncReviewQueue:
    """A fake reviewqueue: submits answer one item keyed by its external ids (decided with ``resume``), outcomes are counted."""
    item = {
        "id": "it-1",
        "status": "edited" if resume else "pending",
        "graph": "ask",
        "external_id": None,
        "resume": resume,
        "asks": [],
        "applied_result": {},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        calls[(request.method, path.rsplit("/", 1)[-1])] += 1
        if path.endswith("/outcome"):
            return httpx.Response(201, json={**item, "outcome": json.loads(request.content)})
        if path.endswith("/decision"):
            return httpx.Response(200, json=item)
        item["external"] = json.loads(request.content)["external"]
        return httpx.Response(201, json=item)

    return AsyncReviewQueue("http://rq.test", "tok", transport=httpx.MockTransport(handler))


def _signed(event: dict, msg_id: str = "msg_1") -> tuple[dict, str]:
    body = json.dumps(event)
    now = datetime.now(tz=UTC)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(SECRET).sign(msg_id, now, body),
    }, body


async def test_forward_submits_the_interrupt_keyed_by_thread_and_interrupt_with_the_sync_glues_ask():
    agent = await _started(InMemorySaver(), Counter())
    sent = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(
            201,
            json={
                "id": "it-1",
                "status": "pending",
                "graph": "ask",
                "external_id": None,
                "external": sent[-1]["external"],
                "resume": None,
                "asks": [],
                "applied_result": {},
            },
        )

    client = AsyncReviewQueue("http://rq.test", "tok", transport=httpx.MockTransport(handler))
    [item] = await ainterrupts_forward(client, agent, thread_id="th-1", source="support-agent", team="payments")
    [payload] = sent
    assert payload["external"] == {"thread_id": "th-1", "interrupt_id": await _interrupt_id(agent)} == item.external
    assert payload["title"] == "Approve delete_customer" and payload["team"] == "payments"
    assert payload["context"]["messages"][0] == {"role": "human", "content": "delete C-7"}


@pytest.mark.parametrize("naive", [False, True], ids=["locked", "naive-control"])
async def test_duplicate_deliveries_and_a_long_poll_at_once_run_the_tool_once_with_the_edit(naive):
    runs, calls = Counter(), Counter()
    # The naive control's four resumes start once all have passed the check, and its first two tool runs
    # wait for each other, so neither saves its step before the other has loaded the thread: certain, not timed.
    agent = await _started(InMemorySaver(), runs, **({"tool_entered": _first_two_meet()} if naive else {}))
    slow = InvokeAfter(agent, _gated(asyncio.Barrier(4)) if naive else _slow)
    client = _fake_api(calls, resume=EDIT)
    resumer = AsyncWebhookResumer(slow, client=client, secret=SECRET, thread_lock=_no_lock if naive else None)
    event = {
        "type": "item.decided",
        "data": {
            "id": "it-1",
            "external": {"thread_id": "th-1", "interrupt_id": await _interrupt_id(agent)},
            "decision": {"resume": EDIT},
        },
    }
    await ainterrupts_forward(client, agent, thread_id="th-1", source="support-agent")
    deliveries = [resumer(*_signed(event)) for _ in range(3)]
    polled = adecision_wait_resume(client, slow, item_id="it-1", timeout=5, thread_lock=_no_lock if naive else None)
    # return_exceptions: a naive second resume may also ask the scripted model past its script, after its tool ran
    resumed = await asyncio.gather(*deliveries, polled, return_exceptions=True)
    if naive:
        assert runs["C-8"] > 1
        return
    assert [r.resumed for r in resumed].count(True) == 1 and runs == Counter({"C-8": 1})
    assert calls[("POST", "outcome")] == 1 and [r.reported for r in resumed if r.resumed] == [True]


async def test_a_forged_webhook_is_refused_and_another_event_is_a_no_op():
    runs = Counter()
    agent = await _started(InMemorySaver(), runs)
    resumer = AsyncWebhookResumer(agent, client=_fake_api(Counter()), secret=SECRET)
    headers, body = _signed({"type": "item.decided", "data": {}})
    with pytest.raises(WebhookInvalid):
        await resumer({**headers, "webhook-signature": "v1,AAAA"}, body)
    assert not (await resumer(*_signed({"type": "item.created", "data": {"id": "x"}}))).resumed and not runs


async def test_reconcile_resumes_a_decision_already_made_once_and_forwards_again_idempotently():
    runs, calls = Counter(), Counter()
    agent = await _started(InMemorySaver(), runs)
    client = _fake_api(calls, resume=EDIT)
    [first] = await ainterrupts_reconcile(client, agent, thread_ids=["th-1"], source="support-agent")
    assert first.resumed and first.reported and runs == Counter({"C-8": 1})
    assert await ainterrupts_reconcile(client, agent, thread_ids=["th-1"], source="support-agent") == []
    assert runs == Counter({"C-8": 1}) and calls[("POST", "outcome")] == 1


@pytest.mark.parametrize("naive", [False, True], ids=["locked", "naive-control"])
async def test_two_replicas_on_one_sqlite_file_resume_once(tmp_path, naive):
    runs = Counter()
    db = str(tmp_path / "agent.db")
    # The naive control's replicas wait for each other past the check and inside the tool, so the first cannot
    # save its tool's step before the second has loaded the thread (a CI run at load missed the 0.2 s window).
    before = _gated(asyncio.Barrier(2)) if naive else _slow
    in_tool = threading.Barrier(2)
    build = {"tool_entered": lambda: in_tool.wait(120)} if naive else {}
    async with AsyncSqliteSaver.from_conn_string(db) as mine, AsyncSqliteSaver.from_conn_string(db) as theirs:
        replicas = [
            InvokeAfter(await _started(mine, runs, **build), before),
            InvokeAfter(agent_build(checkpointer=theirs, runs=runs, **build), before),
        ]
        interrupt_id = await _interrupt_id(replicas[0])
        resumed = await asyncio.gather(
            *(
                adecision_resume(
                    r, thread_id="th-1", interrupt_id=interrupt_id, resume=EDIT, thread_lock=_no_lock if naive else None
                )
                for r in replicas
            ),
            return_exceptions=True,
        )
    if naive:
        assert runs["C-8"] > 1
    else:
        assert sorted(r.resumed for r in resumed) == [False, True] and runs == Counter({"C-8": 1})
    assert (tmp_path / "agent.db.thread-locks").is_dir() is not naive


# A sync replica of another process holds the thread's lock on the same SQLite file a while.
HOLDER = """
import pathlib, sqlite3, sys, time
from langgraph.checkpoint.sqlite import SqliteSaver
from reviewqueue_client.locks import checkpointer_thread_lock
with checkpointer_thread_lock(SqliteSaver(sqlite3.connect(sys.argv[1], check_same_thread=False)))("th-1"):
    print("held", flush=True)
    time.sleep(0.5)
    pathlib.Path(sys.argv[2]).write_text("released")
"""


async def test_an_async_sqlite_lock_excludes_a_sync_process_on_the_same_file_and_leaves_the_loop_running(tmp_path):
    db, released = str(tmp_path / "agent.db"), tmp_path / "released"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, db, str(released)],
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": ":".join(sys.path)},
    )
    try:
        assert (await asyncio.to_thread(holder.stdout.readline)).strip() == "held"
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        async with AsyncSqliteSaver.from_conn_string(db) as saver, async_checkpointer_thread_lock(saver)("th-1"):
            assert released.exists()  # it had to let go first
        ticker.cancel()
        assert ticks > 1  # the loop ran on while the lock was awaited
    finally:
        assert holder.wait(timeout=60) == 0
    assert (tmp_path / "agent.db.thread-locks").is_dir()  # the sync lock's files


async def test_memory_checkpointers_lock_in_the_event_loop():
    assert async_checkpointer_thread_lock(InMemorySaver()) is async_local_thread_lock
    inside, overlaps = Counter(), []

    async def hold() -> None:
        async with async_local_thread_lock("th-1"):
            inside["now"] += 1
            overlaps.append(inside["now"])
            await asyncio.sleep(0.01)
            inside["now"] -= 1

    await asyncio.gather(*(hold() for _ in range(5)))
    assert overlaps == [1] * 5
