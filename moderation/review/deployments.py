"""LangGraph Server deployments: their interrupts become asks, and each decision resumes its thread once.

``deployment_register`` proves the URL, the API key and the graphs before writing anything
(``DeploymentInvalid`` otherwise).

Discovery (``deployment_webhook`` queues ``deployment_discover_task``; ``deployments_sweep``
polls): a thread's interrupts that no item asks about yet become one item of the pass-through
graph (``moderation.graphs.passthrough``), one ask per interrupt, submitted by the
deployment's service client under the key ``interrupts_key``. The database allows one item
per key and client and one ``DeploymentInterrupt`` row per interrupt, so racing discoverers
make one item. While an item of the thread has a decision not yet applied, discovery leaves
the thread alone. No database connection is held while the deployment is waited on.

An undecided item whose interrupts the thread no longer waits on (resumed elsewhere) is
withdrawn through ``item_withdraw`` with the note ``RESOLVED_OUTSIDE``. Resume and later
rounds: ``moderation.review.remote``; the guide: integrators/langgraph-deployments.md.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django_tasks import task
from django_tasks.base import TaskResultStatus
from django_tasks_db.models import DBTaskResult

from moderation.core.dbpool import connection_release
from moderation.delivery.models import ApiClient
from moderation.graphs.remote import (
    Connection,
    RemoteInterrupt,
    RemoteRefused,
    RemoteThread,
    RemoteUnavailable,
    remote_graphs_resolve,
    remote_interrupted,
    remote_thread_read,
)
from moderation.items.models import AskStatus, ItemStatus, QueueItem, ReviewAsk
from moderation.policies.models import Team
from moderation.policies.rules import PolicyInvalid, policy_parse
from moderation.review.decisions import item_withdraw
from moderation.review.models import Deployment, DeploymentInterrupt
from moderation.review.remote import RESOLVED_OUTSIDE, deployment_connection, deployment_item_interrupts
from moderation.review.submissions import IdempotencyConflict, Submission, SubmitResult, item_submit

logger = logging.getLogger(__name__)

TITLE_MAX = 200
# The task queue of threads named by webhooks, read from their deployment by a worker.
DISCOVER_QUEUE = "deployments"
# Below the default, as starts: a backlog of discoveries (a fleet's burst against a slow deployment) sorts after
# applies and deliveries in the queue's index, so claiming those never steps over it.
DISCOVER_PRIORITY = -10
# PostgreSQL's index of queued discoveries by thread (migration 0034): a webhook's check reads it, not the backlog.
DISCOVERY_QUEUED_INDEX = "reviewqueue_discovery_queued"


class DeploymentInvalid(Exception):
    """A registration refused, with why; nothing was created."""


@dataclass(frozen=True)
class GraphRoute:
    graph: str  # a graph id or an assistant id of the deployment
    team: str | None = None
    policy: dict[str, Any] | None = None


def deployment_register(*, name: str, url: str, api_key: str, routes: list[GraphRoute]) -> tuple[Deployment, str]:
    """Check everything, then create the deployment and its service client; returns (deployment, webhook secret).

    The secret is in the webhook URL the agent's runs name (``deployment_webhook_path``);
    only its SHA-256 is kept, so this is the one time it is seen. DeploymentInvalid, and
    nothing created, for a taken or malformed name, a malformed URL, an unknown team, a bad
    policy, and whatever the deployment says no to (unreachable, the key refused, a graph
    or assistant it does not serve).
    """
    _local_check(name=name, url=url, api_key=api_key, routes=routes)
    connection_release()
    try:
        matches = remote_graphs_resolve(connection=Connection(url=url, api_key=api_key), names=[r.graph for r in routes])
    except (RemoteUnavailable, RemoteRefused) as exc:
        raise DeploymentInvalid(str(exc)) from None
    mapping = {r.graph: {"match": matches[r.graph], "team": r.team, "policy": r.policy or {}} for r in routes}
    secret = secrets.token_urlsafe(32)
    with transaction.atomic():
        user = get_user_model()(username=f"langgraph.{name}")
        user.set_unusable_password()
        user.save()
        client = ApiClient.objects.create(name=f"langgraph.{name}", user=user, scopes=[])
        deployment = Deployment.objects.create(
            name=name, url=url, api_key=api_key, graphs=mapping, client=client, webhook_digest=_digest(secret)
        )
    return deployment, secret


def _local_check(*, name: str, url: str, api_key: str, routes: list[GraphRoute]) -> None:
    try:
        Deployment(name=name, url=url, api_key=api_key, graphs={}, webhook_digest="x").full_clean(exclude=["client", "graphs"])
    except ValidationError as exc:
        raise DeploymentInvalid("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from None
    if (
        ApiClient.objects.filter(name=f"langgraph.{name}").exists()
        or get_user_model().objects.filter(username=f"langgraph.{name}").exists()
    ):
        raise DeploymentInvalid(f"name: the account langgraph.{name} already exists")
    if not routes:
        raise DeploymentInvalid("graphs: name at least one graph or assistant of the deployment")
    for route in routes:
        if route.team and not Team.objects.filter(slug=route.team).exists():
            raise DeploymentInvalid(f"team: no team {route.team!r}")
        try:
            policy_parse(route.policy or {})
        except PolicyInvalid as exc:
            raise DeploymentInvalid(f"policy: {exc}") from None


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def deployment_webhook_path(*, deployment: Deployment, secret: str) -> str:
    return f"/api/v1/deployments/{deployment.name}/webhook?token={secret}"


def deployment_webhook_rotate(*, name: str) -> tuple[Deployment, str] | None:
    """A new webhook secret for the deployment ``name`` (None: no such deployment); the old one stops working at once.

    For a secret that leaked, e.g. through LangGraph Server's own logs of a run's webhook URL.
    Locks the deployment's row for the write only; the caller passes the new URL to the agent's runs.
    """
    secret = secrets.token_urlsafe(32)
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().filter(name=name).first()
        if deployment is None:
            return None
        deployment.webhook_digest = _digest(secret)
        deployment.save(update_fields=["webhook_digest"])
    return deployment, secret


def deployment_verify(*, name: str, token: str) -> Deployment | None:
    """The active deployment the webhook secret belongs to, or None (compared in constant time).

    Only its id and digest are read: a webhook burst pays for this on every request, and the
    request needs nothing else (the worker reads the rest when it discovers the thread)."""
    deployment = Deployment.objects.filter(name=name, is_active=True).only("id", "webhook_digest").first()
    expected = deployment.webhook_digest if deployment is not None else "0" * 64
    matches = hmac.compare_digest(_digest(token or ""), expected)
    return deployment if matches and deployment is not None else None


def deployment_webhook(*, deployment: Deployment, payload: Any) -> str:
    """A run of the deployment ended: queue the discovery of its thread and return the thread's id.

    No outbound call and no wait: a row inserted (none if that thread's discovery is still
    queued). The worker reads the thread from the deployment itself, never from the payload;
    with ``REVIEWQUEUE_APPLY_INLINE`` (no worker) this process does once the request's writes commit.
    """
    thread_id = payload.get("thread_id") if isinstance(payload, dict) else None
    if not isinstance(thread_id, str) or not thread_id or len(thread_id) > 128:
        raise ValidationError({"thread_id": "the webhook's body names no thread_id"})
    if settings.REVIEWQUEUE_APPLY_INLINE:
        transaction.on_commit(lambda: deployment_thread_discover(deployment_id=deployment.pk, thread_id=thread_id))
    elif not _discovery_queued(deployment_id=deployment.pk, thread_id=thread_id):
        deployment_discover_task.enqueue(deployment.pk, thread_id)
    return thread_id


def _discovery_queued(*, deployment_id: int, thread_id: str) -> bool:
    # Check-then-insert: two webhooks at once may both queue it; discovery is idempotent. On PostgreSQL an index
    # (DISCOVERY_QUEUED_INDEX) answers it, however long the backlog.
    return DBTaskResult.objects.filter(
        task_path=deployment_discover_task.module_path,
        status=TaskResultStatus.READY,
        args_kwargs__args=[deployment_id, thread_id],
    ).exists()


@task(queue_name=DISCOVER_QUEUE, priority=DISCOVER_PRIORITY)
def deployment_discover_task(deployment_id: int, thread_id: str) -> int:
    return sum(1 for found in deployment_thread_discover(deployment_id=deployment_id, thread_id=thread_id) if found.created)


def deployment_thread_discover(*, deployment_id: int, thread_id: str) -> list[SubmitResult]:
    """Discover one thread a webhook named (``thread_discover``); an unreachable deployment is logged and
    left to the sweep. The deployment is read with this thread's database connection given back."""
    deployment = Deployment.objects.filter(pk=deployment_id, is_active=True).select_related("client").first()
    if deployment is None:
        return []
    connection_release()
    try:
        thread = remote_thread_read(connection=deployment_connection(deployment), thread_id=thread_id)
    except (RemoteUnavailable, RemoteRefused) as exc:
        logger.warning("deployment %s, thread %s: left to the sweep: %s", deployment.name, thread_id, exc)
        return []
    if _route(deployment=deployment, thread=thread) is None:
        return []  # a run of a graph this deployment's connection does not review
    return thread_discover(deployment=deployment, thread=thread)


def _route(*, deployment: Deployment, thread: RemoteThread) -> dict[str, Any] | None:
    """The deployment's route for the thread: its assistant's, else its graph's; None if neither is reviewed."""
    for key in ("assistant_id", "graph_id"):
        route: dict[str, Any] | None = deployment.graphs.get(str(thread.metadata.get(key, "")))
        if route is not None and route.get("match", "graph_id") == key:
            return route
    return None


def deployments_sweep() -> int:
    """Discover every interrupt of every active deployment; return how many items it made. Each
    deployment's trouble is logged and kept on its row (``sweep_error``), never stops the others."""
    made = 0
    for deployment in Deployment.objects.filter(is_active=True).select_related("client"):
        error = ""
        try:
            made += deployment_sweep(deployment=deployment)
        except (RemoteUnavailable, RemoteRefused) as exc:
            error = str(exc)[:500]
            logger.warning("sweep of deployment %s: %s", deployment.name, error)
        Deployment.objects.filter(pk=deployment.pk).update(swept_at=timezone.now(), sweep_error=error)
    return made


def deployment_sweep(*, deployment: Deployment) -> int:
    connection = deployment_connection(deployment)
    made, seen = 0, set()
    for name, route in deployment.graphs.items():
        connection_release()
        for thread in remote_interrupted(connection=connection, match={route.get("match", "graph_id"): name}):
            seen.add(thread.thread_id)
            made += sum(1 for found in thread_discover(deployment=deployment, thread=thread) if found.created)
    # Threads with undecided items that no longer wait at an interrupt at all: resolved elsewhere.
    for thread_id in _undecided_threads(deployment=deployment) - seen:
        connection_release()
        thread = remote_thread_read(connection=connection, thread_id=thread_id)
        outside_resolutions_withdraw(deployment=deployment, thread=thread)
    return made


def _undecided_threads(*, deployment: Deployment) -> set[str]:
    rows = QueueItem.objects.filter(submitted_by=deployment.client, status=ItemStatus.PENDING).values_list(
        "graph_input", flat=True
    )
    return {thread_id for row in rows if (thread_id := (row.get("external") or {}).get("thread_id")) is not None}


def thread_discover(*, deployment: Deployment, thread: RemoteThread) -> list[SubmitResult]:
    """One item for the interrupts of the thread no item asks about yet (made, or the one another discoverer
    made); withdraw what it no longer waits on. A thread with a run in flight, or with a decision not yet
    applied (whose apply asks what it asks next), is left for the next look."""
    items = []
    if thread.status != "busy" and not _apply_owed(deployment=deployment, thread_id=thread.thread_id):
        # After _apply_owed: an apply recorded since has claimed what it asks next.
        asked = _asked_interrupts(deployment=deployment, thread_id=thread.thread_id)
        fresh = sorted((i for i in thread.interrupts if i.interrupt_id not in asked), key=lambda i: i.interrupt_id)
        if fresh:
            try:
                items.append(_interrupts_submit(deployment=deployment, thread=thread, interrupts=fresh))
            except IdempotencyConflict:
                pass  # made already from another reading (the deployment's mapping changed in between): it stays as made
            except IntegrityError:
                pass  # another item asks about one of them (made, or its round opened, since we looked)
            except ValidationError as exc:
                # These interrupts cannot be an item (its requested_by names nobody here, say).
                logger.warning(
                    "deployment %s, thread %s: interrupts %s not queued: %s",
                    deployment.name,
                    thread.thread_id,
                    ", ".join(i.interrupt_id for i in fresh),
                    "; ".join(exc.messages),
                )
    outside_resolutions_withdraw(deployment=deployment, thread=thread)
    return items


def _thread_items(*, deployment: Deployment, thread_id: str, **filters: Any) -> Any:
    return QueueItem.objects.filter(submitted_by=deployment.client, graph_input__external__thread_id=thread_id, **filters)


def _apply_owed(*, deployment: Deployment, thread_id: str) -> bool:
    """Whether an item of the thread has a decided (or withdrawn) ask not yet applied."""
    return (
        ReviewAsk.objects.filter(item__in=_thread_items(deployment=deployment, thread_id=thread_id), applied_at__isnull=True)
        .exclude(status=AskStatus.PENDING)
        .exists()
    )


def _asked_interrupts(*, deployment: Deployment, thread_id: str) -> set[str]:
    return set(
        DeploymentInterrupt.objects.filter(deployment=deployment, thread_id=thread_id).values_list("interrupt_id", flat=True)
    )


def interrupts_key(*, thread_id: str, interrupt_ids: list[str]) -> str:
    """The natural key of an item asking about these interrupts of the thread: the same set, the same key."""
    if len(interrupt_ids) == 1:
        return f"{thread_id}:{interrupt_ids[0]}"
    return f"{thread_id}:{hashlib.sha256(' '.join(sorted(interrupt_ids)).encode()).hexdigest()[:32]}"


def _interrupts_submit(*, deployment: Deployment, thread: RemoteThread, interrupts: list[RemoteInterrupt]) -> SubmitResult:
    route = _route(deployment=deployment, thread=thread) or {}
    requested_by = thread.metadata.get("requested_by")
    more = f" (and {len(interrupts) - 1} more)" if len(interrupts) > 1 else ""
    title = f"{thread.graph_id}: {_summary(interrupts[0].value)}"[: TITLE_MAX - len(more)] + more
    submission = Submission(
        title=title,
        body=f"Asked by the {thread.graph_id} agent of {deployment.name}, thread {thread.thread_id}.",
        source=f"langgraph:{deployment.name}"[:100],
        team=route.get("team"),
        policy=route.get("policy") or None,
        requested_by=requested_by if isinstance(requested_by, str) and requested_by else None,
        asks=[{"interrupt_id": i.interrupt_id, "value": i.value} for i in interrupts],
        external={"thread_id": thread.thread_id},
        external_id=interrupts_key(thread_id=thread.thread_id, interrupt_ids=[i.interrupt_id for i in interrupts]),
    )
    return item_submit(client=deployment.client, submission=submission)


def _summary(value: Any) -> str:
    if isinstance(value, dict):
        actions = value.get("action_requests")
        if isinstance(actions, list) and actions and isinstance(actions[0], dict):
            first = actions[0]
            return str(first.get("description") or first.get("name") or "an action")
        for key in ("question", "description", "message", "title"):
            if isinstance(text := value.get(key), str) and text:
                return text
    if isinstance(value, str) and value:
        return value
    return json.dumps(value, ensure_ascii=False)[:120]


def outside_resolutions_withdraw(*, deployment: Deployment, thread: RemoteThread) -> int:
    """Withdraw the undecided items of ``thread`` none of whose interrupts it still waits on; how many.

    Through the guard, as the deployment's account: a moderator deciding at that moment either
    wins first (then the apply finds the interrupts gone and records so) or loses and is told.
    An item the thread still waits on in part stays: its other asks can still be decided.
    A thread with a run in flight is left for the next look: its interrupts are not yet final.
    """
    if thread.status == "busy":
        return 0
    waiting = {i.interrupt_id for i in thread.interrupts}
    withdrawn = 0
    for item in _thread_items(deployment=deployment, thread_id=thread.thread_id, status=ItemStatus.PENDING):
        if not waiting & set(deployment_item_interrupts(item=item)):
            withdrawn += item_withdraw(item_public_id=item.public_id, by=deployment.client.user, reason=RESOLVED_OUTSIDE).won
    return withdrawn
