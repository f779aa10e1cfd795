"""What a reviewer (or a withdrawing submitter) is told about their attempt.

Every wording of a won or lost attempt comes from here: the 409 page, the JSON answer
and the live loser notice all read ``DecisionOutcome``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from moderation.graphs.asks import AskSpec, ask_edits_diff, decisions_describe
from moderation.items.models import AskStatus, ItemStatus, QueueItem, Requested, ReviewAsk
from moderation.records.models import DecisionAttempt

REQUESTED_NOUN = {
    Requested.APPROVE: "approval",
    Requested.REJECT: "rejection",
    Requested.WITHDRAW: "withdrawal",
    Requested.EDIT: "edit",
    Requested.RESPOND: "response",
    Requested.MIXED: "decision",
}
# Statuses whose plain verb says too little: the winner's decisions are described instead.
_DESCRIBED = (ItemStatus.EDITED, ItemStatus.ANSWERED, ItemStatus.DECIDED)


@dataclass(frozen=True)
class DecisionOutcome:
    """What happened to one reviewer's decision."""

    won: bool
    item_public_id: str
    item_title: str
    requested: str
    winner: str
    winner_status: str
    decided_at: datetime
    attempt_seq: int  # the attempt's place in its item's log
    ask: str = ""  # the interrupt id decided
    what: str = ""  # the winner's decisions in words: "edited refund (amount 120 → 80)"
    applying: bool = False
    reason: str = ""  # the winner's reason code, for a reject
    # A quorum ask (moderation.policies): the reviewer's vote was counted (resolving the ask
    # or not), and the votes so far, with the resolution once there is one.
    counted: bool = False
    tally: dict = field(default_factory=dict)
    # The winner's edits, as ``ActionEdit.as_payload``: per edited action, each argument changed, added or removed.
    edits: list[dict[str, Any]] = field(default_factory=list)
    # The item's team as the locked row had it when the attempt was judged: whose queue
    # pages its live events go to (None: the item belongs to no team).
    team_id: int | None = None

    @property
    def accepted(self) -> bool:
        """The attempt did what was asked: it won, or its vote counted (a 200 rather than a 409)."""
        return self.won or self.counted

    @property
    def resolved(self) -> bool:
        return bool(self.winner)

    @property
    def _because(self) -> str:
        return f", reason: {self.reason}" if self.reason else ""

    @property
    def attempt_ref(self) -> str:
        """The attempt's public name: its row id would tell how many attempts the whole site has seen."""
        return f"{self.item_public_id}-{self.attempt_seq}"

    def seconds_ago(self, *, now: datetime | None = None) -> int:
        return seconds_since(self.decided_at, now=now)

    @property
    def requested_noun(self) -> str:
        return REQUESTED_NOUN.get(self.requested, self.requested)

    def message(self, *, now: datetime | None = None) -> str:
        if self.counted and not self.won:
            return (
                f"Your {self.requested} vote on “{self.item_title}” is counted: {self.tally.get('summary', '')}. "
                "You can change it until the item resolves."
            )
        if self.won:
            if self.winner_status == ItemStatus.WITHDRAWN:
                return f"You withdrew “{self.item_title}”."
            if self.tally:  # the vote that resolved a quorum ask
                return f"Resolved: {self.winner_status} — your vote counted ({self.tally.get('summary', '')})."
            return f"You {self.winner_status} “{self.item_title}”."
        if self.tally and self.requested != Requested.WITHDRAW:
            settled = self.settled_by(now=now)
            return (
                f"Your vote was not counted: the item was already resolved — {settled[0].lower()}{settled[1:]}; "
                f"{self.tally.get('summary', '')}"
            )
        what = "withdrawal" if self.requested == Requested.WITHDRAW else "decision"
        return f"{self.settled_by(now=now)} — your {what} was not applied"

    def settled_by(self, *, now: datetime | None = None) -> str:
        """Who settled the item, and how long ago: "Already reviewed by alice (approved, 3 s ago)"."""
        ago = format_ago(self.seconds_ago(now=now))
        if self.winner_status == ItemStatus.WITHDRAWN:
            return f"Already withdrawn by {self.winner} ({ago})"
        if self.winner_status in _DESCRIBED and self.what:
            return f"Already reviewed by {self.winner} ({self.what}, {ago})"
        return f"Already reviewed by {self.winner} ({self.winner_status}{self._because}, {ago})"

    def settled_first(self) -> str:
        """What the winner did, for the 409 page: "alice approved this item first"."""
        if self.winner_status == ItemStatus.WITHDRAWN:
            return f"{self.winner} withdrew this item first"
        if self.winner_status in _DESCRIBED and self.what:
            return f"{self.winner} {self.what} first"
        return f"{self.winner} {self.winner_status} this item first" + (f" (reason: {self.reason})" if self.reason else "")

    def loser_notice(self) -> str:
        """The line a loser's other open tabs are shown (live.js words it the same way)."""
        if self.winner_status == ItemStatus.WITHDRAWN:
            first = f"it was withdrawn by {self.winner} first"
        elif self.winner_status in _DESCRIBED and self.what:
            first = f"{self.winner} {self.what} first"
        else:
            first = f"{self.winner} {self.winner_status} it first" + (f" (reason: {self.reason})" if self.reason else "")
        return f"your {self.requested_noun} of item {self.item_title} was not applied: {first}"

    def winner_payload(self) -> dict[str, Any]:
        if not self.resolved:  # a counted vote on a still open ask: nobody has won yet
            return {
                "item": self.item_public_id,
                "title": self.item_title,
                "winner": "",
                "status": "pending",
                "ask": self.ask,
                "tally": self.tally,
            }
        return {
            **({"tally": self.tally} if self.tally else {}),
            "item": self.item_public_id,
            "title": self.item_title,
            "winner": self.winner,
            "status": self.winner_status,
            "decided_at": self.decided_at.isoformat(),
            "ask": self.ask,
            "what": self.what,
            "edits": self.edits,
            "reason": self.reason,
        }


def seconds_since(moment: datetime, *, now: datetime | None = None) -> int:
    return max(0, int(((now or timezone.now()) - moment).total_seconds()))


def format_ago(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds} s ago"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    return f"{seconds // 3600} h ago"


def ask_what(ask: ReviewAsk) -> str:
    """A settled ask's decision in words, as losers, the API and webhooks are told it."""
    if ask.status == AskStatus.WITHDRAWN:
        return "withdrew the item"
    return decisions_describe(spec=AskSpec.from_payload(ask.payload), decisions=ask.decisions)


def ask_edits(ask: ReviewAsk) -> list[dict[str, Any]]:
    """A settled ask's edits as its events and the API say them (``ActionEdit.as_payload``); [] for none."""
    if ask.status == AskStatus.WITHDRAWN or not ask.decisions:
        return []
    return [edit.as_payload() for edit in ask_edits_diff(spec=AskSpec.from_payload(ask.payload), decisions=ask.decisions)]


def outcome_for(
    *,
    item: QueueItem,
    ask: ReviewAsk,
    won: bool,
    requested: str,
    attempt: DecisionAttempt,
    counted: bool = False,
) -> DecisionOutcome:
    """The outcome of ``attempt`` on ``ask``, whose winner (read from the ask's row) has decided it."""
    what = ask_what(ask)
    return DecisionOutcome(
        won=won,
        item_public_id=str(item.public_id),
        item_title=item.title,
        requested=requested,
        winner=ask.decided_by.get_username(),
        winner_status=attempt.winner_status,
        decided_at=ask.decided_at,
        attempt_seq=attempt.seq,
        ask=ask.interrupt_id,
        what=what,
        applying=ask.applied_at is None,
        reason=ask.reason,
        counted=counted or won,
        tally=dict(ask.tally),
        team_id=item.team_id,
        edits=ask_edits(ask),
    )


def vote_outcome(*, item: QueueItem, ask: ReviewAsk, requested: str, attempt: DecisionAttempt, tally: dict) -> DecisionOutcome:
    """A vote counted on an ask that is still open."""
    return DecisionOutcome(
        won=False,
        item_public_id=str(item.public_id),
        item_title=item.title,
        requested=requested,
        winner="",
        winner_status="pending",
        decided_at=attempt.recorded_at,
        attempt_seq=attempt.seq,
        ask=ask.interrupt_id,
        counted=True,
        tally=tally,
        team_id=item.team_id,
    )
