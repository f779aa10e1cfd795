"""What a reviewer is told about their decision."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from moderation.models import DecisionAttempt, QueueItem


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

    @property
    def attempt_ref(self) -> str:
        """The attempt's public name: its row id would tell how many attempts the whole site has seen."""
        return f"{self.item_public_id}-{self.attempt_seq}"

    def seconds_ago(self, *, now: datetime | None = None) -> int:
        return seconds_since(self.decided_at, now=now)

    def message(self, *, now: datetime | None = None) -> str:
        if self.won:
            return f"You {self.winner_status} “{self.item_title}”."
        return (
            f"Already reviewed by {self.winner} ({self.winner_status}, {format_ago(self.seconds_ago(now=now))}) "
            "— your decision was not applied"
        )

    def winner_payload(self) -> dict[str, str]:
        return {
            "item": self.item_public_id,
            "title": self.item_title,
            "winner": self.winner,
            "status": self.winner_status,
            "decided_at": self.decided_at.isoformat(),
        }


def seconds_since(moment: datetime, *, now: datetime | None = None) -> int:
    return max(0, int(((now or timezone.now()) - moment).total_seconds()))


def format_ago(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds} s ago"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    return f"{seconds // 3600} h ago"


def outcome_for(*, item: QueueItem, won: bool, requested: str, attempt: DecisionAttempt) -> DecisionOutcome:
    """The outcome of ``attempt`` on a decided ``item`` (its winner is read from the row)."""
    return DecisionOutcome(
        won=won, item_public_id=str(item.public_id), item_title=item.title, requested=requested,
        winner=item.decided_by.get_username(), winner_status=item.status, decided_at=item.decided_at,
        attempt_seq=attempt.seq,
    )
