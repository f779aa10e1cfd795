"""Deciding an ask: exactly one decision per ask wins, and every loser is told who won.

``item_decide`` records a moderator's decision on one ask of an item (on a quorum item, a
vote); ``item_withdraw`` lets the item's submitter settle every open ask at once. Both check
everything checkable before locking (decision types, edited arguments, texts), so a bad
decision changes nothing; a refusal raises a ``DecisionError`` and records nothing.

Locking contract of ``item_decide`` and ``item_withdraw``, in acquisition order:

1. the item's in-process lock (``moderation.core.locks``), waited for at most
   ``DECISION_LOCK_TIMEOUT`` (then ``ItemBusy``);
2. a transaction holding the item's row lock (``SELECT ... FOR UPDATE`` on PostgreSQL; an
   IMMEDIATE transaction on SQLite, which ignores ``select_for_update``);
3. under both: the decider's right (team membership row locked too; never the requester),
   claims with ``CLAIMS_REQUIRED``, then check-then-act on the ask. The ask, the item row,
   the attempt (``moderation.records.audit``), the webhook deliveries and the apply task
   commit together, or not at all. An item read with no ask before the locks that has one
   under them (its graph asked meanwhile) is read and judged again, once.

The graph is never run here: a worker resumes it (``moderation.review.apply``). Events go
out after the commit and after the item lock is released. Why: contributors/architecture.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib.auth.models import User
from django.db import InterfaceError, OperationalError, connection, transaction
from django.utils import timezone

from moderation.core.faults import fault_point
from moderation.core.locks import LockTimeout, item_lock
from moderation.core.overload import pool_exhausted
from moderation.core.permissions import user_can_decide
from moderation.delivery.outbox import (
    item_escalated_record,
    item_settled_record,
    item_voted_record,
)
from moderation.graphs.asks import (
    AskDecisionInvalid,
    AskSpec,
    ask_decisions_validate,
    decisions_kind,
    text_clean,
)
from moderation.items.models import (
    PRIORITY_MAX,
    STATUS_FOR_DECISION,
    ApplyState,
    AskStatus,
    ItemStatus,
    QueueItem,
    Requested,
    ReviewAsk,
)
from moderation.policies.models import TallyWhy, Vote, VoteKind
from moderation.policies.rules import (
    Policy,
    Resolution,
    policy_parse,
    tally_build,
    tally_resolve,
)
from moderation.policies.teams import (
    NotAMember,
    decide_right_check,
    eligible_count,
    four_eyes_refusal,
    team_policy,
)
from moderation.records import events
from moderation.records.audit import attempt_append
from moderation.records.claims import claim_held_by_other, claim_release
from moderation.records.counts import counts_apply, item_counted
from moderation.records.metrics import metrics_escalated_record
from moderation.records.models import AttemptOrigin, AttemptOutcome
from moderation.records.outcomes import DecisionOutcome, outcome_for, vote_outcome
from moderation.records.reasons import (
    ReasonInvalid,
    decisions_rejecting,
    reason_check,
    reason_message,
    reason_rule,
)
from moderation.records.teamstats import teamstats_escalation_record
from moderation.review.apply import item_apply_enqueue
from moderation.review.itemrow import item_row_lock
from moderation.review.models import Decision
from moderation.review.reconcile import item_reconcile

logger = logging.getLogger(__name__)


class DecisionError(Exception):
    """A decision that could not be judged; nothing was changed."""

    code = "error"
    http_status = 400
    field = ""


class InvalidDecision(DecisionError):
    code = "invalid_decision"

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class NotAModerator(DecisionError):
    code = "forbidden"
    http_status = 403


class NotAllowed(DecisionError):
    code = "forbidden"
    http_status = 403


class ItemNotFound(DecisionError):
    code = "not_found"
    http_status = 404


class ItemBusy(DecisionError):
    code = "busy"
    http_status = 503


class ItemNeedsAttention(DecisionError):
    code = "needs_attention"
    http_status = 409


class ItemStarting(DecisionError):
    """Accepted, its graph not yet asking (``moderation.review.starts``): there is nothing to decide yet."""

    code = "starting"
    http_status = 409


class ItemRefused(DecisionError):
    """Its graph raised at its start (``moderation.review.starts``): it never asked, and never will."""

    code = "refused"
    http_status = 409


class ItemClaimed(DecisionError):
    """``CLAIMS_REQUIRED``: someone else holds a live claim on the item (``moderation.records.claims``)."""

    code = "claimed"
    http_status = 409


class DatabaseUnavailable(DecisionError):
    code = "database_unavailable"
    http_status = 503


NOTHING_APPLIED = "the database connection was lost; nothing was applied, try again"
WITHDRAWN_MESSAGE = "withdrawn by its submitter"


def decision_validate(*, decision: object, note: object) -> tuple[str, str]:
    """The shorthand decision (approve / reject every action of an ask) and note; InvalidDecision before anything is locked."""
    if decision not in Decision.values:
        raise InvalidDecision(f"decision must be one of {', '.join(Decision.values)}, not {decision!r}", field="decision")
    return str(decision), _text(note, field="note")


def _text(text: object, *, field: str) -> str:
    try:
        return text_clean(text, field=field)
    except AskDecisionInvalid as exc:
        raise InvalidDecision(f"{field} {exc}", field=field) from None


def _ask_id(ask: object) -> str | None:
    """The ask's interrupt id as sent, checked before it is looked up; None for none."""
    if ask is None or ask == "":
        return None
    if not isinstance(ask, str):
        raise InvalidDecision(f"ask must be an ask's id (text), not {ask!r}"[:200], field="ask")
    return _text(ask, field="ask")


@dataclass(frozen=True)
class _Target:
    """The ask an attempt is about, read before any lock (an ask's payload, an item's policy
    and requester never change)."""

    key: str
    ask_pk: int | None
    spec: AskSpec | None
    policy: Policy = Policy()
    requester_id: int | None = None
    graph: str = ""
    team_id: int | None = None


@dataclass(frozen=True)
class _Attempt:
    """One checked attempt as it reaches the locks: who asked for what, when, with which words and codes."""

    reviewer: User
    decisions: list[dict[str, Any]]
    note: str
    requested: str  # a ``Requested`` value ("" for no decision, an item whose graph never asked)
    requested_at: datetime
    reason: str = ""
    origin: str = ""

    def logged(self, **fields: Any) -> dict[str, Any]:
        """``attempt_append``'s fields for it, with ``fields`` (its outcome, the winner) added or overriding."""
        return {
            "reviewer": self.reviewer,
            "requested": self.requested,
            "decisions": self.decisions,
            "note": self.note,
            "requested_at": self.requested_at,
            "reason": self.reason,
            "origin": self.origin,
            **fields,
        }


def item_decide(
    *,
    item_public_id: UUID | str,
    reviewer: User,
    decision: str | None = None,
    note: str = "",
    ask: str | None = None,
    decisions: Any = None,
    reason: Any = None,
    origin: str = "",
) -> DecisionOutcome:
    """Decide one ask of an item for ``reviewer``; see the module docstring for the locking contract.

    ``ask`` is the ask's interrupt id; without it, the item's only open ask (or, on a
    settled item, its latest). Give either ``decisions`` (LangChain's, one per action
    of the ask, in order) or the shorthand ``decision`` (``approve`` / ``reject``, for
    every action; a reject carries ``note`` as its message). ``reason``: a reason code
    (``moderation.records.reasons``), for a decision with a reject only, one of those the
    item's rule (its team and graph, else the settings) offers, required when the rule says
    so; then it goes in front of each reject's message. ``origin``:
    where the attempt came from (``AttemptOrigin``), for the log.

    Returns the outcome, won or lost (a lost one names the winner and what they
    decided). Raises a ``DecisionError`` subclass, changing nothing, for a
    non-moderator, a decision the ask does not allow or cannot take (``field`` names
    where), an unknown item or ask, a wait past the lock bound, or an item that needs
    an operator.
    """
    if not user_can_decide(user=reviewer):
        raise NotAModerator("you do not have permission to decide items")
    note = _text(note, field="note")
    ask = _ask_id(ask)
    shorthand = ""
    if decisions is None:
        shorthand, _ = decision_validate(decision=decision, note="")
    elif decision is not None:
        raise InvalidDecision("send either decision or decisions, not both", field="decisions")
    for _ in range(_TARGET_READS):
        try:
            return _decide_once(
                item_public_id=item_public_id,
                reviewer=reviewer,
                shorthand=shorthand,
                note=note,
                ask=ask,
                decisions=decisions,
                reason=reason,
                origin=origin,
            )
        except _TargetStale:
            continue
    raise ItemBusy("this item's graph asked for a review just now; nothing was recorded, try again")


# An item's asks appear at most once between the read before the lock and the lock (its start, or
# ``recover``'s): the second read finds them.
_TARGET_READS = 2


class _TargetStale(Exception):
    """The item read as having no ask before the lock has one under it: its graph asked meanwhile.
    Raised under the row lock, it rolls back; the attempt is read and judged again."""


def _decide_once(
    *,
    item_public_id: UUID | str,
    reviewer: User,
    shorthand: str,
    note: str,
    ask: str | None,
    decisions: Any,
    reason: Any,
    origin: str,
) -> DecisionOutcome:
    target = _target_read(item_public_id=item_public_id, ask=ask)
    if target.spec is None:
        cleaned: list[dict[str, Any]] = []
    else:
        if decisions is None:
            one = {"type": shorthand, **({"message": note} if shorthand == "reject" and note else {})}
            decisions = [dict(one) for _ in target.spec.actions]
        try:
            cleaned = ask_decisions_validate(spec=target.spec, decisions=decisions)
        except AskDecisionInvalid as exc:
            raise InvalidDecision(f"{exc.field}: {exc}", field=exc.field) from None
    if refusal := four_eyes_refusal(requester_id=target.requester_id, user=reviewer):
        raise NotAllowed(refusal)
    if target.policy.is_quorum and cleaned and decisions_kind(cleaned) not in VoteKind.values:
        raise InvalidDecision(_not_a_vote(policy=target.policy, decisions=cleaned), field="decisions")
    rejecting = decisions_rejecting(cleaned) if target.spec is not None else decisions is None and shorthand == "reject"
    # Only a reject, or a reason given, reads the team's reason rule: an approval or an edit costs no query.
    rule = reason_rule(team_id=target.team_id, graph=target.graph) if rejecting or reason not in (None, "") else None
    try:
        reason = reason_check(reason=reason, rejecting=rejecting, rule=rule) if rule is not None else ""
    except ReasonInvalid as exc:
        raise InvalidDecision(f"reason: {exc}", field="reason") from None
    if reason and rule is not None and rule.required:  # else the graph gets the message as typed, the code only as data
        cleaned = [
            {**d, "message": reason_message(reason=reason, message=d.get("message", ""))} if d["type"] == "reject" else d
            for d in cleaned
        ]
    return _guarded(target=target, reviewer=reviewer, decisions=cleaned, note=note, withdraw=False, reason=reason, origin=origin)


def item_withdraw(*, item_public_id: UUID | str, by: User, reason: str = "", origin: str = "") -> DecisionOutcome:
    """Withdraw a pending item for ``by`` (its submitter's account) under the same guard as a decision.

    Who may withdraw is the caller's to decide: the API checks that ``by`` is the item's
    submitter before calling (this module knows nothing of API clients). Here ``by`` only
    has to be an active account, and ``reason`` is checked like a decision's note, before
    anything is locked.

    Every open ask is settled at once (answered with a rejection). Returns the outcome:
    won (the item is now WITHDRAWN, ``by`` its winner), or lost to whoever settled it
    first, naming them; the API answers a lost one with 409. Raises a ``DecisionError``
    subclass, changing nothing, as ``item_decide`` does.
    """
    if not (by.is_authenticated and by.is_active):
        raise NotAllowed("only an active account may withdraw an item")
    reason = _text(reason, field="reason")
    target = _Target(key=_item_key(item_public_id), ask_pk=None, spec=None)
    return _guarded(target=target, reviewer=by, decisions=[], note=reason, withdraw=True, origin=origin)


def _target_read(*, item_public_id: UUID | str, ask: str | None) -> _Target:
    key = _item_key(item_public_id)
    asks = ReviewAsk.objects.filter(item__public_id=key)
    columns = ("pk", "payload", "item__policy", "item__requested_by_id", "item__graph", "item__team_id")
    if ask:
        row = asks.filter(interrupt_id=ask).values_list(*columns).first()
        if row is None:
            status = _status_read(key)
            if status is None:
                raise ItemNotFound(f"no item {key}")
            _askless_refuse(status)
            raise ItemNotFound(f"item {key} has no ask {ask!r}")
    else:
        open_rows = list(asks.filter(status=AskStatus.PENDING).values_list(*columns)[:2])
        if len(open_rows) > 1:
            count = asks.filter(status=AskStatus.PENDING).count()
            raise InvalidDecision(f"this item has {count} open asks; name the one you decide (ask)", field="ask")
        row = open_rows[0] if open_rows else asks.order_by("-round", "-position", "-pk").values_list(*columns).first()
        if row is None:
            status = _status_read(key)
            if status is None:
                raise ItemNotFound(f"no item {key}")
            # Before the lock, too: an item read as starting and started by the time the lock
            # is taken would otherwise be judged with no ask, as one whose graph never asked.
            _askless_refuse(status)
            if status == ItemStatus.PENDING:
                # Paused before asks were recorded (an item from an earlier version not yet
                # recovered): record what its graph waits on, then decide as usual.
                item_reconcile(key=key)
                return _target_read(item_public_id=key, ask=None) if asks.exists() else _Target(key=key, ask_pk=None, spec=None)
            # An item whose graph never asked (it needs an operator): judged under the lock.
            return _Target(key=key, ask_pk=None, spec=None)
    return _Target(
        key=key,
        ask_pk=row[0],
        spec=AskSpec.from_payload(row[1]),
        policy=policy_parse(row[2]),
        requester_id=row[3],
        graph=row[4],
        team_id=row[5],
    )


def _status_read(key: str) -> str | None:
    return QueueItem.objects.filter(public_id=key).values_list("status", flat=True).first()


def _askless_refuse(status: str) -> None:
    # Recorded nowhere, like a bad decision (raised under the row lock, it rolls back): there is no ask to judge it against.
    if status == ItemStatus.REFUSED:
        raise ItemRefused("its graph refused this item at its start (see applied_result); there is nothing to decide")
    if status == ItemStatus.STARTING:
        raise ItemStarting(
            "this item is still starting: its graph has not asked for a review yet; "
            "nothing was recorded, decide it once it is in the queue"
        )


def _guarded(
    *,
    target: _Target,
    reviewer: User,
    decisions: list[dict[str, Any]],
    note: str,
    withdraw: bool,
    reason: str = "",
    origin: str = "",
    by_deadline: bool = False,
) -> DecisionOutcome:
    """The locks of the module docstring around one validated attempt (a decision or a withdrawal)."""
    key = target.key
    attempt = _Attempt(
        reviewer=reviewer,
        decisions=decisions,
        note=note,
        requested=Requested.WITHDRAW.value if withdraw else decisions_kind(decisions) if decisions else "",
        requested_at=timezone.now(),
        reason=reason,
        origin=origin,
    )
    timeout = settings.DECISION_LOCK_TIMEOUT
    try:
        with events.events_held(), item_lock(key, timeout=timeout):
            fault_point("after_item_lock", item_key=key)
            outcome = _decide_locked(target=target, attempt=attempt, withdraw=withdraw, by_deadline=by_deadline)
            fault_point("after_commit", item_key=key)
            return outcome
    except LockTimeout:
        raise ItemBusy("another reviewer is deciding this item right now; try again") from None
    except (OperationalError, InterfaceError) as exc:
        if isinstance(exc, OperationalError) and _is_lock_wait(exc):
            raise ItemBusy("the database is busy; try again") from None
        if pool_exhausted(exc) or not _connection_lost(exc):  # no connection lent: the 503 of moderation.core.overload
            raise
        raise DatabaseUnavailable(_connection_lost_message(target)) from exc


def _decide_locked(*, target: _Target, attempt: _Attempt, withdraw: bool, by_deadline: bool = False) -> DecisionOutcome:
    """Check-then-act under the row lock. The caller holds the item's in-process lock."""
    reviewer = attempt.reviewer
    with transaction.atomic():
        item = _item_lock_row(target.key, timeout=settings.DECISION_LOCK_TIMEOUT)
        fault_point("after_row_lock", item_key=target.key)
        _askless_refuse(item.status)
        if not withdraw and _target_stale(target=target, item=item):
            raise _TargetStale
        if item.status != ItemStatus.NEEDS_ATTENTION:
            if withdraw:
                open_asks = list(item.asks.filter(status=AskStatus.PENDING))
                if open_asks:
                    return _withdraw_win(item=item, asks=open_asks, attempt=attempt)
                ask = item.asks.exclude(status=AskStatus.PENDING).order_by("-decided_at", "-pk").first()
            else:
                _decide_right_check(item=item, reviewer=reviewer, by_deadline=by_deadline)
                ask = ReviewAsk.objects.filter(pk=target.ask_pk).first() if target.ask_pk else None
            # The locked row's policy, not the one read before the lock: an escalation may have changed it.
            policy = policy_parse(item.policy)
            if (
                ask is not None
                and ask.status == AskStatus.PENDING
                and settings.CLAIMS_REQUIRED
                and (claim := claim_held_by_other(item=item, user=reviewer))
            ):
                # Votes too: each moves the item toward its resolution, over someone still reading it.
                raise ItemClaimed(
                    f"{claim.holder} has claimed this item ({claim.left_text()}); "
                    "nothing was recorded, decide it when their claim ends"
                )
            if ask is not None and ask.status == AskStatus.PENDING and policy.is_quorum and not by_deadline:
                if attempt.requested not in VoteKind.values:
                    raise InvalidDecision(_not_a_vote(policy=policy, decisions=attempt.decisions, now=True), field="decisions")
                return _vote_cast(item=item, ask=ask, vote=attempt, policy=policy)
            if ask is not None and ask.status == AskStatus.PENDING:
                if by_deadline and policy.is_quorum:
                    _deadline_tally_record(item=item, ask=ask, policy=policy, outcome=decisions_kind(attempt.decisions))
                return _attempt_win(item=item, ask=ask, attempt=attempt)
            if ask is not None:
                return _attempt_lose(item=item, ask=ask, attempt=attempt)
        attention = item.attention or "its graph is not waiting for a review"
        attempt_append(
            item=item,
            **attempt.logged(
                requested=attempt.requested or Requested.APPROVE.value, outcome=AttemptOutcome.INVALID, detail=attention[:300]
            ),
        )
    # Raised only now, so the refused attempt is committed.
    raise ItemNeedsAttention(f"this item needs an operator: {attention}")


def _target_stale(*, target: _Target, item: QueueItem) -> bool:
    """Read with no ask before the locks, the item has one under them: its graph asked meanwhile."""
    return target.ask_pk is None and item.asks.exists()


def _decide_right_check(*, item: QueueItem, reviewer: User, by_deadline: bool) -> None:
    if by_deadline:  # the deadline decides for the team, by the policy's default
        return
    try:
        decide_right_check(team_id=item.team_id, requester_id=item.requested_by_id, user=reviewer)
    except NotAMember as exc:
        raise NotAllowed(str(exc)) from None


def _vote_cast(*, item: QueueItem, ask: ReviewAsk, vote: _Attempt, policy: Policy) -> DecisionOutcome:
    """A vote on an open quorum ask: counted, and resolving the ask if it makes the outcome certain."""
    now = timezone.now()
    voter = vote.reviewer
    Vote.objects.update_or_create(
        ask=ask,
        voter=voter,
        defaults={"vote": vote.requested, "note": vote.note, "reason": vote.reason, "cast_at": now, "team_id": item.team_id},
    )
    votes = _ask_votes(ask)
    eligible = eligible_count(team_id=item.team_id, requester_id=item.requested_by_id)
    resolution = tally_resolve(policy=policy, votes={name: kind for name, kind, _ in votes}, eligible=eligible)
    tally = tally_build(policy=policy, votes=votes, eligible=eligible, resolution=resolution)
    if resolution is None:
        attempt = attempt_append(item=item, ask=ask, **vote.logged(outcome=AttemptOutcome.VOTED))
        item_voted_record(item=item, ask=ask, tally=tally)
        # Done reading: the claim passes to the next voter (moderation.records.claims).
        claim_release(item_public_id=str(item.public_id), user_id=voter.pk)
        outcome = vote_outcome(item=item, ask=ask, requested=vote.requested, attempt=attempt, tally=tally)
        events.after_commit(lambda: events.vote_broadcast(outcome=outcome))
        return outcome
    ask.tally = tally
    ask.save(update_fields=["tally"])
    # The last vote's attempt wins with what the tally resolved, which may not be what it voted.
    return _attempt_win(item=item, ask=ask, attempt=replace(vote, decisions=_resolved_decisions(ask=ask, resolution=resolution)))


def _not_a_vote(*, policy: Policy, decisions: list[dict[str, Any]], now: bool = False) -> str:
    """Why decisions are not a vote: a vote is approve or reject, for the whole ask (the tally resolves the ask, not an action)."""
    said = f"this item is {'now ' if now else ''}decided by vote ({policy.describe()})"
    kinds = {d["type"] for d in decisions}
    if kinds == set(VoteKind.values):
        return (
            f"{said}, and one vote covers all {len(decisions)} actions of the request: you approved some and "
            "rejected others. To reject any of them, vote reject (with your reason); nothing was recorded"
        )
    return f"{said}: vote approve or reject ({' and '.join(sorted(kinds - set(VoteKind.values)))} is not a vote)"


def _ask_votes(ask: ReviewAsk) -> list[tuple[str, str, datetime]]:
    """The ask's counted votes, oldest first, as (voter, approve / reject, cast at)."""
    return [(v.voter.get_username(), v.vote, v.cast_at) for v in ask.votes.select_related("voter").order_by("cast_at", "id")]


def _deadline_tally_record(*, item: QueueItem, ask: ReviewAsk, policy: Policy, outcome: str) -> None:
    """A quorum ask the deadline resolves still hands the graph, the API and the webhooks the votes cast before it."""
    eligible = eligible_count(team_id=item.team_id, requester_id=item.requested_by_id)
    ask.tally = tally_build(
        policy=policy, votes=_ask_votes(ask), eligible=eligible, resolution=Resolution(outcome=outcome, why=TallyWhy.DEADLINE)
    )
    ask.save(update_fields=["tally"])


def _resolved_decisions(*, ask: ReviewAsk, resolution: Resolution) -> list[dict[str, Any]]:
    """LangChain decisions for the whole ask from a resolved tally: approve every action, or reject with the rejecters' words."""
    actions = AskSpec.from_payload(ask.payload).actions
    if resolution.outcome == VoteKind.APPROVE:
        return [{"type": "approve"} for _ in actions]
    rejections = ask.votes.filter(vote=VoteKind.REJECT).select_related("voter").order_by("cast_at", "id")
    words = [(v.voter.get_username(), reason_message(reason=v.reason, message=v.note)) for v in rejections]
    said = "; ".join(f"{name}: {text}" if text else name for name, text in words)
    why = "vetoed" if resolution.why == TallyWhy.VETO else "rejected by vote"
    return [{"type": "reject", "message": f"{why} ({said})"[:2000]} for _ in actions]


def _item_key(item_public_id: UUID | str) -> str:
    try:
        return str(UUID(str(item_public_id)))
    except ValueError:
        raise ItemNotFound(f"no item {item_public_id!r}") from None


def _item_lock_row(key: str, *, timeout: float) -> QueueItem:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{int(timeout * 1000)}ms"])
    try:
        return item_row_lock(public_id=key)  # nothing joined: a joined winner would come back stale
    except QueueItem.DoesNotExist:
        raise ItemNotFound(f"no item {key}") from None


# SQLSTATEs of a connection that is gone: class 08 (connection exception) and 57P01-03
# (admin shutdown, crash shutdown, cannot connect now). A connection that died without
# a word from the server (a network cut) comes with no SQLSTATE at all.
_CONNECTION_LOST_STATES = ("08", "57P01", "57P02", "57P03")


def _connection_lost(exc: OperationalError | InterfaceError) -> bool:
    """Was the error the connection itself going away? Then make sure the next query reconnects."""
    if connection.vendor != "postgresql":
        return False
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    if not (isinstance(exc, InterfaceError) or sqlstate is None or sqlstate.startswith(_CONNECTION_LOST_STATES)):
        return False
    connection.close_if_unusable_or_obsolete()
    return True


def _connection_lost_message(target: _Target) -> str:
    # The graph is only resumed after a commit, so an ask still pending proves nothing
    # was applied; the connection can also drop during COMMIT, after it succeeded.
    try:
        if target.ask_pk and ReviewAsk.objects.filter(pk=target.ask_pk, status=AskStatus.PENDING).exists():
            return NOTHING_APPLIED
    except Exception:  # the database is still out of reach
        logger.warning("could not tell whether item %s was decided before the connection was lost", target.key, exc_info=True)
    return "the database connection was lost; the item may have been decided meanwhile, reload it to see"


def _is_lock_wait(exc: OperationalError) -> bool:
    cause = exc.__cause__
    if getattr(cause, "sqlstate", None) == "55P03":  # PostgreSQL lock_not_available
        return True
    return "database is locked" in str(exc)


def _ask_settle(
    *,
    ask: ReviewAsk,
    status: str,
    decisions: list[dict[str, Any]],
    by: User,
    note: str,
    at: datetime,
    reason: str = "",
) -> None:
    ask.status = status
    ask.decisions = decisions
    ask.decided_by = by
    ask.decided_at = at
    ask.note = note
    ask.reason = reason
    ask.save(update_fields=["status", "decisions", "decided_by", "decided_at", "note", "reason"])


def _item_decided(*, item: QueueItem, status: str | None, by: User, at: datetime, note: str) -> None:
    """The item row after a winning attempt: settled as ``status`` (None: other asks are still
    open, so it stays pending), its apply queued, its counters moved in the same transaction."""
    before = item_counted(item)
    if status is not None:
        item.status = status
        item.decided_by = by
        item.decided_at = at
        item.decision_note = note
    item.apply_state = ApplyState.APPLYING
    item.save(update_fields=["status", "decided_by", "decided_at", "decision_note", "apply_state"])
    counts_apply(before=before, after=item_counted(item))


def _attempt_win(*, item: QueueItem, ask: ReviewAsk, attempt: _Attempt) -> DecisionOutcome:
    reviewer, decisions, note = attempt.reviewer, attempt.decisions, attempt.note
    decided_at = timezone.now()
    _ask_settle(
        ask=ask, status=AskStatus.DECIDED, decisions=decisions, by=reviewer, note=note, at=decided_at, reason=attempt.reason
    )
    # What was decided, not what was asked: a quorum's last vote may be an approval that
    # leaves approval out of reach (a member removed), resolving the ask as rejected.
    status = STATUS_FOR_DECISION[decisions_kind(decisions)]
    settled = not item.asks.filter(status=AskStatus.PENDING).exists()
    _item_decided(item=item, status=status if settled else None, by=reviewer, at=decided_at, note=note)
    logged = attempt_append(
        item=item,
        ask=ask,
        **attempt.logged(outcome=AttemptOutcome.WON, winner=reviewer, winner_status=status, winner_decided_at=decided_at),
    )
    if settled:
        item_settled_record(item=item, ask=ask)
        claim_release(item_public_id=str(item.public_id), user_id=reviewer.pk)
    outcome = outcome_for(item=item, ask=ask, won=True, requested=attempt.requested, attempt=logged)
    # Registered first, so an inline apply's item.applied never goes out before item.decided.
    events.after_commit(lambda: events.decision_broadcast(outcome=outcome))
    item_apply_enqueue(item_id=item.pk)
    fault_point("before_commit", item_key=str(item.public_id))
    return outcome


def _withdraw_win(*, item: QueueItem, asks: list[ReviewAsk], attempt: _Attempt) -> DecisionOutcome:
    by, reason = attempt.reviewer, attempt.note  # a withdrawal's note is its reason
    decided_at = timezone.now()
    message = f"{WITHDRAWN_MESSAGE}: {reason}" if reason else WITHDRAWN_MESSAGE
    for ask in asks:
        rejections = [{"type": "reject", "message": message} for _ in ask.payload["action_requests"]]
        _ask_settle(ask=ask, status=AskStatus.WITHDRAWN, decisions=rejections, by=by, note=reason, at=decided_at)
    _item_decided(item=item, status=ItemStatus.WITHDRAWN, by=by, at=decided_at, note=reason)
    logged = attempt_append(
        item=item,
        ask=asks[0],
        **attempt.logged(outcome=AttemptOutcome.WON, winner=by, winner_status=item.status, winner_decided_at=decided_at),
    )
    item_settled_record(item=item, ask=asks[0])
    outcome = outcome_for(item=item, ask=asks[0], won=True, requested=attempt.requested, attempt=logged)
    events.after_commit(lambda: events.decision_broadcast(outcome=outcome))
    item_apply_enqueue(item_id=item.pk)
    fault_point("before_commit", item_key=str(item.public_id))
    return outcome


def _attempt_lose(*, item: QueueItem, ask: ReviewAsk, attempt: _Attempt) -> DecisionOutcome:
    logged = attempt_append(
        item=item,
        ask=ask,
        **attempt.logged(
            requested=attempt.requested or Requested.WITHDRAW.value,
            outcome=AttemptOutcome.LOST,
            winner=ask.decided_by,
            winner_status=ask_status_word(ask),
            winner_decided_at=ask.decided_at,
        ),
    )
    outcome = outcome_for(item=item, ask=ask, won=False, requested=logged.requested, attempt=logged)
    reviewer_id = attempt.reviewer.pk
    events.after_commit(lambda: events.loser_notify(outcome=outcome, reviewer_id=reviewer_id))
    return outcome


def ask_status_word(ask: ReviewAsk) -> str:
    """The item status an ask's decision stands for (``withdrawn`` for a withdrawal)."""
    if ask.status == AskStatus.WITHDRAWN:
        return ItemStatus.WITHDRAWN.value
    return STATUS_FOR_DECISION[decisions_kind(ask.decisions)].value


DEADLINE_NOTE = "no decision before the deadline"
ESCALATION_PRIORITY_STEP = 10


def ask_deadline_settle(*, ask_pk: int, by: User, outcome: str) -> DecisionOutcome:
    """Resolve an ask whose deadline passed with the policy's default ``outcome`` (approve / reject), as ``by`` (the deadline's account).

    Judged under the same locks as a moderator's decision (the module docstring), so a
    deadline firing while a moderator clicks has one winner; the deadline, when it
    loses, is recorded as a lost attempt like any other loser. Membership and quorum do
    not apply: the deadline decides for the whole team, once.
    """
    row = ReviewAsk.objects.filter(pk=ask_pk).values_list("item__public_id", "payload", "item__policy").first()
    if row is None:
        raise ItemNotFound(f"no ask {ask_pk}")
    spec = AskSpec.from_payload(row[1])
    decisions = [{"type": outcome, **({"message": DEADLINE_NOTE} if outcome == "reject" else {})} for _ in spec.actions]
    target = _Target(key=str(row[0]), ask_pk=ask_pk, spec=spec, policy=policy_parse(row[2]))
    return _guarded(
        target=target,
        reviewer=by,
        decisions=decisions,
        note=DEADLINE_NOTE,
        withdraw=False,
        origin=AttemptOrigin.DEADLINE,
        by_deadline=True,
    )


def ask_escalate(*, ask_pk: int) -> bool:
    """Hand an overdue ask's item to its team's ``escalate_to`` team, with a higher priority; False if it is no longer open.

    Under the item's locks: an escalation and a decision are judged one after the other,
    and a vote after it is judged by the new team's membership and policy. The item takes
    the new team's policy, deadline included (none: it waits for the supervisors).
    """
    key = str(ReviewAsk.objects.filter(pk=ask_pk).values_list("item__public_id", flat=True).first() or "")
    if not key:
        raise ItemNotFound(f"no ask {ask_pk}")
    with events.events_held(), item_lock(key, timeout=settings.DECISION_LOCK_TIMEOUT), transaction.atomic():
        item = _item_lock_row(key, timeout=settings.DECISION_LOCK_TIMEOUT)
        ask = ReviewAsk.objects.get(pk=ask_pk)
        now = timezone.now()
        # Not overdue any more: another worker's sweep escalated it a moment ago.
        overdue = ask.deadline_at is not None and ask.deadline_at <= now
        if ask.status != AskStatus.PENDING or not overdue or item.team is None or item.team.escalate_to is None:
            return False
        to = item.team.escalate_to
        # The supervisors decide by their own team's rules; votes cast so far stay counted (each
        # was cast by a member of the team the item then belonged to, ``Vote.team``).
        policy = team_policy(team=to)
        before = item_counted(item)
        teamstats_escalation_record(team_id=item.team_id, at=now)
        item.team, item.policy, item.escalated_at = to, policy.as_json(), now
        item.priority = min(PRIORITY_MAX, item.priority + ESCALATION_PRIORITY_STEP)
        item.save(update_fields=["team", "policy", "escalated_at", "priority", "rank"])
        counts_apply(before=before, after=item_counted(item))  # its team and priority band moved
        ask.deadline_at = now + timedelta(seconds=to.deadline_seconds) if to.deadline_seconds else None
        ask.save(update_fields=["deadline_at"])
        item_escalated_record(item=item)
        metrics_escalated_record()
        snapshot = {"item_public_id": key, "title": item.title, "team": to.slug, "team_name": to.name}
        events.after_commit(lambda: events.item_escalated_broadcast(**snapshot))
        return True
