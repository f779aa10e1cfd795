"""A LangGraph Server deployment's threads, through the official SDK (``langgraph-sdk``).

The remote side of ``moderation.review.deployments``: reading which interrupts a
deployment's threads wait on, and resuming one. Nothing here knows items or locks; the
caller holds the thread's resume lock (``moderation.core.resumelock``) around a
read-then-resume, because LangGraph Server does not refuse two resumes of one interrupt:
a second one sent while the first runs gets 409 (``multitask_strategy="reject"``), and
one sent after the first finished is answered 200 with the first one's state.

Every connection to a deployment, its registration's first, goes only to a public address
or one in ``DEPLOYMENT_ALLOWED_NETWORKS`` (``moderation.core.addresses``, the rule webhooks
follow), checked on the address connected to; proxies from the environment are not used,
so the check sees the deployment's own address.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpcore
import httpx
from django.conf import settings
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient
from langgraph_sdk.errors import (
    APIConnectionError,
    AuthenticationError,
    NotFoundError,
    PermissionDeniedError,
)

from moderation.core.addresses import (
    AddressRefused,
    GuardedBackend,
    IPAddress,
    address_refusal,
)

# Seconds to connect; a resume's run may take as long as the agent's next steps.
CONNECT_TIMEOUT = 5.0
CONNECT_RETRIES = 1
RUN_TIMEOUT = 300.0
SEARCH_PAGE = 100


class RemoteUnavailable(Exception):
    """The deployment could not be reached or answered with a server error: try again later."""


class RemoteRefused(Exception):
    """The deployment answered, and said no (a bad key, an unknown assistant or graph)."""


class RemoteBusy(Exception):
    """A run is in flight on the thread (409): someone else is resuming it right now."""


@dataclass(frozen=True)
class RemoteInterrupt:
    interrupt_id: str
    value: Any


@dataclass(frozen=True)
class RemoteThread:
    thread_id: str
    status: str  # idle, busy, interrupted, error; or deleted
    graph_id: str
    metadata: dict[str, Any]
    interrupts: list[RemoteInterrupt] = field(default_factory=list)
    error: str | None = None


@dataclass(frozen=True)
class Connection:
    url: str
    api_key: str = ""

    def client(self, *, timeout: float = RUN_TIMEOUT) -> Any:
        """The SDK's client, as ``get_sync_client`` makes it but for its transport: one connection retry, not
        five with backoff (8 s per call against a deployment that is down); the apply's own backoff retries."""
        return SyncLangGraphClient(
            httpx.Client(
                base_url=self.url,
                headers=_headers(self.api_key),
                transport=_GuardedTransport(),
                trust_env=False,
                timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT),
            )
        )


def deployment_address_refusal(address: IPAddress) -> str | None:
    """Why a deployment may not be reached at ``address``, or None when it may."""
    refusal = address_refusal(address=address, allowed=settings.DEPLOYMENT_ALLOWED_NETWORKS)
    return (
        refusal and f"{refusal}; deployments are reached at public addresses only, unless DEPLOYMENT_ALLOWED_NETWORKS allows it"
    )


# Made once per process: every call to a deployment makes a client, and making a TLS context (the CA
# bundle loaded) or the SDK's own client took ~90 ms each on the loaded 2-core machine, three per
# client, most of an apply's own time (bench 27).
@functools.cache
def _tls() -> ssl.SSLContext:
    return httpx.create_ssl_context()


@functools.cache
def _headers(api_key: str) -> dict[str, str]:
    """The SDK's headers for ``api_key`` (its user agent, its key header), as its own client sends them."""
    # api_key=None: never the worker's own LANGSMITH_API_KEY for a deployment registered without one.
    made = get_sync_client(url="http://127.0.0.1", api_key=api_key or None)
    headers = dict(made.http.client.headers)
    made.close()
    return headers


class _GuardedTransport(httpx.HTTPTransport):
    def __init__(self) -> None:
        super().__init__(verify=_tls(), retries=CONNECT_RETRIES)
        # httpx takes no network backend of its own: its pool is made again with the one that checks addresses.
        self._pool = httpcore.ConnectionPool(
            ssl_context=_tls(), retries=CONNECT_RETRIES, network_backend=GuardedBackend(refusal=deployment_address_refusal)
        )


@contextmanager
def _calling(what: str) -> Iterator[None]:
    """Translate the SDK's and httpx's errors into ours: unreachable (try again later), busy (409) or refused."""
    try:
        yield
    except AddressRefused as exc:
        raise RemoteRefused(f"{what}: refused: {exc}") from exc
    except (APIConnectionError, httpx.TransportError) as exc:
        raise RemoteUnavailable(f"{what}: cannot reach the deployment: {exc}") from exc
    except (AuthenticationError, PermissionDeniedError) as exc:
        raise RemoteRefused(f"{what}: the deployment refused the API key ({exc.status_code})") from exc
    except httpx.HTTPStatusError as exc:  # the SDK's APIStatusError is one
        status = exc.response.status_code
        if status == 409:
            raise RemoteBusy(f"{what}: a run is in flight on the thread") from exc
        if status >= 500 or status == 429:
            raise RemoteUnavailable(f"{what}: the deployment answered {status}") from exc
        raise RemoteRefused(f"{what}: the deployment answered {status}: {_detail(exc)}") from exc


def _detail(exc: Exception) -> str:
    try:
        return str(exc.response.json().get("detail", ""))[:200]
    except Exception:  # noqa: BLE001 - any body at all: the status says enough
        return ""


def remote_graphs_resolve(*, connection: Connection, names: list[str]) -> dict[str, str]:
    """How each name (a graph id or an assistant id) picks its threads: ``graph_id`` or ``assistant_id``
    (the thread metadata key LangGraph Server sets); RemoteRefused naming one the deployment does not serve.

    Also proves the URL and the key: RemoteUnavailable / RemoteRefused when they are wrong.
    """
    with connection.client(timeout=30.0) as client, _calling("listing assistants"):
        assistants = client.assistants.search(limit=1000)
    assistant_ids = {a["assistant_id"] for a in assistants}
    graph_ids = {a["graph_id"] for a in assistants}
    resolved: dict[str, str] = {}
    for name in names:
        if name in graph_ids:
            resolved[name] = "graph_id"
        elif name in assistant_ids:
            resolved[name] = "assistant_id"
        else:
            known = ", ".join(sorted(graph_ids)) or "none"
            raise RemoteRefused(f"the deployment has no assistant or graph {name!r} (its graphs: {known})")
    return resolved


def remote_interrupted(*, connection: Connection, match: dict[str, str]) -> list[RemoteThread]:
    """Every thread whose metadata has ``match`` (``{"graph_id": ...}`` or ``{"assistant_id": ...}``) waiting at an interrupt."""
    threads: list[RemoteThread] = []
    with connection.client(timeout=60.0) as client, _calling("searching interrupted threads"):
        offset = 0
        while True:
            page = client.threads.search(status="interrupted", metadata=match, limit=SEARCH_PAGE, offset=offset)
            threads += [_thread(t) for t in page]
            if len(page) < SEARCH_PAGE:
                return threads
            offset += SEARCH_PAGE


def remote_thread_read(*, connection: Connection, thread_id: str) -> RemoteThread:
    """The thread now: its status, the interrupts it waits on and the error of its last run, if any."""
    with connection.client(timeout=60.0) as client, _calling("reading the thread"):
        try:
            thread = client.threads.get(thread_id)
        except NotFoundError:
            # Deleted: it waits on nothing any more.
            return RemoteThread(thread_id=thread_id, status="deleted", graph_id="", metadata={})
        error = None
        if thread["status"] == "error":
            state = client.threads.get_state(thread_id)
            error = next((t["error"] for t in state.get("tasks", []) if t.get("error")), None) or "the run failed"
    return _thread(thread, error=error)


def _thread(thread: dict[str, Any], *, error: str | None = None) -> RemoteThread:
    interrupts = [
        RemoteInterrupt(interrupt_id=i["id"], value=i["value"])
        for task in (thread.get("interrupts") or {}).values()
        for i in task
    ]
    metadata = thread.get("metadata") or {}
    return RemoteThread(
        thread_id=str(thread["thread_id"]),
        status=thread["status"],
        graph_id=str(metadata.get("graph_id", "")),
        metadata=metadata,
        interrupts=interrupts,
        error=error,
    )


def remote_resume(*, connection: Connection, thread: RemoteThread, answers: dict[str, Any]) -> None:
    """Resume ``thread`` with ``{interrupt_id: value}`` and wait for its run to end.

    ``multitask_strategy="reject"``: a run already in flight makes this RemoteBusy (409)
    instead of queueing a second resume behind it. The caller has just read the
    interrupts as pending, under the thread's resume lock.
    """
    assistant = str(thread.metadata.get("assistant_id") or thread.graph_id)
    with connection.client() as client, _calling("resuming the thread"):
        client.runs.wait(thread.thread_id, assistant, command={"resume": answers}, multitask_strategy="reject", raise_error=False)


def remote_thread_start(*, connection: Connection, assistant: str, graph_input: dict[str, Any]) -> str:
    """A new thread run with ``graph_input`` until it ends or pauses; its id (the race lab plays an agent with it)."""
    with connection.client() as client, _calling("starting a thread"):
        thread_id = client.threads.create()["thread_id"]
        client.runs.wait(thread_id, assistant, input=graph_input)
    return str(thread_id)


def remote_values(*, connection: Connection, thread_id: str) -> dict[str, Any]:
    with connection.client(timeout=60.0) as client, _calling("reading the thread's state"):
        return client.threads.get_state(thread_id)["values"] or {}


def remote_counts(*, connection: Connection, thread_id: str) -> tuple[int, int]:
    """How many runs the thread has had, and how many checkpoints it holds (for the tests and the race lab)."""
    with connection.client(timeout=60.0) as client, _calling("counting the thread's runs"):
        runs = client.runs.list(thread_id, limit=1000)
        history = client.threads.get_history(thread_id, limit=1000)
    return len(runs), len(history)
