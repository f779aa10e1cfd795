"""An async LangChain agent service in its own OS process (e2e/test_async_agent.py): ``remote_agent.py``'s agent, async.

The same agent (``create_agent`` + ``HumanInTheLoopMiddleware``, a scripted model proposing
``delete_customer``) run with ``ainvoke`` on an ``AsyncSqliteSaver``, served by a small
asyncio HTTP server whose one route is an async handler, as a FastAPI service's would be:
``POST /hooks`` awaits ``AsyncWebhookResumer``. It uses only ``reviewqueue-client``'s async
side (``AsyncReviewQueue``, ``reviewqueue_client.aio_langgraph``). It says what
``remote_agent.py`` says (``serving``, ``ready [...]``, ``resumed true|false``,
``received``), takes the same flags (``--slow-resume``, ``--tool-seconds``, ``--naive``,
``--hold``), and appends each run of its tool to ``effects.jsonl`` in ``--dir``; replicas
are processes on the same ``--dir``.

REVIEWQUEUE_URL, REVIEWQUEUE_TOKEN and REVIEWQUEUE_WEBHOOK_SECRET come from the environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from langchain_core.tools import tool
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from e2e.remote_agent import SlowResume, agent_arguments, agent_create, deletion_record
from reviewqueue_client import AsyncReviewQueue, WebhookInvalid, webhook_verify
from reviewqueue_client.aio_langgraph import AsyncWebhookResumer, ainterrupts_reconcile

REASONS = {204: "No Content", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}


def say(*words: str) -> None:
    print(*words, flush=True)  # one event loop: whole lines


@contextlib.asynccontextmanager
async def no_lock(thread_id: str) -> AsyncIterator[None]:  # the negative controls
    yield


def agent_build(*, checkpointer: AsyncSqliteSaver, effects: str, tool_seconds: float) -> Any:
    @tool
    async def delete_customer(customer_id: str, grace_days: int = 30) -> str:
        """Delete a customer, after a grace period."""
        await asyncio.sleep(tool_seconds)
        return deletion_record(effects, customer_id=customer_id, grace_days=grace_days)

    return agent_create(delete_customer=delete_customer, checkpointer=checkpointer)


Handler = Callable[[dict[str, str], bytes], Awaitable[int]]


async def http_serve(port: int, route: Handler) -> asyncio.Server:
    """A minimal HTTP/1.1 server: ``POST /hooks`` answered with what ``route`` returns, one request per connection."""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            method, path, _ = head[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in head[1:] if ":" in line)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            status = await route(headers, body) if (method, path) == ("POST", "/hooks") else 404
            writer.write(f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(connection, "127.0.0.1", port)


async def main() -> None:
    args = agent_arguments().parse_args()
    config = {"configurable": {"thread_id": args.thread}}
    secret = os.environ["REVIEWQUEUE_WEBHOOK_SECRET"]
    lock = no_lock if args.naive else None  # None: the lock the SQLite checkpointer shares with the replicas
    async with (
        AsyncSqliteSaver.from_conn_string(os.path.join(args.dir, "agent.db")) as checkpointer,
        AsyncReviewQueue(os.environ["REVIEWQUEUE_URL"], os.environ["REVIEWQUEUE_TOKEN"]) as reviews,
    ):
        agent = agent_build(
            checkpointer=checkpointer, effects=os.path.join(args.dir, "effects.jsonl"), tool_seconds=args.tool_seconds
        )
        if not (await agent.aget_state(config)).values:
            await agent.ainvoke({"messages": [("user", "Please delete customer C-7.")]}, config)
        if args.slow_resume:
            agent = SlowResume(agent, args.slow_resume)
        resumer = AsyncWebhookResumer(agent, client=reviews, secret=secret, thread_lock=lock)

        async def hooks(headers: dict[str, str], body: bytes) -> int:  # the service's async route
            try:
                if args.hold:
                    webhook_verify(secret=secret, headers=headers, body=body)
                    say("received")
                    await asyncio.Event().wait()
                resumed = await resumer(headers, body)
            except WebhookInvalid:
                return 400
            except Exception as exc:  # noqa: BLE001 - said, and answered 500: reviewqueue retries
                say("resumed error", repr(exc))
                return 500
            say("resumed", json.dumps(resumed.resumed))
            return 204

        server = await http_serve(args.port, hooks)
        say("serving")
        resumed = await ainterrupts_reconcile(reviews, agent, thread_ids=[args.thread], source="support-agent", thread_lock=lock)
        say("ready", json.dumps([r.resumed for r in resumed]))
        async with server:
            await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
