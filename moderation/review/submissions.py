"""Items submitted by service clients (/api/v1): validated, idempotent, one graph thread each.

A submit's key is its ``Idempotency-Key`` header, else its ``external_id`` (unique per client
in the database). The graph starts before the row is inserted, outside any transaction, so
the item's public id, and so its thread id, is derived from (client, key, content digest):

- a retry after the first submit committed finds the row and starts nothing;
- concurrent submits of one key and content share one thread, taken in turn under its
  resume lock: the graph runs once and every submit answers with the one item;
- a concurrent submit of the key with other content derives another thread, loses the insert
  and is refused (``IdempotencyConflict``).

The graph, its ``input`` and the approval policy (``team``, ``policy``, ``requested_by``) are
part of the digest. An ``ask`` (one interrupt) or ``asks`` (a deployment's parallel
interrupts) runs the pass-through graph (``moderation.graphs.passthrough``). Every field is
checked before anything starts; a refused submit changes nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q

from moderation.core.text import TextInvalid, text_check
from moderation.delivery.models import ApiClient
from moderation.graphs.asks import AskInvalid, ask_schemas_check
from moderation.graphs.passthrough import NAME as ASK_GRAPH
from moderation.graphs.registry import DEFAULT_GRAPH, UnknownGraph, graph_name_validate
from moderation.items.models import PRIORITY_MAX, PRIORITY_MIN, ItemStatus, QueueItem
from moderation.records.counts import counts_apply_many, item_counted
from moderation.review.items import (
    item_body_check,
    item_build,
    item_requester_get,
    item_texts_check,
    submitted_item_create,
)
from moderation.review.starts import items_start_enqueue

METADATA_MAX_BYTES = 16 * 1024
METADATA_MAX_DEPTH = 5
# A graph's input is held to the same limits: it is stored on the item and in every checkpoint.
INPUT_MAX_BYTES = METADATA_MAX_BYTES
INPUT_MAX_DEPTH = METADATA_MAX_DEPTH
KEY_MAX_LENGTH = 200
# An ask carries an agent's tool arguments and, per action, a JSON Schema for them
# (``args_schema``): nested objects, ``$defs``, ``anyOf`` and ``items`` go well past
# metadata's 5 levels. 32 levels hold any schema a tool's arguments need; the total size
# bound, not the depth, is what keeps a hostile ask's cost small.
ASK_MAX_BYTES = 64 * 1024
ASK_MAX_DEPTH = 32
# The caller's own ids; thread and interrupt id joined are the natural key (KEY_MAX_LENGTH).
EXTERNAL_MAX_LENGTHS = {"thread_id": 128, "interrupt_id": 64, "run_id": 64}
# An ask's context (why the agent asks): its last messages and/or a Markdown summary, shown on the item's page.
CONTEXT_MESSAGES_MAX = 20
CONTEXT_MESSAGE_MAX_LENGTH = 4000
CONTEXT_SUMMARY_MAX_LENGTH = 8000
CONTEXT_MAX_BYTES = 32 * 1024
# Parallel interrupts of one agent thread asked in one item (each an ask of ASK_MAX_BYTES at most).
ASKS_MAX = 20
_NAMESPACE = uuid.UUID("5b0f7a52-3a0e-4c55-9f4e-2f1f4a8f61c3")


class IdempotencyConflict(Exception):
    """The key was already used for different content."""


@dataclass(frozen=True)
class Submission:
    title: str
    body: str
    source: str
    external_id: str | None = None
    metadata: dict[str, Any] | None = None
    priority: int = 0
    graph: str | None = None
    graph_input: dict[str, Any] | None = None
    team: str | None = None  # a Team's slug
    policy: dict[str, Any] | None = None  # over the team's (moderation.policies.rules.policy_parse)
    requested_by: str | None = None  # the username on whose behalf the client submits
    ask: Any = None  # an agent's interrupt value: the item runs the pass-through graph (ASK_GRAPH)
    external: dict[str, str] | None = None  # the asking agent's {thread_id, interrupt_id, run_id}
    asks: list[dict[str, Any]] | None = None  # several interrupts, [{"interrupt_id", "value"}]: one ask each
    context: dict[str, Any] | None = None  # an ask's {summary, messages}: why the agent asks (CONTEXT_*)

    def digest(self) -> str:
        content: list[Any] = [self.title, self.body, self.source, self.external_id, self.metadata or {}, self.priority]
        # A submit on the default graph without input digests as it did before graphs could
        # be named, so a retry of an item submitted before the upgrade still matches it.
        if (self.graph or DEFAULT_GRAPH) != DEFAULT_GRAPH or self.graph_input:
            content += [self.graph or DEFAULT_GRAPH, self.graph_input or {}]
        # Likewise without a policy; an object, never a string, so it cannot pass for a graph's name.
        approval = {"team": self.team, "policy": self.policy or None, "requested_by": self.requested_by}
        if any(v is not None for v in approval.values()):
            content.append({k: v for k, v in approval.items() if v is not None})
        canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class SubmitResult:
    item: QueueItem
    created: bool


def metadata_check(*, metadata: Any) -> None:
    """A JSON object of at most METADATA_MAX_BYTES serialized, METADATA_MAX_DEPTH deep, no NUL anywhere."""
    _json_object_check(metadata, field="metadata", max_bytes=METADATA_MAX_BYTES, max_depth=METADATA_MAX_DEPTH)


def graph_input_check(*, graph_input: Any) -> None:
    """The graph's input, held to metadata's rules (INPUT_MAX_BYTES, INPUT_MAX_DEPTH, no NUL)."""
    _json_object_check(graph_input, field="input", max_bytes=INPUT_MAX_BYTES, max_depth=INPUT_MAX_DEPTH)


def _json_object_check(value: Any, *, field: str, max_bytes: int, max_depth: int) -> None:
    if not isinstance(value, dict):
        raise ValidationError({field: f"{field} must be a JSON object"})
    _json_value_check(value, field=field, max_bytes=max_bytes, max_depth=max_depth)


def _json_value_check(value: Any, *, field: str, max_bytes: int, max_depth: int) -> None:
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    if size > max_bytes:
        raise ValidationError({field: f"{field} is {size:,} bytes as JSON; the limit is {max_bytes:,}"})
    _json_walk(value, field=field, max_depth=max_depth, depth=1)


def _json_walk(value: Any, *, field: str, max_depth: int, depth: int) -> None:
    if isinstance(value, (dict, list)):
        if depth > max_depth:
            raise ValidationError({field: f"{field} nests deeper than {max_depth} levels"})
        children = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in children:
            if isinstance(key, str):
                _json_text_check(key, field=field, what="keys")
            _json_walk(child, field=field, max_depth=max_depth, depth=depth + 1)
    elif isinstance(value, str):
        _json_text_check(value, field=field, what="strings")


def _json_text_check(text: str, *, field: str, what: str) -> None:
    try:
        text_check(text=text, field=field)
    except TextInvalid as exc:  # jsonb cannot hold \u0000 either
        raise ValidationError({field: f"{field} {what} {exc}"}) from None


def ask_check(*, submission: Submission) -> None:
    """An ask (or ``asks``) and its ``external`` ids (ASK_MAX_BYTES, ASK_MAX_DEPTH, no NUL); they leave ``graph``
    and ``input`` to it."""
    if submission.ask is None and submission.asks is None:
        if submission.external is None:
            raise ValidationError({"context": "context says why an agent asks; send it with ask"})
        raise ValidationError({"external": "external names the agent behind an ask; send it with ask"})
    if submission.context is not None:
        if submission.ask is None:
            raise ValidationError({"context": "context goes with one ask, not with asks"})
        _context_check(submission.context)
    if submission.ask is not None and submission.asks is not None:
        raise ValidationError({"asks": "send one ask, or several asks, not both"})
    if submission.graph not in (None, ASK_GRAPH):
        raise ValidationError({"graph": f"an ask runs under the built-in {ASK_GRAPH!r} graph; leave graph out"})
    if submission.graph_input:
        raise ValidationError({"input": "an ask is its graph's whole input; leave input out"})
    try:
        graph_name_validate(name=ASK_GRAPH)
    except UnknownGraph as exc:
        raise ValidationError({"ask": str(exc)}) from None
    if submission.asks is not None:
        _asks_check(submission.asks)
    else:
        _json_value_check(submission.ask, field="ask", max_bytes=ASK_MAX_BYTES, max_depth=ASK_MAX_DEPTH)
        # A client's ask is refused at once; a deployment's interrupts (``asks``) are queued all the same,
        # since its thread waits on them: an edit is then refused saying why (argschema.args_check).
        try:
            ask_schemas_check(value=submission.ask)
        except AskInvalid as exc:
            raise ValidationError({f"ask.{exc.field}": str(exc)}) from None
    external = submission.external or {}
    if not isinstance(external, dict):
        raise ValidationError({"external": "external must be a JSON object"})
    for name, value in external.items():
        limit = EXTERNAL_MAX_LENGTHS.get(name)
        if limit is None:
            raise ValidationError({"external": f"external takes {', '.join(EXTERNAL_MAX_LENGTHS)}, not {name!r}"})
        if not isinstance(value, str) or not 1 <= len(value) <= limit or "\x00" in value:
            raise ValidationError({f"external.{name}": f"external.{name} must be 1 to {limit} characters, without NUL"})


def _context_check(context: Any) -> None:
    """An ask's context: ``summary`` (Markdown) and ``messages`` [{role, content, name?}] within CONTEXT_*,
    no control character but tab and line breaks (the API's schema checks the shape; this, anyone's)."""
    if not isinstance(context, dict) or set(context) - {"summary", "messages"}:
        raise ValidationError({"context": "context is an object of summary and messages"})
    summary, messages = context.get("summary", ""), context.get("messages", [])
    if not isinstance(summary, str) or len(summary) > CONTEXT_SUMMARY_MAX_LENGTH:
        raise ValidationError({"context.summary": f"at most {CONTEXT_SUMMARY_MAX_LENGTH} characters of text"})
    _context_text_check(summary, field="context.summary")
    if not isinstance(messages, list) or len(messages) > CONTEXT_MESSAGES_MAX:
        raise ValidationError({"context.messages": f"a list of at most {CONTEXT_MESSAGES_MAX} messages"})
    for index, message in enumerate(messages):
        field = f"context.messages[{index}]"
        shaped = isinstance(message, dict) and {"role", "content"} <= set(message) <= {"role", "content", "name"}
        if (
            not shaped
            or not all(isinstance(v, str) for v in message.values())
            or len(message["content"]) > CONTEXT_MESSAGE_MAX_LENGTH
        ):
            raise ValidationError(
                {field: f"{{role, content, name?}}, texts, content at most {CONTEXT_MESSAGE_MAX_LENGTH} characters"}
            )
        for key, text in message.items():
            _context_text_check(text, field=f"{field}.{key}")
    if len(json.dumps(context, ensure_ascii=False).encode()) > CONTEXT_MAX_BYTES:
        raise ValidationError({"context": f"context is larger than {CONTEXT_MAX_BYTES} bytes as JSON"})


_CONTEXT_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _context_text_check(text: str, *, field: str) -> None:
    if found := _CONTEXT_CONTROLS.search(text):
        raise ValidationError({field: f"{field} must not contain the control character U+{ord(found.group()):04X}"})


def _asks_check(asks: Any) -> None:
    limit = EXTERNAL_MAX_LENGTHS["interrupt_id"]
    if not isinstance(asks, list) or not 1 <= len(asks) <= ASKS_MAX:
        raise ValidationError({"asks": f"asks must be a list of 1 to {ASKS_MAX} interrupts"})
    for index, ask in enumerate(asks):
        if not isinstance(ask, dict) or set(ask) != {"interrupt_id", "value"}:
            raise ValidationError({f"asks[{index}]": "each ask is an object of interrupt_id and value"})
        interrupt_id = ask["interrupt_id"]
        if not isinstance(interrupt_id, str) or not 1 <= len(interrupt_id) <= limit or "\x00" in interrupt_id:
            raise ValidationError({f"asks[{index}].interrupt_id": f"must be 1 to {limit} characters, without NUL"})
        _json_value_check(ask["value"], field=f"asks[{index}].value", max_bytes=ASK_MAX_BYTES, max_depth=ASK_MAX_DEPTH)
    if len({a["interrupt_id"] for a in asks}) != len(asks):
        raise ValidationError({"asks": "each interrupt is asked once"})


def _ask_unfold(*, submission: Submission, idempotency_key: str | None) -> Submission:
    """An ask's submission as the item it makes: the pass-through graph, the ask as its input, its natural key."""
    if submission.asks is not None:
        return dataclasses.replace(
            submission, graph=ASK_GRAPH, graph_input={"asks": submission.asks, "external": submission.external or {}}
        )
    if submission.ask is None:
        return submission
    external = submission.external or {}
    external_id = submission.external_id
    if external_id is None and idempotency_key is None and external.get("thread_id") and external.get("interrupt_id"):
        external_id = f"{external['thread_id']}:{external['interrupt_id']}"
    graph_input = {"ask": submission.ask, "external": external}
    if submission.context:
        graph_input["context"] = submission.context
    return dataclasses.replace(submission, graph=ASK_GRAPH, graph_input=graph_input, external_id=external_id, context=None)


def submission_check(*, submission: Submission, idempotency_key: str | None) -> None:
    """Everything that needs no database: raises ValidationError naming the field."""
    if any(v is not None for v in (submission.ask, submission.asks, submission.external, submission.context)):
        ask_check(submission=submission)
    item_body_check(body=submission.body)
    metadata_check(metadata=submission.metadata or {})
    try:
        graph_name_validate(name=submission.graph)
    except UnknownGraph as exc:
        raise ValidationError({"graph": str(exc)}) from None
    graph_input_check(graph_input=submission.graph_input or {})
    if not PRIORITY_MIN <= submission.priority <= PRIORITY_MAX:
        raise ValidationError({"priority": f"priority must be between {PRIORITY_MIN} and {PRIORITY_MAX}"})
    item_texts_check(idempotency_key=idempotency_key, external_id=submission.external_id)
    for field, value in (("idempotency_key", idempotency_key), ("external_id", submission.external_id)):
        if value is not None and not 1 <= len(value) <= KEY_MAX_LENGTH:
            raise ValidationError({field: f"{field} must be 1 to {KEY_MAX_LENGTH} characters"})


def _public_id_for(*, client: ApiClient, key: str, digest: str) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"{client.pk}\n{key}\n{digest}")


def item_submit(*, client: ApiClient, submission: Submission, idempotency_key: str | None = None) -> SubmitResult:
    """Create the item, or return the one this key already made (``created`` False).

    Raises ValidationError for bad input (an unknown ``requested_by`` or team, a policy
    that cannot be satisfied: ``items.item_create``) and IdempotencyConflict for a reused
    key with other content; neither changes anything.
    """
    submission_check(submission=submission, idempotency_key=idempotency_key)
    submission = _ask_unfold(submission=submission, idempotency_key=idempotency_key)
    requester = item_requester_get(username=submission.requested_by)
    digest = submission.digest()
    key = _key(submission=submission, idempotency_key=idempotency_key)
    if key is not None:
        existing = _existing(client=client, external_id=submission.external_id, idempotency_key=idempotency_key, digest=digest)
        if existing is not None:
            return SubmitResult(item=existing, created=False)
    fields = _fields(client=client, submission=submission, idempotency_key=idempotency_key, digest=digest, requester=requester)
    try:
        item = submitted_item_create(
            title=submission.title,
            body=submission.body,
            source=submission.source,
            public_id=_public_id_for(client=client, key=key, digest=digest) if key is not None else None,
            fields=fields,
        )
    except IntegrityError:
        existing = _existing(client=client, external_id=submission.external_id, idempotency_key=idempotency_key, digest=digest)
        if existing is None:
            raise
        return SubmitResult(item=existing, created=False)
    return SubmitResult(item=item, created=True)


def _key(*, submission: Submission, idempotency_key: str | None) -> str | None:
    if idempotency_key is not None:
        return f"key:{idempotency_key}"
    return f"ext:{submission.external_id}" if submission.external_id is not None else None


def _fields(
    *,
    client: ApiClient,
    submission: Submission,
    idempotency_key: str | None,
    digest: str,
    requester: User | None,
) -> dict[str, Any]:
    return {
        "external_id": submission.external_id,
        "metadata": submission.metadata or {},
        "priority": submission.priority,
        "submitted_by": client,
        "idempotency_key": idempotency_key,
        "submission_digest": digest,
        "graph": submission.graph,
        "graph_input": submission.graph_input or {},
        "team": submission.team,
        "policy": submission.policy,
        "requested_by": requester,
    }


def _existing(*, client: ApiClient, external_id: str | None, idempotency_key: str | None, digest: str) -> QueueItem | None:
    match = Q()
    if idempotency_key is not None:
        match |= Q(idempotency_key=idempotency_key)
    if external_id is not None:
        match |= Q(external_id=external_id)
    item = QueueItem.objects.filter(match, submitted_by=client).select_related("decided_by").first()
    if item is not None:
        _same_content_check(item=item, idempotency_key=idempotency_key, digest=digest)
    return item


def _same_content_check(*, item: QueueItem, idempotency_key: str | None, digest: str) -> None:
    if item.submission_digest != digest:
        used = "Idempotency-Key" if idempotency_key is not None and item.idempotency_key == idempotency_key else "external_id"
        raise IdempotencyConflict(
            f"this {used} was already used for item {item.public_id} with different content; "
            "use a new key for a new item, or resend exactly what was sent"
        )


@dataclass(frozen=True)
class Accepted:
    """One entry of ``items_accept``: its item (``created`` when this call made it), or why it was refused."""

    item: QueueItem | None = None
    created: bool = False
    error: ValidationError | IdempotencyConflict | None = None


def items_accept(*, client: ApiClient, entries: list[tuple[Submission, str | None]]) -> list[Accepted]:
    """Accept a batch for the task worker to start (``moderation.review.starts``), one result per entry, in order.

    Each entry is checked as ``item_submit`` checks it, and a refused one changes nothing
    and sinks no other. The new rows are written STARTING, with their counts and one
    start task each, in one transaction: the worker starts their graphs, and each enters
    the queue when its graph asks.

    Idempotent as ``item_submit``: a key already used answers with its item (``created``
    False) or an ``IdempotencyConflict``; a key given twice in one batch is one item.
    If a concurrent submit inserts one of the same keys first, the one transaction
    fails on the key's constraint and the rows are inserted one at a time, each judged
    as ``item_submit`` judges a lost insert.
    """
    results: list[Accepted | None] = [None] * len(entries)
    built: list[tuple[int, QueueItem]] = []
    requesters: dict[str | None, User | None] = {}
    for index, (submission, idempotency_key) in enumerate(entries):
        try:
            submission_check(submission=submission, idempotency_key=idempotency_key)
            submission = _ask_unfold(submission=submission, idempotency_key=idempotency_key)
            if submission.requested_by not in requesters:
                requesters[submission.requested_by] = item_requester_get(username=submission.requested_by)
            digest = submission.digest()
            key = _key(submission=submission, idempotency_key=idempotency_key)
            fields = _fields(
                client=client,
                submission=submission,
                idempotency_key=idempotency_key,
                digest=digest,
                requester=requesters[submission.requested_by],
            )
            item = item_build(
                title=submission.title,
                body=submission.body,
                source=submission.source,
                is_lab=False,
                public_id=_public_id_for(client=client, key=key, digest=digest) if key is not None else None,
                status=ItemStatus.STARTING,
                **fields,
            )
        except ValidationError as exc:
            results[index] = Accepted(error=exc)
            continue
        built.append((index, item))
    fresh = _batch_known(client=client, built=built, results=results)
    for index, accepted in _batch_insert(client=client, items=fresh):
        results[index] = accepted
    return [r for r in results if r is not None]


def _batch_known(
    *, client: ApiClient, built: list[tuple[int, QueueItem]], results: list[Accepted | None]
) -> list[tuple[int, QueueItem]]:
    """Answer the entries whose key is already used (by a row, or by an earlier entry); return the rest."""
    keys = [item.idempotency_key for _, item in built if item.idempotency_key is not None]
    external = [item.external_id for _, item in built if item.external_id is not None]
    rows = (
        list(
            QueueItem.objects.filter(Q(idempotency_key__in=keys) | Q(external_id__in=external), submitted_by=client)
            .select_related("decided_by")
            .order_by("created_at", "id")
        )
        if keys or external
        else []
    )
    # As _existing's first(): the oldest row holding either key; then this batch's earlier entries.
    known_by: dict[tuple[str, str], tuple[int, QueueItem]] = {}

    def keys_of(item: QueueItem) -> list[tuple[str, str]]:
        return [(kind, value) for kind, value in (("key", item.idempotency_key), ("ext", item.external_id)) if value]

    def remember(item: QueueItem) -> None:
        for key in keys_of(item):
            known_by.setdefault(key, (len(known_by), item))

    for row in rows:
        remember(row)
    fresh: list[tuple[int, QueueItem]] = []
    for index, item in built:
        same_key = [known_by[key] for key in keys_of(item) if key in known_by]
        if not same_key:
            fresh.append((index, item))
            remember(item)
            continue
        _, known = min(same_key, key=lambda found: found[0])
        try:
            _same_content_check(item=known, idempotency_key=item.idempotency_key, digest=item.submission_digest)
        except IdempotencyConflict as exc:
            results[index] = Accepted(error=exc)
        else:
            results[index] = Accepted(item=known, created=False)
    return fresh


def _batch_insert(*, client: ApiClient, items: list[tuple[int, QueueItem]]) -> list[tuple[int, Accepted]]:
    if not items:
        return []
    try:
        with transaction.atomic():
            QueueItem.objects.bulk_create([item for _, item in items])
            _accepted_record(items=[item for _, item in items])
        return [(index, Accepted(item=item, created=True)) for index, item in items]
    except IntegrityError:
        pass
    out = []
    for index, item in items:
        # bulk_create inserts in several statements (SQLite's parameter limit): rows of the
        # statements before the failed one were given ids, which the rollback took back.
        item.pk = None
        item._state.adding = True
        try:
            with transaction.atomic():
                item.save(force_insert=True)
                _accepted_record(items=[item])
            out.append((index, Accepted(item=item, created=True)))
        except IntegrityError:
            try:
                existing = _existing(
                    client=client,
                    external_id=item.external_id,
                    idempotency_key=item.idempotency_key,
                    digest=item.submission_digest,
                )
            except IdempotencyConflict as exc:
                out.append((index, Accepted(error=exc)))
                continue
            if existing is None:
                raise
            out.append((index, Accepted(item=existing, created=False)))
    return out


def _accepted_record(*, items: list[QueueItem]) -> None:
    counts_apply_many(changes=[(None, item_counted(item)) for item in items])
    items_start_enqueue(item_ids=[item.pk for item in items])
