"""Creating queue items: each gets its own graph thread, paused at review."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from moderation.core.resumelock import thread_resume_lock
from moderation.core.text import TextInvalid, text_check
from moderation.delivery.models import WebhookEvent
from moderation.delivery.outbox import delivery_record, item_payload
from moderation.graphs.asks import ask_spec_from_interrupt
from moderation.graphs.passthrough import NAME as ASK_GRAPH
from moderation.graphs.registry import graph_name_validate
from moderation.graphs.runtime import GraphStartRefused, GraphState, graph_start, graph_state_read
from moderation.items.models import QueueItem
from moderation.policies.rules import Policy, PolicyInvalid, ask_deadline_weakening
from moderation.policies.teams import item_policy_resolve
from moderation.records import events
from moderation.records.counts import Counted, counts_apply, item_counted
from moderation.review.apply import asks_create
from moderation.review.itemrow import item_row_lock
from moderation.review.remote import deployment_item_entered

# The start state's own fields, which no input may set: the graph (its pre-screen, say) sees what moderators read.
START_FIELDS = ("item_id", "title", "body", "source")


def item_body_check(*, body: str) -> None:
    """Refuse a body longer than ITEM_BODY_MAX_LENGTH, naming the limit."""
    limit = settings.ITEM_BODY_MAX_LENGTH
    if len(body) > limit:
        raise ValidationError({"body": f"body is {len(body):,} characters; the limit is {limit:,} (ITEM_BODY_MAX_LENGTH)"})


def item_texts_check(**texts: str | None) -> None:
    """Each given text (None: not given) storable; ValidationError naming the first that is not.

    Called before the lookups the texts feed (team, source, requester), which PostgreSQL
    would fail on a NUL with a 500.
    """
    for field, text in texts.items():
        try:
            text_check(text=text or "", field=field)
        except TextInvalid as exc:
            raise ValidationError({field: f"{field} {exc}"}) from None


def item_requester_get(*, username: str | None) -> User | None:
    """The user an item is requested on behalf of (four eyes: they may never decide it), by username."""
    if username is None:
        return None
    item_texts_check(requested_by=username)
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise ValidationError({"requested_by": f"no user named {username!r} on this server"})
    return user


def item_create(
    *,
    title: str,
    body: str,
    source: str,
    graph: str | None = None,
    graph_input: dict[str, Any] | None = None,
    team: str | None = None,
    policy: Any = None,
    requested_by: User | None = None,
) -> QueueItem:
    """Create an item and run its graph (``graph``, a ``REVIEWQUEUE_GRAPHS`` name; the
    moderation graph by default) to its first interrupt(s), one ``ReviewAsk`` each.

    ``graph_input`` joins ``{item_id, title, body, source}`` in the graph's start state
    (an agent's ``messages``, say), and may not set them. An unknown graph is a ValidationError.

    ``team`` (a team's slug), ``policy`` (``moderation.policies.rules``) and
    ``requested_by`` (who asked for the decision, and so may never make it): see
    ``item_policy_resolve``; a team or policy that cannot be satisfied is refused.

    Raises ValidationError (and creates nothing: no row, no graph thread) for an empty,
    oversized or NUL-bearing field, and for a start the graph refuses (it raised at its
    start: ``graph_start``), naming ``input`` with the graph's message.

    The graph starts before the row is written and outside any transaction of ours, so
    pre-screening a person's text never holds the database's write lock (on SQLite,
    IMMEDIATE transactions take it, for the whole database, at BEGIN). If the graph
    cannot start, no item appears; a graph started for a row whose insert then fails is
    an orphan thread nobody can reach, which is harmless.
    """
    return _item_start(
        title=title,
        body=body,
        source=source,
        is_lab=False,
        graph=graph,
        graph_input=graph_input or {},
        team=team,
        policy=policy,
        requested_by=requested_by,
    )


def submitted_item_create(
    *, title: str, body: str, source: str, public_id: uuid.UUID | None, fields: dict[str, Any]
) -> QueueItem:
    """An API client's item (moderation.review.submissions): a caller-chosen public id and the API's columns."""
    return _item_start(title=title, body=body, source=source, is_lab=False, public_id=public_id, **fields)


def lab_item_create(
    *,
    title: str,
    body: str,
    graph: str | None = None,
    graph_input: dict[str, Any] | None = None,
    team: str | None = None,
    policy: Any = None,
) -> QueueItem:
    """A race-lab item (``is_lab``): the only way to make one; moderation.lab is its only caller.

    ``team`` and ``policy`` as for ``item_create`` (the lab names its own team, so a real
    team claiming the source or the graph never takes its items)."""
    return _item_start(
        title=title,
        body=body,
        source="racelab",
        is_lab=True,
        graph=graph,
        graph_input=graph_input or {},
        team=team,
        policy=policy,
    )


def _item_start(
    *, title: str, body: str, source: str, is_lab: bool, public_id: uuid.UUID | None = None, **fields: Any
) -> QueueItem:
    """``public_id``: chosen by the caller when its thread must be known in advance
    (moderation.review.submissions); ``fields``: the API's columns (external_id, metadata, ...)."""
    chosen_id = public_id is not None
    item = item_build(title=title, body=body, source=source, is_lab=is_lab, public_id=public_id, **fields)
    try:
        if chosen_id:
            # Concurrent submits of one key share this thread (moderation.review.submissions). Two
            # starts on it would each raise interrupts of their own ids, and the row's asks
            # could name the one the thread no longer waits on: one start runs, under the
            # thread's lock, and whoever comes after it joins it or finds its row.
            with thread_resume_lock(item.thread_id, timeout=settings.APPLY_LOCK_TIMEOUT):
                if QueueItem.objects.filter(public_id=item.public_id).exists():
                    raise IntegrityError(f"item {item.public_id} already exists")
                _item_insert(item=item, started=item_graph_run(item=item))
        else:
            started = graph_start(name=item.graph, thread_id=item.thread_id, state=item_start_state(item=item))
            _item_insert(item=item, started=started)
    except GraphStartRefused as exc:  # the submitter's error; the failed start saved nothing
        raise ValidationError({"input": str(exc)}) from None
    return item


def _ask_deadline_check(*, graph_input: dict[str, Any], policy: Policy) -> None:
    """A client's ask's own ``deadline_seconds`` obeys the rule a submitted policy does (``ask_deadline_weakening``):
    refused at submit. A deployment's interrupts (``asks``) are queued, their thread waiting on them, and
    ``asks_create`` keeps the policy's deadline over a weaker one of theirs."""
    if "ask" not in graph_input:
        return
    seconds = ask_spec_from_interrupt(value=graph_input["ask"]).deadline_seconds
    if seconds and (why := ask_deadline_weakening(policy=policy, seconds=seconds)):
        raise ValidationError(
            {"ask.deadline_seconds": f"an ask's own deadline may make its item's policy stricter, never weaker: {why}"}
        )


def item_build(
    *, title: str, body: str, source: str, is_lab: bool, public_id: uuid.UUID | None = None, **fields: Any
) -> QueueItem:
    """The unsaved row of a new item, every field checked: ValidationError names the first bad one.

    Its team and policy are resolved here (``item_policy_resolve``), so a team or policy
    that cannot be satisfied is refused before anything starts.
    """
    item_texts_check(title=title, body=body, source=source, team=fields.get("team"))
    item_body_check(body=body)
    try:
        fields["graph"] = graph_name_validate(name=fields.get("graph"))
    except ValueError as exc:
        raise ValidationError({"graph": str(exc)}) from None
    try:
        team, policy = item_policy_resolve(
            slug=fields.pop("team", None),
            source=source,
            graph=fields["graph"],
            policy=fields.pop("policy", None),
            requester=fields.get("requested_by"),
        )
    except PolicyInvalid as exc:
        raise ValidationError({exc.field: str(exc)}) from None
    fields.update(team=team, policy=policy.as_json())
    graph_input = fields.setdefault("graph_input", {}) or {}
    if not isinstance(graph_input, dict):
        raise ValidationError({"input": "a graph's input must be a JSON object"})
    if fields["graph"] == ASK_GRAPH:
        _ask_deadline_check(graph_input=graph_input, policy=policy)
    if taken := [key for key in START_FIELDS if key in graph_input]:
        raise ValidationError(
            {
                "input": f"input may not set {', '.join(taken)}: the graph starts from the item's own "
                "(what moderators read); send them as the item's fields"
            }
        )
    public_id = public_id or uuid.uuid4()
    item = QueueItem(
        public_id=public_id,
        title=title,
        body=body,
        source=source,
        thread_id=f"item-{public_id}",
        is_lab=is_lab,
        **fields,
    )
    # Uniqueness of public_id and of the per-client keys (constraints with submitted_by)
    # is left to the insert: moderation.review.submissions expects it to fail for a concurrent
    # duplicate, and a check here would only race with it.
    # Not the table's check constraints: Django evaluates each in a query of its own (three
    # round trips, a fifth of an item's start on PostgreSQL), and the insert enforces them
    # anyway. A new item's status is ours to set; its priority, the one a caller chooses,
    # was checked with the submission (moderation.review.submissions.submission_check).
    item.full_clean(
        exclude=["public_id", "thread_id", "review_request", "submitted_by", "graph", "graph_input"], validate_constraints=False
    )
    return item


def item_start_state(*, item: QueueItem) -> dict[str, Any]:
    """What the item's graph starts from: its ``graph_input`` and, over it, its own content."""
    return {
        **(item.graph_input or {}),
        "item_id": str(item.public_id),
        "title": item.title,
        "body": item.body,
        "source": item.source,
    }


def item_graph_run(*, item: QueueItem) -> GraphState:
    """Its graph's state at its first interrupt(s): started now, or as an earlier start left it.

    The caller holds the thread's resume lock, so the graph is started at most once:
    a start whose rows were never written (a refused insert, a killed worker) is
    joined, never run a second time with interrupts of other ids.
    """
    started = graph_state_read(name=item.graph, thread_id=item.thread_id)
    if started.asks:
        return started
    return graph_start(name=item.graph, thread_id=item.thread_id, state=item_start_state(item=item))


def item_started_fill(*, item: QueueItem, started: GraphState) -> None:
    """What the graph's start tells the row: pre-screen risk and flags, the first ask's request."""
    values, asked = started.values, started.asks
    item.risk = max(-1000, min(1000, int(values.get("risk") or 0)))
    item.flags = [str(f) for f in values.get("flags") or []]
    item.review_request = asked[0].spec.as_payload()


def item_queue_entered(*, item: QueueItem, started: GraphState, before: Counted | None) -> None:
    """In the transaction that writes the started item's row: its first asks, its count
    (moved from ``before``), its ``item.created`` deliveries and live event."""
    asks_create(item=item, asked=started.asks, round=1)
    deployment_item_entered(item=item)
    counts_apply(before=before, after=item_counted(item))
    delivery_record(event=WebhookEvent.ITEM_CREATED, item=item, payload=item_payload(item=item))
    # After the caller's transaction, if there is one; at once otherwise.
    events.after_commit(lambda: events.item_created_broadcast(item=item))


def _item_insert(*, item: QueueItem, started: GraphState) -> None:
    item_started_fill(item=item, started=started)
    # The row, its asks and its item.created deliveries commit together (the graph stays outside).
    with transaction.atomic():
        item.save(force_insert=True)
        item_queue_entered(item=item, started=started, before=None)


CONTENT_FIELDS = ("title", "body", "source")


class ItemNotEditable(Exception):
    """The item is no longer pending: its content is what was (or is being) decided."""


def item_content_edit(*, item_pk: int, changes: dict[str, str]) -> dict[str, str]:
    """Change a pending item's title, body or source; return the values they replaced.

    Checked under the row lock, so an edit can never land on an item decided meanwhile
    (the audit log signs the content each decision was made on).
    """
    unknown = sorted(set(changes) - set(CONTENT_FIELDS))
    if unknown:
        raise ValueError(f"only {', '.join(CONTENT_FIELDS)} can be edited, not {', '.join(unknown)}")
    if "body" in changes:
        item_body_check(body=changes["body"])
    with transaction.atomic():
        item = item_row_lock(pk=item_pk)
        if not item.is_pending:
            raise ItemNotEditable(f"the item is {item.status}; its content can no longer change")
        before = {field: getattr(item, field) for field in changes}
        for field, value in changes.items():
            setattr(item, field, value)
        item.full_clean(exclude=["thread_id", "review_request"])
        if changes:
            item.save(update_fields=list(changes))
    return before
