"""A LangChain agent in its own OS process, as a customer's service runs it (e2e/test_remote_agent.py).

``create_agent`` + ``HumanInTheLoopMiddleware`` with a scripted model that proposes
``delete_customer``; its own SQLite checkpointer; its own small HTTP server receiving
reviewqueue's webhooks. It uses only ``reviewqueue-client``: no Django, no reviewqueue
code. On start it runs the agent (unless its thread already waits), forwards the pending
interrupt, prints ``ready`` and serves; each run of the tool appends its arguments to
``--effects`` (the side effect the test counts). After each resume it reports the run's
outcome back (done, or failed with its tool's error), which the item page shows.

REVIEWQUEUE_URL, REVIEWQUEUE_TOKEN and REVIEWQUEUE_WEBHOOK_SECRET come from the environment.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver

from reviewqueue_client import ReviewQueue, WebhookInvalid
from reviewqueue_client.langgraph import WebhookResumer, file_thread_lock, interrupts_forward

THREAD = "support-thread-1"


class ScriptedModel(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


def agent_build(*, checkpoints: str, effects: str) -> Any:
    @tool
    def delete_customer(customer_id: str) -> str:
        """Delete a customer."""
        with open(effects, "a") as out:
            out.write(json.dumps({"customer_id": customer_id}) + "\n")
        return f"deleted {customer_id}"

    model = ScriptedModel(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "delete_customer", "args": {"customer_id": "C-7"}, "id": "call-1"}]),
        AIMessage(content="done"),
    ]))
    return create_agent(
        model=model, tools=[delete_customer],
        checkpointer=SqliteSaver(sqlite3.connect(checkpoints, check_same_thread=False)),
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"delete_customer": {"allowed_decisions": ["approve", "edit", "reject"]}})],
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", required=True)
    args = parser.parse_args()
    agent = agent_build(checkpoints=os.path.join(args.dir, "agent.db"), effects=os.path.join(args.dir, "effects.jsonl"))
    config = {"configurable": {"thread_id": THREAD}}
    if not agent.get_state(config).values:
        agent.invoke({"messages": [("user", "Please delete customer C-7.")]}, config)
    reviews = ReviewQueue(os.environ["REVIEWQUEUE_URL"], os.environ["REVIEWQUEUE_TOKEN"])
    interrupts_forward(reviews, agent, thread_id=THREAD, source="support-agent")
    resumer = WebhookResumer(agent, secret=os.environ["REVIEWQUEUE_WEBHOOK_SECRET"],
                             thread_lock=file_thread_lock(os.path.join(args.dir, "locks")), client=reviews)

    class Hooks(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            try:
                resumer(dict(self.headers), body)
                self.send_response(204)
            except WebhookInvalid:
                self.send_response(400)
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Hooks)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
