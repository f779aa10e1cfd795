"""Helpers of the LangGraph deployment tests: an agent's side (threads, runs) and a connection of a test's own."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.db import connection
from langgraph_sdk import get_sync_client

from e2e.children import children_adopt, children_forget
from e2e.forked import ForkedProcess
from moderation.graphs.remote import Connection, remote_counts
from moderation.items.models import QueueItem
from moderation.review.deployments import GraphRoute, deployment_register
from moderation.review.models import Deployment

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
    deployment, secret = deployment_register(
        name=f"agents{next(_names)}", url=url, api_key="", routes=[GraphRoute(graph=hitl, **route), GraphRoute(graph=fanout)]
    )
    return Agents(deployment=deployment, secret=secret, hitl=hitl, fanout=fanout)


def process_env() -> dict[str, str]:
    """The environment of a ``manage.py`` process of this test's own: its database (a test with
    ``transaction=True``, so what the test writes is committed), its Redis and settings."""
    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        url = f"sqlite:///{db['NAME']}"
    else:
        auth = quote(db["USER"]) + (f":{quote(db['PASSWORD'])}" if db.get("PASSWORD") else "")
        url = f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    return {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "reviewqueue.settings",
        "DEBUG": "true",
        "PYTHONUNBUFFERED": "1",
    }


def discovery_processes(*, roles: list[str], deployment: Deployment, thread_ids: list[str], workdir: Path) -> None:
    """One ``moderation.tests.discovery_process`` per role, racing (released together); fails with a
    process's output if one fails."""
    env = process_env()
    logs = [workdir / f"discovery-{n}-{role}.log" for n, role in enumerate(roles)]
    processes = [
        ForkedProcess(
            ["-m", "moderation.tests.discovery_process", role, str(workdir), deployment.name, *thread_ids],
            env=env,
            cwd=settings.BASE_DIR,
            stdout=log,
            new_session=False,
        )
        for role, log in zip(roles, logs, strict=True)
    ]
    for role, process, log in zip(roles, processes, logs, strict=True):
        try:
            code = process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        assert code == 0, f"the {role} process failed:\n{log.read_text(errors='replace')}"


@contextmanager
def db_worker(*, log: Path, **env: str) -> Iterator[ForkedProcess]:
    """A real ``manage.py db_worker`` (its sweep threads and all) on this test's database, with ``env``
    over it (a short ``LANGGRAPH_SWEEP_INTERVAL``); stopped (SIGTERM, then SIGKILL) on the way out."""
    worker = ForkedProcess(
        ["manage.py", "db_worker", "--no-reload", "--no-startup-delay", "--interval", "0.1"],
        env={**process_env(), "REVIEWQUEUE_APPLY_INLINE": "0", **env},
        cwd=settings.BASE_DIR,
        stdout=log,
    )
    children_adopt(worker)
    try:
        yield worker
    finally:
        children_forget(worker)
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=15)


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
