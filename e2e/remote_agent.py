"""A LangChain agent in its own OS process, as a customer's service runs it (e2e/test_remote_agent.py).

``create_agent`` + ``HumanInTheLoopMiddleware`` with a scripted model that proposes
``delete_customer``; its own SQLite checkpointer; its own small HTTP server receiving
reviewqueue's webhooks. It uses only ``reviewqueue-client``: no Django, no reviewqueue
code. On start it runs the agent (unless its thread already ran: a replica, or a restart),
serves webhooks (prints ``serving``), reconciles (forwards what its thread waits on and
resumes it with a decision already made: prints ``ready`` and what it resumed), and with
``--poll`` long-polls each forwarded item too. Each run of the tool appends its arguments
to ``effects.jsonl`` in ``--dir`` (the side effect the tests count); each webhook and
long-poll it acts on prints ``resumed true`` or ``resumed false`` (a no-op). After each
resume it reports the run's outcome back (done, or failed with its tool's error), which the
item page shows.

Replicas are processes on the same ``--dir`` (one checkpointer); the race tests
(e2e/test_agent_side.py) add ``--slow-resume`` (each resume starts that long after the
check that allowed it, as a slow checkpointer or a pause makes it) and ``--tool-seconds``
(a slow tool, so a resume's run lasts): together a wide window for a second resume;
``--naive`` (resume without the per-thread lock: the negative controls) and
``--hold`` (a verified decision is received, then never acted on: the moment to kill it).

REVIEWQUEUE_URL, REVIEWQUEUE_TOKEN and REVIEWQUEUE_WEBHOOK_SECRET come from the environment.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver

from reviewqueue_client import ReviewQueue, WebhookInvalid, webhook_verify
from reviewqueue_client.langgraph import WebhookResumer, decision_wait_resume, interrupts_forward, interrupts_reconcile

THREAD = "support-thread-1"
_said = threading.Lock()


def say(*words: str) -> None:
    """One whole line on stdout (the tests read them), whichever thread says it."""
    with _said:
        print(*words, flush=True)


NO_LOCK = lambda thread_id: contextlib.nullcontext()  # noqa: E731 - no lock at all: the negative controls


class ScriptedModel(GenericFakeChatModel):
    """Proposes the call until a tool answered, then is done: read off the messages, so a
    replica or a restarted process (a fresh model) carries on where the thread is."""

    messages: Any = iter(())

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        answered = any(isinstance(m, ToolMessage) for m in messages)
        call = {"name": "delete_customer", "args": {"customer_id": "C-7", "grace_days": 30}, "id": "call-1"}
        reply = AIMessage(content="done") if answered else AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])


class SlowResume:
    """The agent, each resume starting ``seconds`` after the check that allowed it."""

    def __init__(self, agent: Any, seconds: float) -> None:
        self.agent = agent
        self.seconds = seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(self.agent, name)

    def invoke(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(self.seconds)
        return self.agent.invoke(*args, **kwargs)

    async def ainvoke(self, *args: Any, **kwargs: Any) -> Any:  # e2e/async_agent.py's
        await asyncio.sleep(self.seconds)
        return await self.agent.ainvoke(*args, **kwargs)


def deletion_record(effects: str, *, customer_id: str, grace_days: int) -> str:
    """The tool's one side effect, a line in ``effects`` the tests count; its answer to the model."""
    with open(effects, "a") as out:
        out.write(json.dumps({"customer_id": customer_id, "grace_days": grace_days}) + "\n")
    return f"deleted {customer_id}"


def agent_create(*, delete_customer: Any, checkpointer: Any) -> Any:
    """The agent both processes run (this one and e2e/async_agent.py): its tool behind LangChain's human-in-the-loop."""
    return create_agent(
        model=ScriptedModel(),
        tools=[delete_customer],
        checkpointer=checkpointer,
        middleware=[
            HumanInTheLoopMiddleware(interrupt_on={"delete_customer": {"allowed_decisions": ["approve", "edit", "reject"]}})
        ],
    )


def agent_arguments() -> argparse.ArgumentParser:
    """The options both agent processes take."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--thread", default=THREAD)
    parser.add_argument("--slow-resume", type=float, default=0.0)
    parser.add_argument("--tool-seconds", type=float, default=0.0)
    parser.add_argument("--naive", action="store_true")
    parser.add_argument("--hold", action="store_true")
    return parser


def agent_build(*, checkpoints: str, effects: str, tool_seconds: float = 0.0) -> Any:
    @tool
    def delete_customer(customer_id: str, grace_days: int = 30) -> str:
        """Delete a customer, after a grace period."""
        time.sleep(tool_seconds)
        return deletion_record(effects, customer_id=customer_id, grace_days=grace_days)

    checkpointer = SqliteSaver(sqlite3.connect(checkpoints, check_same_thread=False))
    return agent_create(delete_customer=delete_customer, checkpointer=checkpointer)


def main() -> None:
    parser = agent_arguments()
    parser.add_argument("--poll", action="store_true")
    args = parser.parse_args()
    agent = agent_build(
        checkpoints=os.path.join(args.dir, "agent.db"),
        effects=os.path.join(args.dir, "effects.jsonl"),
        tool_seconds=args.tool_seconds,
    )
    config = {"configurable": {"thread_id": args.thread}}
    if not agent.get_state(config).values:
        agent.invoke({"messages": [("user", "Please delete customer C-7.")]}, config)
    if args.slow_resume:
        agent = SlowResume(agent, args.slow_resume)
    lock = NO_LOCK if args.naive else None  # None: the lock the SQLite checkpointer shares with the replicas
    reviews = ReviewQueue(os.environ["REVIEWQUEUE_URL"], os.environ["REVIEWQUEUE_TOKEN"])
    resumer = WebhookResumer(agent, secret=os.environ["REVIEWQUEUE_WEBHOOK_SECRET"], thread_lock=lock, client=reviews)

    class Hooks(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            try:
                if args.hold:
                    webhook_verify(secret=resumer.secret, headers=dict(self.headers), body=body)
                    say("received")
                    threading.Event().wait()
                resumed = resumer(dict(self.headers), body)
                say("resumed", json.dumps(resumed.resumed))
                self.send_response(204)
            except WebhookInvalid:
                self.send_response(400)
            except Exception as exc:  # noqa: BLE001 - said, and answered 500: reviewqueue retries
                say("resumed error", repr(exc))
                self.send_response(500)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Hooks)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    say("serving")
    with reviews:
        resumed = interrupts_reconcile(reviews, agent, thread_ids=[args.thread], source="support-agent", thread_lock=lock)
        say("ready", json.dumps([r.resumed for r in resumed]))
        if args.poll:
            for item in interrupts_forward(reviews, agent, thread_id=args.thread, source="support-agent"):
                resumed = decision_wait_resume(reviews, agent, item_id=item.id, timeout=600, thread_lock=lock)
                say("resumed", json.dumps(resumed.resumed))
        threading.Event().wait()


if __name__ == "__main__":
    main()
