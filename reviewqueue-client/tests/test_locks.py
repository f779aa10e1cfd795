"""The per-thread lock follows the checkpointer, and excludes whoever shares it; reconcile resumes once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractContextManager, AsyncExitStack, ExitStack, asynccontextmanager, contextmanager
from typing import Any

import httpx
import pytest
from agent_support import InvokeAfter, agent_build, agent_start
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from postgres_support import postgres_url  # noqa: F401 - a fixture

from reviewqueue_client import ReviewQueue
from reviewqueue_client.langgraph import decision_resume, interrupts_reconcile
from reviewqueue_client.locks import async_checkpointer_thread_lock, checkpointer_thread_lock, local_thread_lock

APPROVE = {"decisions": [{"type": "approve"}]}
# Another process takes the same thread's lock, says so, holds it a while, and notes when it lets go.
HOLDER = """
import pathlib, sqlite3, sys, time
from langgraph.checkpoint.sqlite import SqliteSaver
from reviewqueue_client.locks import checkpointer_thread_lock
lock = checkpointer_thread_lock(SqliteSaver(sqlite3.connect(sys.argv[1], check_same_thread=False)))
with lock("th-1"):
    print("held", flush=True)
    time.sleep(0.5)
    pathlib.Path(sys.argv[2]).write_text("released")
"""


def test_a_sqlite_checkpointers_lock_excludes_another_process_on_the_same_file(tmp_path):
    db = str(tmp_path / "agent.db")
    lock = checkpointer_thread_lock(SqliteSaver(sqlite3.connect(db, check_same_thread=False)))
    released = tmp_path / "released"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, db, str(released)],
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": ":".join(sys.path)},
    )
    assert holder.stdout.readline().strip() == "held"
    with lock("th-1"):
        assert released.exists()  # it had to let go first
    assert holder.wait(timeout=60) == 0
    with lock("th-2"):  # another thread's lock is another lock
        pass
    assert (tmp_path / "agent.db.thread-locks").is_dir()


def test_the_lock_excludes_threads_of_one_process_too_and_memory_checkpointers_lock_in_process(tmp_path):
    lock = checkpointer_thread_lock(SqliteSaver(sqlite3.connect(str(tmp_path / "a.db"), check_same_thread=False)))
    inside, overlaps = Counter(), []

    def hold() -> None:
        with lock("th-1"):
            inside["now"] += 1
            overlaps.append(inside["now"])
            time.sleep(0.02)
            inside["now"] -= 1

    workers = [threading.Thread(target=hold) for _ in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert overlaps == [1] * 6
    assert checkpointer_thread_lock(InMemorySaver()) is local_thread_lock


def test_reconcile_resumes_a_decision_already_made_once_and_forwards_what_is_undecided():
    runs = Counter()
    agent = agent_build(checkpointer=InMemorySaver(), runs=runs)
    agent_start(agent, thread_id="th-1")
    decided = Counter()
    item = {
        "id": "it-1",
        "status": "approved",
        "graph": "ask",
        "external_id": None,
        "resume": APPROVE,
        "asks": [],
        "applied_result": {},
        "outcome": None,
    }

    def handler(request: httpx.Request) -> httpx.Response:
        sent = json.loads(request.content)
        if request.url.path.endswith("/outcome"):  # the resumed run's report
            decided["reports"] += 1
            return httpx.Response(201, json={**item, "outcome": sent})
        decided["submits"] += 1
        item["external"] = sent["external"]
        return httpx.Response(200, json=item)

    client = ReviewQueue("http://rq.test", "tok", transport=httpx.MockTransport(handler))
    [first] = interrupts_reconcile(client, agent, thread_ids=["th-1"], source="support-agent")
    assert first.resumed and runs == Counter({"C-7": 1})
    assert interrupts_reconcile(client, agent, thread_ids=["th-1"], source="support-agent") == []  # nothing waits now
    assert runs == Counter({"C-7": 1}) and decided == Counter({"submits": 1, "reports": 1})


def _postgres_saver(set_up: str, url: str) -> AbstractContextManager[Any]:
    """A PostgresSaver made as LangGraph's docs make one (each reads rows as dicts), or on a plain connection."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    documented = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    stack = ExitStack()
    if set_up == "from_conn_string":
        saver = stack.enter_context(PostgresSaver.from_conn_string(url))
    elif set_up == "from_conn_string_pipeline":
        saver = stack.enter_context(PostgresSaver.from_conn_string(url, pipeline=True))
    elif set_up == "connection_dict_row":
        saver = PostgresSaver(stack.enter_context(psycopg.Connection.connect(url, **documented)))
    elif set_up == "pool_dict_row":
        pool = stack.enter_context(ConnectionPool(url, min_size=1, max_size=4, kwargs=documented, open=False))
        pool.open(wait=True)
        saver = PostgresSaver(pool)
    else:  # tuples, psycopg's default: not a saver LangGraph can use, but the lock alone must not care
        saver = PostgresSaver(stack.enter_context(psycopg.connect(url, autocommit=True)))
    return _closing(stack, saver)


@contextmanager
def _closing(stack: ExitStack, saver: Any) -> Iterator[Any]:
    with stack:
        yield saver


@pytest.mark.cluster
@pytest.mark.parametrize(
    "set_up", ["connection_tuple_row", "connection_dict_row", "from_conn_string", "from_conn_string_pipeline", "pool_dict_row"]
)
def test_a_postgres_checkpointers_lock_is_an_advisory_lock_every_session_sees(postgres_url, set_up):
    with _postgres_saver(set_up, postgres_url) as mine, _postgres_saver(set_up, postgres_url) as theirs:
        lock = checkpointer_thread_lock(mine)
        other = checkpointer_thread_lock(theirs)  # another replica's, on its own session
        held, released, failed = threading.Event(), threading.Event(), []

        def replica() -> None:
            try:
                with other("th-1"):
                    held.set()
                    time.sleep(0.3)
                    released.set()
            except Exception as exc:
                failed.append(exc)
                held.set()

        worker = threading.Thread(target=replica)
        worker.start()
        assert held.wait(timeout=60) and not failed, failed
        with lock("th-1"):
            assert released.is_set()  # it had to let go first
        worker.join()
        with lock("th-1"), other("th-2"):  # let go, and another thread's lock is another lock
            pass


@pytest.mark.cluster
@pytest.mark.parametrize("set_up", ["connection_dict_row", "from_conn_string", "from_conn_string_pipeline", "pool_dict_row"])
def test_replicas_on_each_documented_postgres_saver_resume_a_decision_once(postgres_url, set_up):
    runs = Counter()
    with _postgres_saver("from_conn_string", postgres_url) as saver:
        saver.setup()  # not in a pipeline: its CREATE INDEX CONCURRENTLY cannot run in one
    with _postgres_saver(set_up, postgres_url) as mine, _postgres_saver(set_up, postgres_url) as theirs:
        replicas = [agent_build(checkpointer=mine, runs=runs), agent_build(checkpointer=theirs, runs=runs)]
        agent_start(replicas[0], thread_id="th-1")
        [pending] = replicas[0].get_state({"configurable": {"thread_id": "th-1"}}).interrupts
        start, resumed = threading.Barrier(2), []

        def deliver(agent: Any) -> None:  # each replica receives the decision at once
            start.wait()
            resumed.append(decision_resume(agent, thread_id="th-1", interrupt_id=pending.id, resume=APPROVE).resumed)

        workers = [threading.Thread(target=deliver, args=(agent,)) for agent in replicas]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    assert sorted(resumed) == [False, True] and runs == Counter({"C-7": 1})


def _async_postgres_saver(set_up: str, url: str) -> Any:
    """An AsyncPostgresSaver made as LangGraph's docs make one (dict rows), or on a plain connection (tuples)."""
    import psycopg
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    documented = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}

    @asynccontextmanager
    async def made() -> AsyncIterator[Any]:
        async with AsyncExitStack() as stack:
            if set_up == "from_conn_string":
                yield await stack.enter_async_context(AsyncPostgresSaver.from_conn_string(url))
            elif set_up == "from_conn_string_pipeline":
                yield await stack.enter_async_context(AsyncPostgresSaver.from_conn_string(url, pipeline=True))
            elif set_up == "connection_dict_row":
                yield AsyncPostgresSaver(
                    await stack.enter_async_context(await psycopg.AsyncConnection.connect(url, **documented))
                )
            elif set_up == "pool_dict_row":
                pool = await stack.enter_async_context(
                    AsyncConnectionPool(url, min_size=1, max_size=4, kwargs=documented, open=False)
                )
                await pool.open(wait=True)
                yield AsyncPostgresSaver(pool)
            else:
                yield AsyncPostgresSaver(
                    await stack.enter_async_context(await psycopg.AsyncConnection.connect(url, autocommit=True))
                )

    return made()


ASYNC_SET_UPS = ["connection_tuple_row", "connection_dict_row", "from_conn_string", "from_conn_string_pipeline", "pool_dict_row"]


@pytest.mark.cluster
@pytest.mark.parametrize("set_up", ASYNC_SET_UPS)
def test_an_async_postgres_checkpointers_lock_is_the_advisory_lock_sync_and_async_sessions_see(postgres_url, set_up):
    """Another replica (its own event loop and session) holds the async lock; this one waits for it, as a sync
    replica's lock does; each replica's event loop runs on meanwhile."""
    held, released, failed = threading.Event(), threading.Event(), []

    async def replica() -> None:
        async with _async_postgres_saver(set_up, postgres_url) as theirs, async_checkpointer_thread_lock(theirs)("th-1"):
            held.set()
            await asyncio.sleep(0.3)
            released.set()

    def run_replica() -> None:
        try:
            asyncio.run(replica())
        except Exception as exc:
            failed.append(exc)
            held.set()

    async def mine() -> int:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        async with _async_postgres_saver(set_up, postgres_url) as saver:
            lock = async_checkpointer_thread_lock(saver)
            ticker = asyncio.create_task(tick())
            async with lock("th-1"):
                assert released.is_set()  # it had to let go first
            ticker.cancel()
            async with lock("th-1"), lock("th-2"):  # let go, and another thread's lock is another lock
                pass
        return ticks

    worker = threading.Thread(target=run_replica)
    worker.start()
    assert held.wait(timeout=60) and not failed, failed
    assert asyncio.run(mine()) > 1
    worker.join()
    assert not failed, failed
    with _postgres_saver("from_conn_string", postgres_url) as sync_saver:  # a sync replica's lock is the same lock
        sync_lock = checkpointer_thread_lock(sync_saver)

        async def against_sync() -> bool:
            async with _async_postgres_saver(set_up, postgres_url) as saver, async_checkpointer_thread_lock(saver)("th-1"):
                taken = await asyncio.to_thread(_try_lock, sync_saver)
            return taken

        assert asyncio.run(against_sync()) is False
        with sync_lock("th-1"):
            pass


def _try_lock(saver: Any) -> bool:
    """Whether the sync saver's session could take th-1's advisory lock now (let go at once if it could)."""
    from reviewqueue_client.locks import _advisory_key, _session

    with _session(saver) as run:
        taken = run("SELECT pg_try_advisory_lock(%s)", _advisory_key("th-1"))
        if taken:
            run("SELECT pg_advisory_unlock(%s)", _advisory_key("th-1"))
    return taken


@pytest.mark.cluster
@pytest.mark.parametrize("set_up", ["connection_dict_row", "from_conn_string", "from_conn_string_pipeline", "pool_dict_row"])
@pytest.mark.parametrize("naive", [False, True], ids=["locked", "naive-control"])
def test_async_replicas_on_each_documented_postgres_saver_resume_a_decision_once(postgres_url, set_up, naive):
    """Two replicas, each on its own saver and event loop (as two processes are), resume at once; the naive
    control (no lock) runs the tool twice."""
    from langgraph.checkpoint.postgres import PostgresSaver

    from reviewqueue_client.aio_langgraph import adecision_resume

    runs = Counter()
    with PostgresSaver.from_conn_string(postgres_url) as saver:
        saver.setup()
    start, resumed = threading.Barrier(2), []
    # The naive control's replicas: both past the check, then both inside the tool, so the first cannot save its
    # tool's step before the second has loaded the thread (two CI runs at load missed a 0.3 s window).
    checked, in_tool = threading.Barrier(2), threading.Barrier(2)

    @asynccontextmanager
    async def no_lock(thread_id: str) -> AsyncIterator[None]:
        yield

    async def replica(first: bool) -> None:
        async with _async_postgres_saver(set_up, postgres_url) as checkpointer:
            agent = agent_build(checkpointer=checkpointer, runs=runs, tool_entered=(lambda: in_tool.wait(120)) if naive else None)
            if first:
                await agent.ainvoke({"messages": [("user", "delete C-7")]}, {"configurable": {"thread_id": "th-1"}})
            await asyncio.to_thread(start.wait)
            [pending] = (await agent.aget_state({"configurable": {"thread_id": "th-1"}})).interrupts
            resumed.append(
                (
                    await adecision_resume(
                        InvokeAfter(agent, lambda: asyncio.to_thread(checked.wait, 120) if naive else asyncio.sleep(0.3)),
                        thread_id="th-1",
                        interrupt_id=pending.id,
                        resume=APPROVE,
                        thread_lock=no_lock if naive else None,
                    )
                ).resumed
            )

    def run(first: bool) -> None:
        with contextlib.suppress(RuntimeError):  # a naive second run may ask the scripted model past its script
            asyncio.run(replica(first))

    first = threading.Thread(target=run, args=(True,))
    second = threading.Thread(target=run, args=(False,))
    first.start()
    second.start()
    first.join()
    second.join()
    if naive:
        assert runs["C-7"] == 2
    else:
        assert sorted(resumed) == [False, True] and runs == Counter({"C-7": 1})
