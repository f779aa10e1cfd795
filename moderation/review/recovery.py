"""Start-up and on-demand reconciliation of every item that is not settled."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q

from moderation.core.locks import item_lock
from moderation.graphs.asks import AskSpec, ask_resume_read, decisions_describe
from moderation.graphs.registry import graph_names
from moderation.graphs.runtime import graph_resume_values
from moderation.items.models import DECIDED_STATUSES, UNDECIDED_STATUSES, ApplyState, AskStatus, ItemStatus, QueueItem, ReviewAsk
from moderation.records.counts import counts_apply, item_counted
from moderation.review.decisions import ask_status_word
from moderation.review.itemrow import item_row_lock
from moderation.review.reconcile import item_reconcile

logger = logging.getLogger(__name__)

# What an attention reason may keep of an exception's text (it is shown on the dashboard).
REASON_MAX_LENGTH = 500


@dataclass(frozen=True)
class RecoveryAction:
    item: str
    title: str
    action: str
    failed: bool = False


@dataclass
class RecoveryReport:
    checked: int = 0
    actions: list[RecoveryAction] = field(default_factory=list)
    # graph name -> its unsettled items, left as they are: this process does not run the graph.
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        return sum(action.failed for action in self.actions)


def items_recover(*, include_decided: bool = False, progress: Callable[[int, int], None] | None = None) -> RecoveryReport:
    """Reconcile starting, pending, needs-attention and not-yet-applied items (decided ones too if asked) with their graphs.

    Idempotent: a second run finds nothing to do. Each item is handled under the same
    locks as a decision, so it is safe while reviewers are working, and on its own: an
    item that cannot be repaired (whatever it contains) is marked needs attention with
    the reason and the run goes on, so no single item can stop a server from starting.
    Items of a graph this process does not run are not touched, only counted
    (``skipped``): nothing is wrong with them, and a run that has the graph back repairs them.
    ``include_decided`` also reports every row that disagrees with what its graph was
    resumed with (``item_graph_disagreement``), and leaves it as it is.
    """
    statuses = list(UNDECIDED_STATUSES)
    if include_decided:
        statuses += list(DECIDED_STATUSES)
    unsettled = Q(status__in=statuses) | Q(apply_state__in=[ApplyState.APPLYING, ApplyState.FAILED])
    items = QueueItem.objects.filter(unsettled)
    loaded = graph_names()
    report = RecoveryReport(
        skipped=dict(items.exclude(graph__in=loaded).values_list("graph").annotate(Count("id")).order_by("graph"))
    )
    keys = list(items.filter(graph__in=loaded).order_by("id").values_list("public_id", flat=True))
    for done, public_id in enumerate(keys, start=1):
        key = str(public_id)
        try:
            title, said = item_reconcile(key=key)
            if include_decided and (disagreement := item_graph_disagreement(key=key)):
                said.append(f"decided row disagrees with its graph, left as it is (see verify_audit): {disagreement}")
            if said:
                report.actions.append(RecoveryAction(item=key, title=title, action="; ".join(said)))
        except Exception as exc:
            logger.exception("recover: item %s could not be repaired", key)
            reason = _reason(exc)
            title = _attention_mark(key=key, reason=f"recovery failed: {reason}")
            report.actions.append(RecoveryAction(item=key, title=title, action=f"could not repair: {reason}", failed=True))
        report.checked = done
        if progress is not None:
            progress(done, len(keys))
    return report


def item_graph_disagreement(*, key: str) -> str | None:
    """How the item's decided rows disagree with what its graph was resumed with; None when they agree.

    Each applied ask's decider and decisions against the answer its graph holds
    (``graph_resume_values``), and the item row's decision against the ask that settled
    it, once that ask agrees with its graph. Read without locks: an answer, once in the
    graph, never changes, and only asks recorded as applied (answered before they were
    so recorded) are compared. Never repaired: which side is right is for an operator
    and ``verify_audit`` to say.
    """
    item = QueueItem.objects.select_related("decided_by").get(public_id=key)
    settled = list(item.asks.exclude(status=AskStatus.PENDING).select_related("decided_by").order_by("decided_at", "pk"))
    if not any(ask.applied_at for ask in settled):
        return None
    answers = graph_resume_values(name=item.graph, thread_id=item.thread_id)
    disagreeing = {ask.pk: problem for ask in settled if ask.applied_at and (problem := _ask_disagreement(ask, answers))}
    found = list(disagreeing.values())
    settling = settled[-1]
    if item.is_decided and settling.applied_at and settling.pk not in disagreeing:
        row = (item.status, item.decided_by.get_username() if item.decided_by else "nobody")
        asked = (ask_status_word(settling), settling.decided_by.get_username() if settling.decided_by else "nobody")
        if row != asked:
            found.append(
                f"the item row says {row[0]} by {row[1]}; the ask {settling.interrupt_id} that decided it "
                f"(its graph holds it) says {asked[0]} by {asked[1]}"
            )
    return "; ".join(found) or None


def _ask_disagreement(ask: ReviewAsk, answers: dict[str, Any]) -> str | None:
    if ask.interrupt_id not in answers:
        return f"ask {ask.interrupt_id} is recorded as applied, but its graph holds no answer to it"
    spec = AskSpec.from_payload(ask.payload)
    who = ask.decided_by.get_username() if ask.decided_by else "nobody"
    try:
        decisions, reviewer = ask_resume_read(spec=spec, value=answers[ask.interrupt_id])
        if decisions == ask.decisions and reviewer in (None, who):
            return None
        said = decisions_describe(spec=spec, decisions=decisions)
    except (ValueError, KeyError, TypeError) as exc:
        return f"ask {ask.interrupt_id}: its graph holds an answer this version does not write ({exc!r})"
    by = f"{reviewer}'s" if reviewer else "an answer"
    return (
        f"ask {ask.interrupt_id}: the row says {who} {decisions_describe(spec=spec, decisions=ask.decisions)}; "
        f"its graph was resumed with {by}: {said}"
    )


def _attention_mark(*, key: str, reason: str) -> str:
    """Flag a pending item the run could not repair; return its title ("" if even that failed).

    A decided row keeps its winner (the database refuses a needs-attention item with
    one); the failure is still reported and counted.
    """
    try:
        with item_lock(key, timeout=settings.DECISION_LOCK_TIMEOUT), transaction.atomic():
            item = item_row_lock(public_id=key)
            if item.status in UNDECIDED_STATUSES:
                before = item_counted(item)
                item.status = ItemStatus.NEEDS_ATTENTION
                item.attention = reason
                item.save(update_fields=["status", "attention"])
                counts_apply(before=before, after=item_counted(item))
            return item.title
    except Exception:
        logger.exception("recover: could not mark item %s as needing attention", key)
        return ""


def _reason(exc: Exception) -> str:
    # The text came from an item's own data: keep it storable (no NUL) and short.
    text = f"{type(exc).__name__}: {exc}".replace("\x00", "\\x00")
    return text if len(text) <= REASON_MAX_LENGTH else text[: REASON_MAX_LENGTH - 1] + "…"
