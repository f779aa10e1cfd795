"""Bulk decisions: one approve or reject for several items, each judged by the guard on its own.

There is deliberately no transaction around the items: each ``item_decide`` commits (or
loses, or is refused) by itself, so one item lost to another moderator, or one that needs
an operator, never undoes the others. What can be checked for all items at once (the
reviewer's right to decide, the decision, the note, the reason, the number of items) is
checked before any item is touched, so a bad request decides nothing.

Bulk decides an item's single open ask only; an item with several open asks needs a
decision per ask, made on its own page.

An unknown item, and one the reviewer may not see (another team's), is refused by its id
as "no such item", before the guard: the result names no title and no team, as its page
would be a 404.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from uuid import UUID

from django.conf import settings
from django.contrib.auth.models import User

from moderation.core.permissions import user_can_decide
from moderation.items.models import QueueItem
from moderation.records.models import AttemptOrigin
from moderation.records.reasons import ReasonInvalid, reason_check, reason_rule
from moderation.records.selectors import items_visible_q
from moderation.review.decisions import (
    DecisionError,
    InvalidDecision,
    NotAModerator,
    decision_validate,
    item_decide,
)

BulkOutcome = Literal["won", "lost", "voted", "refused"]


class BulkInvalid(InvalidDecision):
    """The bulk request as a whole cannot be judged; no item was decided."""


@dataclass(frozen=True)
class BulkResult:
    """What happened to one item of a bulk decision."""

    item: str
    title: str
    outcome: BulkOutcome
    winner: str = ""  # who settled it, for won and lost
    what: str = ""  # what the winner did, in the item's status word: "approved", "rejected", "withdrawn"
    error: str = ""  # why it was refused

    def describe(self) -> str:
        if self.outcome == "won":
            return self.what
        if self.outcome == "lost":
            return f"lost to {self.winner} ({self.what})"
        if self.outcome == "voted":
            return f"vote counted: {self.what}"
        return f"not decided: {self.error}"


def items_decide_bulk(
    *,
    item_public_ids: list[str],
    reviewer: User,
    decision: str,
    note: str = "",
    reason: str | None = None,
    origin: str = AttemptOrigin.DASHBOARD,
) -> list[BulkResult]:
    """Decide every item's single open ask with ``decision`` for ``reviewer``, one guard call per item.

    Returns one result per distinct item, in the order given. Raises ``BulkInvalid`` (or
    ``NotAModerator``), deciding nothing, for an empty list, more than ``BULK_MAX_ITEMS``
    items, or a decision, note or reason that no item could take.
    """
    if not user_can_decide(user=reviewer):
        raise NotAModerator("you do not have permission to decide items")
    keys = list(dict.fromkeys(str(i) for i in item_public_ids))
    if not keys:
        raise BulkInvalid("select at least one item", field="items")
    if len(keys) > settings.BULK_MAX_ITEMS:
        raise BulkInvalid(
            f"{len(keys)} items selected; at most {settings.BULK_MAX_ITEMS} can be decided at once, nothing was decided",
            field="items",
        )
    try:
        decision, note = decision_validate(decision=decision, note=note)
    except InvalidDecision as exc:
        raise BulkInvalid(str(exc), field=exc.field) from None
    visible = _visible(keys, reviewer=reviewer)
    # Each item's own rule (its team and graph): a reason one of them cannot take decides nothing.
    try:
        for team_id, graph in {(team_id, graph) for _, team_id, graph in visible.values()} or {(None, "")}:
            reason_check(reason=reason, rejecting=decision == "reject", rule=reason_rule(team_id=team_id, graph=graph))
    except ReasonInvalid as exc:
        raise BulkInvalid(f"reason: {exc}", field="reason") from None
    titles = {key: title for key, (title, _, _) in visible.items()}
    return [
        _item_decide_one(
            key=key, title=titles[key], reviewer=reviewer, decision=decision, note=note, reason=reason, origin=origin
        )
        if key in titles
        else BulkResult(item=key, title=key, outcome="refused", error="no such item")
        for key in keys
    ]


def _item_decide_one(
    *,
    key: str,
    title: str,
    reviewer: User,
    decision: str,
    note: str,
    reason: str | None,
    origin: str,
) -> BulkResult:
    try:
        outcome = item_decide(item_public_id=key, reviewer=reviewer, decision=decision, note=note, reason=reason, origin=origin)
    except DecisionError as exc:
        message = str(exc)
        if exc.field == "ask":
            message = "it has several open asks; decide it on its own page"
        return BulkResult(item=key, title=title, outcome="refused", error=message)
    if outcome.counted and not outcome.won:  # a quorum item: the vote is in, the item still open
        return BulkResult(item=key, title=outcome.item_title, outcome="voted", what=outcome.tally.get("summary", ""))
    return BulkResult(
        item=key,
        title=outcome.item_title,
        outcome="won" if outcome.won else "lost",
        winner=outcome.winner,
        what=outcome.winner_status,
    )


def _visible(keys: list[str], *, reviewer: User) -> dict[str, tuple[str, int | None, str]]:
    """The title, team and graph of the items ``reviewer`` may see, by id as given."""
    given: dict[str, list[str]] = {}  # each id as a UUID spells it -> as given
    for key in keys:
        try:
            given.setdefault(str(UUID(key)), []).append(key)
        except ValueError:
            continue
    visible = QueueItem.objects.filter(items_visible_q(viewer=reviewer), public_id__in=list(given))
    return {
        key: (title, team_id, graph)
        for pid, title, team_id, graph in visible.values_list("public_id", "title", "team_id", "graph")
        for key in given[str(pid)]
    }
