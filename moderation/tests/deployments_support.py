"""Helpers of the LangGraph deployment tests: an agent's side (threads, runs) and a connection of a test's own."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from langgraph_sdk import get_sync_client

from moderation.graphs.remote import Connection, remote_counts
from moderation.models import Deployment, QueueItem
from moderation.review.deployments import GraphRoute, deployment_register

_names = itertools.count()


def sdk(url: str):
    return get_sync_client(url=url, api_key=None)


def agent_run(url: str, graph: str, *, metadata: dict | None = None, webhook: str | None = None, **graph_input) -> str:
    """What the agent does: a thread of its own, a run to its first interrupt(s); the thread's id."""
    client = sdk(url)
    thread_id = client.threads.create(metadata=metadata or {})["thread_id"]
    client.runs.wait(thread_id, graph, input=graph_input, webhook=webhook)
    return thread_id


@dataclass
class Agents:
    """A deployment connected for one test: assistants of its own on the shared server, so the
    threads other tests left interrupted there are not its business."""

    deployment: Deployment
    secret: str
    hitl: str  # assistant ids
    fanout: str


def register(url: str, *, server_url: str | None = None, **route) -> Agents:
    """Connect ``url`` (the server, or a gate in front of it) with a new assistant of each graph."""
    client = sdk(server_url or url)
    hitl, fanout = (client.assistants.create(graph_id=g)["assistant_id"] for g in ("hitl", "fanout"))
    deployment, secret = deployment_register(name=f"agents{next(_names)}", url=url, api_key="",
                                             routes=[GraphRoute(graph=hitl, **route), GraphRoute(graph=fanout)])
    return Agents(deployment=deployment, secret=secret, hitl=hitl, fanout=fanout)


def items_of(thread_id: str) -> list[QueueItem]:
    return list(QueueItem.objects.filter(graph_input__external__thread_id=thread_id).order_by("id"))


def edit_to(name: str) -> list[dict]:
    return [{"type": "edit", "edited_action": {"name": "send_email", "args": {"to": f"{name}@example.com"}}}]


def remote_outcome(url: str, thread_id: str):
    return sdk(url).threads.get_state(thread_id)["values"].get("outcome")


def resumes_of(url: str, thread_id: str) -> tuple[int, int]:
    """(runs after the first, checkpoints after the first interrupt): a resume that took effect adds one of each."""
    runs, checkpoints = remote_counts(connection=Connection(url=url), thread_id=thread_id)
    return runs - 1, checkpoints - 2
