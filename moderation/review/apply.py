"""The worker's half of a decision: each decided ask's graph is resumed exactly once.

``moderation.review.decisions`` commits a decision and queues ``item_apply_task`` in the same
transaction. ``item_apply`` then, in a worker:

1. takes the thread's resume lock (``moderation.core.resumelock``): at most one resume of a
   thread anywhere, and no row lock held while the graph runs;
2. resumes the decided, unapplied asks whose interrupt the graph still waits on (an ask
   whose interrupt is gone was resumed by a run that died before recording: recorded only);
   a LangGraph deployment's item resumes the remote thread (``moderation.review.remote``);
3. records, in one short transaction under the item's row lock, the asks as applied and what
   the graph did next (finished, asked again, or failed), with its webhook deliveries;
4. repeats while asks were decided meanwhile.

A retried or duplicated task finds nothing to do. A worker killed at any step leaves a
decided, unapplied ask that ``applies_sweep`` queues again; a graph left between its steps is
run on (``graph_continue``) before anything is recorded. See contributors/architecture.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django_tasks import task

from moderation.core.backoff import retry_delay
from moderation.core.faults import fault_point
from moderation.core.requestid import request_id_bound, request_id_current
from moderation.core.resumelock import thread_resume_lock
from moderation.core.taskqueue import tasks_orphaned
from moderation.delivery.outbox import item_applied_record
from moderation.graphs.asks import AskSpec, ask_resume_value
from moderation.graphs.outcome import AppliedState, applied_result_build
from moderation.graphs.registry import graph_loaded, graph_names, graph_not_loaded_text
from moderation.graphs.remote import RemoteUnavailable
from moderation.graphs.runtime import (
    STORAGE_LOST,
    GraphState,
    PendingAsk,
    graph_continue,
    graph_resume,
    graph_state_read,
)
from moderation.items.models import ApplyState, AskStatus, ItemStatus, QueueItem, ReviewAsk
from moderation.policies.rules import ask_deadline_weakening, policy_parse
from moderation.records import events
from moderation.records.counts import counts_apply, item_counted
from moderation.records.metrics import metrics_applied_record, metrics_apply_failed_record
from moderation.review.itemrow import item_row_lock
from moderation.review.remote import deployment_of_item, deployment_resume

logger = logging.getLogger(__name__)

APPLY_QUEUE = "apply"
ERROR_MAX_CHARS = 500


class ApplyOutcome(StrEnum):
    """What one round of an apply did, or why none ran."""

    GONE = "gone"
    GRAPH_NOT_LOADED = "graph_not_loaded"  # left unapplied for a worker that runs the graph
    FAILED_EARLIER = "failed_earlier"  # left for ``manage.py recover``
    NOTHING_TO_APPLY = "nothing_to_apply"
    NOTHING_TO_CONTINUE = "nothing_to_continue"
    RECORDED = "recorded"  # the graph's next state is recorded (``state``)
    RETRYING = "retrying"  # queued again after a backoff (``error``)
    FAILED = "failed"  # recorded as FAILED (``error``)


@dataclass(frozen=True)
class ApplyResult:
    """One round of an apply: what happened, how many asks it resumed, the recorded state or the error."""

    outcome: ApplyOutcome
    resumed: int = 0
    state: AppliedState | None = None
    error: str = ""


# Filled in from the result's fields.
_APPLY_WORDS = {
    ApplyOutcome.GONE: "gone",
    ApplyOutcome.GRAPH_NOT_LOADED: "left unapplied: graph not loaded",
    ApplyOutcome.FAILED_EARLIER: "failed earlier; left for manage.py recover",
    ApplyOutcome.NOTHING_TO_APPLY: "nothing to apply",
    ApplyOutcome.NOTHING_TO_CONTINUE: "nothing to continue",
    ApplyOutcome.RECORDED: "resumed {resumed}, {state}",
    ApplyOutcome.RETRYING: "retrying: {error}",
    ApplyOutcome.FAILED: "failed: {error}",
}


def apply_text(results: Sequence[ApplyResult]) -> str:
    """What an apply did, in words: for the log, the task's record and ``manage.py recover``."""
    return "; ".join(_APPLY_WORDS[r.outcome].format_map(vars(r)) for r in results)


@task(queue_name=APPLY_QUEUE)
def item_apply_task(item_id: int, request_id: str = "") -> str:
    """``request_id``: the deciding request's, so the worker's lines for this apply carry it (sweeps queue none)."""
    with request_id_bound(request_id):
        done = apply_text(item_apply(item_id=item_id))
        logger.info("item %s: %s", item_id, done)
    return done


def item_apply_enqueue(*, item_id: int) -> None:
    """Queue the item's apply in the caller's transaction (committed with the decision, or not at all).

    With ``REVIEWQUEUE_APPLY_INLINE`` (the in-process test suite, which runs no worker)
    the same ``item_apply`` runs in this process after the commit instead, and, like an
    event, only once the guard has let go of the item's lock (``events.after_commit``):
    a reviewer of the same item never waits for its graph.
    """
    if settings.REVIEWQUEUE_APPLY_INLINE:
        events.after_commit(lambda: item_apply(item_id=item_id))
    else:
        item_apply_task.enqueue(item_id, request_id=request_id_current())


def item_apply(*, item_id: int, retry_failed: bool = False) -> list[ApplyResult]:
    """Apply every decided, unapplied ask of the item (see the module docstring); return what each round did.

    ``retry_failed`` also runs on an item whose graph failed after a decision (``recover``).
    """
    item = (
        QueueItem.objects.filter(pk=item_id)
        .only("thread_id", "graph", "apply_state", "submitted_by", "graph_input", "applied_result")
        .first()
    )
    if item is None:
        return [ApplyResult(ApplyOutcome.GONE)]
    if not graph_loaded(name=item.graph):
        # Nothing is wrong with the decision: it waits, unapplied, for a worker that runs the
        # graph (whose sweep queues it again), instead of being recorded as failed.
        logger.warning("item %s: its decision is left unapplied: %s", item_id, graph_not_loaded_text(name=item.graph))
        return [ApplyResult(ApplyOutcome.GRAPH_NOT_LOADED)]
    if item.apply_state == ApplyState.FAILED and not retry_failed:
        return [ApplyResult(ApplyOutcome.FAILED_EARLIER)]
    done: list[ApplyResult] = []
    with thread_resume_lock(item.thread_id, timeout=settings.APPLY_LOCK_TIMEOUT):
        while True:
            asks = list(
                ReviewAsk.objects.filter(item_id=item_id, applied_at__isnull=True)
                .exclude(status=AskStatus.PENDING)
                .select_related("decided_by")
            )  # its reviewer goes into the resume value
            if not asks:
                break
            done.append(_apply_round(item=item, asks=asks, retry_failed=retry_failed))
            if done[-1].outcome != ApplyOutcome.RECORDED:
                break
    return done or [ApplyResult(ApplyOutcome.NOTHING_TO_APPLY)]


def item_continue(*, item_id: int) -> ApplyResult:
    """Run a decided item's graph on to its end or next interrupt if a killed run left it stalled; return what happened.

    For ``recover``: an item recorded as applied while its graph was stalled (before the
    worker checked for it) has no unapplied ask left to bring it back. Holds the
    thread's resume lock, like every apply; records as ``item_apply`` does.
    """
    item = QueueItem.objects.filter(pk=item_id).only("thread_id", "graph", "apply_state").first()
    if item is None:
        return ApplyResult(ApplyOutcome.GONE)
    with thread_resume_lock(item.thread_id, timeout=settings.APPLY_LOCK_TIMEOUT):
        if not graph_state_read(name=item.graph, thread_id=item.thread_id).stalled:
            return ApplyResult(ApplyOutcome.NOTHING_TO_CONTINUE)
        return _apply_round(item=item, asks=[], retry_failed=True)


def _apply_round(*, item: QueueItem, asks: list[ReviewAsk], retry_failed: bool) -> ApplyResult:
    name, thread_id = item.graph, item.thread_id
    fault_point("before_resume", item_key=thread_id)
    try:
        before = graph_state_read(name=name, thread_id=thread_id)
        waiting = {p.interrupt_id for p in before.asks}
        answers = {ask.interrupt_id: _resume_value(ask) for ask in asks if ask.interrupt_id in waiting}
        if answers:
            graph_resume(name=name, thread_id=thread_id, answers=answers)
        elif before.stalled or (retry_failed and before.error):
            # Resumed by a run that died mid-graph (stalled), or failed after its resume: run on from its checkpoint.
            graph_continue(name=name, thread_id=thread_id)
        # A LangGraph deployment's interrupts: its thread there is owed what this item's own thread now holds
        # (also when an earlier try resumed this one and could not reach the deployment).
        deployment = deployment_of_item(item=item) if asks else None
        remote = deployment_resume(deployment=deployment, item=item, asks=asks) if deployment else None
        fault_point("after_resume", item_key=thread_id)
        after = graph_state_read(name=name, thread_id=thread_id)
    except RemoteUnavailable as exc:
        return _retry_later(item=item, error=str(exc))
    except STORAGE_LOST as exc:
        # Not the graph's failure (recorded FAILED, for an operator): the checkpointer's connection ended
        # under the run. What the run saved before is what the retry starts from (it never resumes twice).
        return _retry_later(item=item, error=f"the graph's storage: {type(exc).__name__}: {exc}")
    except Exception as exc:
        logger.exception("applying item %s failed", item.pk)
        return _record_failure(item_id=item.pk, error=f"{type(exc).__name__}: {exc}")
    if not (after.finished or after.asks):
        # Neither at its end nor at an interrupt: never recorded as applied.
        return _record_failure(item_id=item.pk, error=after.error or _not_settled(after))
    fault_point("before_record", item_key=thread_id)
    return _record(
        item_id=item.pk,
        asks=asks,
        asked=after.asks,
        finished=after.finished,
        values=after.values,
        resumed=len(remote["resumed"]) if remote else len(answers),
        remote=remote,
    )


def _not_settled(state: GraphState) -> str:
    if not state.checkpointed:
        return "no checkpoint for its thread"
    return "its graph stopped between its steps without finishing or asking"


def _resume_value(ask: ReviewAsk) -> Any:
    assert ask.decided_by is not None and ask.decided_at is not None  # a decided ask's
    meta: dict[str, Any] = {"reviewer": ask.decided_by.get_username(), "decided_at": ask.decided_at.isoformat(), "note": ask.note}
    if ask.status == AskStatus.WITHDRAWN:
        meta["withdrawn"] = True
    if ask.tally:
        meta["tally"] = ask.tally
    return ask_resume_value(spec=AskSpec.from_payload(ask.payload), decisions=ask.decisions, meta=meta)


def _record(
    *,
    item_id: int,
    asks: list[ReviewAsk],
    asked: list[PendingAsk],
    finished: bool,
    values: dict[str, Any],
    resumed: int,
    remote: dict[str, Any] | None = None,
) -> ApplyResult:
    """``asks``: those resumed (or found resumed), read under the resume lock, which is what marks them applied."""
    now = timezone.now()
    ask_ids = [a.pk for a in asks]
    with events.events_held(), transaction.atomic():
        # Its reviewer and team go into the webhook's payload: read with the row, not one by one.
        item = item_row_lock(pk=item_id, related=("decided_by", "team"))
        metrics_applied_record(asks=asks, at=now)
        ReviewAsk.objects.filter(pk__in=ask_ids, applied_at__isnull=True).update(applied_at=now)
        known = set(item.asks.values_list("interrupt_id", flat=True)) if asked else set()
        new = [p for p in asked if p.interrupt_id not in known]
        if finished:
            item.applied_result = applied_result_build(state=AppliedState.FINISHED, values=values)
        elif new and item.status == ItemStatus.WITHDRAWN:
            # A withdrawn item stays withdrawn: its graph is left paused at what it asks next.
            item.applied_result = applied_result_build(state=AppliedState.ASKED_AFTER_WITHDRAWAL, values=values, asks=len(new))
        else:
            # Not finished: it asks again (``_apply_round`` records nothing else as applied).
            item.applied_result = applied_result_build(state=AppliedState.ASKED_AGAIN, values=values, asks=len(asked))
            if new:
                _asks_open(item=item, asked=new)
        if remote is not None:
            item.applied_result["remote"] = remote
        item.apply_state = ApplyState.IDLE
        item.save(
            update_fields=[
                "apply_state",
                "applied_result",
                "status",
                "decided_by",
                "decided_at",
                "decision_note",
                "review_request",
            ]
        )
        item_applied_record(item=item, applied=[a.interrupt_id for a in asks])
        events.item_applied_after_commit(item=item)
    return ApplyResult(ApplyOutcome.RECORDED, resumed=resumed, state=AppliedState(item.applied_result["state"]))


def asks_create(*, item: QueueItem, asked: list[PendingAsk], round: int) -> list[ReviewAsk]:
    """Rows for the interrupts a graph raised (its first asks at start, or a later round).

    Each ask's deadline: the graph's own (its interrupt's ``deadline_seconds``), else the
    item's policy's; the task worker enforces it (``moderation.review.deadlines``). A
    graph's own deadline that would weaken the item's policy (``ask_deadline_weakening``:
    an auto-approval sooner, say) is not taken, whoever raised it: the policy's stands.
    """
    now = timezone.now()
    policy = policy_parse(item.policy)

    def deadline(p: PendingAsk) -> Any:
        seconds = p.spec.deadline_seconds
        if seconds and (why := ask_deadline_weakening(policy=policy, seconds=seconds)):
            logger.warning("item %s: ask %s keeps its policy's deadline, not its own: %s", item.public_id, p.interrupt_id, why)
            seconds = None
        seconds = seconds or policy.deadline_seconds
        return now + timedelta(seconds=seconds) if seconds else None

    return ReviewAsk.objects.bulk_create(
        [
            ReviewAsk(
                item=item,
                interrupt_id=p.interrupt_id,
                round=round,
                position=i,
                payload=p.spec.as_payload(),
                deadline_at=deadline(p),
            )
            for i, p in enumerate(asked)
        ]
    )


def _asks_open(*, item: QueueItem, asked: list[PendingAsk]) -> None:
    """A new round: the item is pending again, with the new asks; earlier decisions stay on their asks."""
    last = item.asks.order_by("-round").values_list("round", flat=True).first() or 0
    asks_create(item=item, asked=asked, round=last + 1)
    before = item_counted(item)
    item.status = ItemStatus.PENDING
    item.decided_by = None
    item.decided_at = None
    item.decision_note = ""
    item.review_request = asked[0].spec.as_payload()
    # The caller saves the row in this transaction.
    counts_apply(before=before, after=item_counted(item))


def _retry_later(*, item: QueueItem, error: str) -> ApplyResult:
    """The deployment could not be reached, or the graph's storage went away under the run: the decision
    stays recorded, unapplied, APPLYING; its apply is queued again after a backoff (``REMOTE_RETRY_BASE``
    doubling, up to ``REMOTE_RETRY_MAX`` seconds)."""
    error = error.replace("\x00", "\\x00")[:ERROR_MAX_CHARS]
    with events.events_held(), transaction.atomic():
        row = item_row_lock(pk=item.pk)
        retried = row.applied_result.get("state") == AppliedState.APPLYING
        tries = int(row.applied_result.get("tries", 0)) + 1 if retried else 1
        row.applied_result = applied_result_build(state=AppliedState.APPLYING, error=error, tries=tries)
        row.save(update_fields=["applied_result"])
        delay = retry_delay(tries=tries, base=settings.REMOTE_RETRY_BASE, most=settings.REMOTE_RETRY_MAX)
        run_after = timezone.now() + timedelta(seconds=delay)
        item_apply_task.using(run_after=run_after).enqueue(item.pk)
        events.item_applied_after_commit(item=row)
    logger.warning(
        "item %s: its apply failed for now (try %d), trying again at %s: %s", item.pk, tries, run_after.isoformat(), error
    )
    return ApplyResult(ApplyOutcome.RETRYING, error=error)


def _record_failure(*, item_id: int, error: str) -> ApplyResult:
    error = error.replace("\x00", "\\x00")[:ERROR_MAX_CHARS]
    with events.events_held(), transaction.atomic():
        item = item_row_lock(pk=item_id, related=("decided_by", "team"))
        item.apply_state = ApplyState.FAILED
        item.applied_result = applied_result_build(state=AppliedState.FAILED, error=error)
        item.save(update_fields=["apply_state", "applied_result"])
        metrics_apply_failed_record()
        item_applied_record(item=item, applied=[])
        events.item_applied_after_commit(item=item)
    logger.error("item %s: the graph failed after its decision: %s", item_id, error)
    return ApplyResult(ApplyOutcome.FAILED, error=error)


def applies_sweep(*, enqueue: Callable[[int], Any] | None = None) -> int:
    """Queue again every item with a decided ask not applied for ``APPLY_SWEEP_GRACE`` seconds.

    Only items no apply task is still going to run: one waiting in the queue, or claimed
    within the grace (a live worker's, presumably), will. Without that, a backlog longer
    than the grace had every sweep of every worker queue each overdue item again, and the
    duplicates (each taking the resume lock to find nothing to do) kept the queue from
    draining. A dead worker's task is never finished, so once it is older than the grace
    its item is queued again, once: the next sweep finds that task waiting.
    """
    overdue = timezone.now() - timedelta(seconds=settings.APPLY_SWEEP_GRACE)
    unapplied = (
        ReviewAsk.objects.filter(~Q(status=AskStatus.PENDING), applied_at__isnull=True, decided_at__lt=overdue)
        .exclude(item__apply_state=ApplyState.FAILED)
        .filter(item__graph__in=graph_names())  # the others wait for a worker that runs their graph
        .values_list("item_id", flat=True)
        .distinct()
    )
    item_ids = tasks_orphaned(ids=unapplied.iterator(), task=item_apply_task, started_since=overdue)
    for item_id in item_ids:
        (enqueue or item_apply_task.enqueue)(item_id)
    if item_ids:
        logger.warning("re-queued the apply of %d items whose decision was not yet applied", len(item_ids))
    return len(item_ids)
