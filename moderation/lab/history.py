"""Jepsen-style histories of decision attempts, and a checker for the guard's promise.

A recorder logs every attempt as an invocation and its completion: ``ok`` (told they won),
``fail`` (told they lost, and who won) or ``unknown`` (timeout, dropped connection, 5xx).
After the run, a final read of the items and their graphs is checked against it:

- among the decisions and withdrawals on an item exactly one wins, and an acknowledged op is
  what the item ended as;
- on a quorum item every counted vote is in the final votes and the resolved tally, one per
  reviewer, none from the requester or a non-member; the item resolves at most once;
- a decided item's graph ran on to its end or its next interrupt, resumed once per decision;
  a remote agent resumed exactly once (``FinalItem.agent_resumes``);
- an item accepted for the worker to start ran its graph from its input once.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from django.db.models import Q

from moderation.lab.waits import progress_wait
from moderation.policies.rules import DEADLINE_USERNAME

Completion = Literal["ok", "fail", "unknown"]


@dataclass
class Op:
    reviewer: str
    item: str
    decision: str
    invoked_at: float
    completion: Completion | None = None
    told_winner: str | None = None
    completed_at: float | None = None
    error: str | None = None
    voted: bool = False  # told their vote counted on a quorum item that did not resolve with it


@dataclass(frozen=True)
class FinalItem:
    """What the database and the checkpointer say about one item after the run."""

    winner: str | None
    winning_attempts: int
    resumes: int
    starts: int = 1  # runs of its graph from an input: one, whoever started it (moderation.review.starts)
    decision: str | None = None  # what won: approve / reject / withdraw; None if undecided or not read
    # Quorum items only (None otherwise): counted votes (voter -> approve / reject), the
    # resolved tally the graph was resumed with (None while open), and counted votes cast
    # by someone not allowed to (the requester, or a non-member at the time).
    votes: dict[str, str] | None = None
    tally: dict[str, str] | None = None
    ineligible: tuple[str, ...] = ()
    # Its graph is at its end or paused at an interrupt, not stalled between its steps
    # (a run killed mid-graph and never run on: ``moderation.graphs.runtime``).
    settled: bool = True
    # A remote ask's agent: how often the step its decision let run ran (None: not an agent's ask, or not counted).
    agent_resumes: int | None = None


@dataclass(frozen=True)
class Anomaly:
    kind: Literal[
        "multiple_winners",
        "lost_decision",
        "misinformed_loser",
        "double_resume",
        "never_resumed",
        "incomplete",
        "vote_lost",
        "tally_incomplete",
        "ineligible_vote",
        "double_start",
        "graph_unsettled",
    ]
    item: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} on {self.item}: {self.detail}"


@dataclass
class HistoryRecorder:
    """Thread-safe log of operations; ``invoke`` then exactly one completion per op."""

    ops: list[Op] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def invoke(self, *, reviewer: str, item: str, decision: str) -> Op:
        op = Op(reviewer=reviewer, item=item, decision=decision, invoked_at=time.monotonic())
        with self._lock:
            self.ops.append(op)
        return op

    def complete(self, op: Op, *, completion: Completion, told_winner: str | None = None, error: str | None = None) -> None:
        op.completion, op.told_winner, op.error, op.completed_at = completion, told_winner, error, time.monotonic()

    def refused(self, op: Op) -> None:
        """Take back an op the guard refused before judging it, recording nothing (an item
        still starting): the reviewer was told nothing happened, and nothing did."""
        with self._lock:
            self.ops.remove(op)

    def complete_from_http(self, op: Op, *, status: int, body: Mapping) -> None:
        """Read the decision endpoint's answer as the reviewer would: 200 won, 409 lost
        naming a winner; anything else (a 5xx, a 409 without a winner) leaves them unsure."""
        if status == 200 and body.get("outcome") == "won":
            self.complete(op, completion="ok", told_winner=body.get("winner"))
        elif status == 200 and body.get("outcome") == "voted":
            op.voted = True
            self.complete(op, completion="ok")
        elif status == 409 and body.get("outcome") == "lost":
            self.complete(op, completion="fail", told_winner=body["winner"])
        else:
            self.complete(op, completion="unknown", error=f"HTTP {status}: {body}")


def history_check(*, ops: Iterable[Op], final: Mapping[str, FinalItem]) -> list[Anomaly]:
    """Every way the history breaks "exactly one decision wins and the loser is told the truth"."""
    by_item: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        by_item[op.item].append(op)
    anomalies: list[Anomaly] = []
    for item, state in final.items():
        item_ops = by_item.get(item, [])
        acknowledged = [op.reviewer for op in item_ops if op.completion == "ok" and not op.voted]
        if state.winning_attempts > 1 or len(set(acknowledged)) > 1:
            anomalies.append(
                Anomaly(
                    "multiple_winners", item, f"told success: {acknowledged}; winning attempts recorded: {state.winning_attempts}"
                )
            )
        if state.votes is not None:
            anomalies += _votes_check(item=item, item_ops=item_ops, state=state)
        for op in item_ops:
            if op.completion != "ok" or op.voted:
                continue
            if op.reviewer != state.winner:
                anomalies.append(
                    Anomaly("lost_decision", item, f"{op.reviewer} was told they won but the decision is {state.winner}'s")
                )
            elif state.decision is not None and op.decision != state.decision:
                anomalies.append(
                    Anomaly("lost_decision", item, f"{op.reviewer} was told their {op.decision} won but {state.decision} did")
                )
        for op in item_ops:
            if op.completion == "fail" and op.told_winner != state.winner:
                anomalies.append(
                    Anomaly(
                        "misinformed_loser", item, f"{op.reviewer} was told {op.told_winner} won; stored winner is {state.winner}"
                    )
                )
            if op.completion is None:
                anomalies.append(Anomaly("incomplete", item, f"{op.reviewer}'s attempt never completed"))
        if state.starts > 1:
            anomalies.append(Anomaly("double_start", item, f"its graph was started {state.starts} times"))
        if state.resumes > 1:
            anomalies.append(Anomaly("double_resume", item, f"review node completed {state.resumes} times"))
        if state.winner is not None and state.resumes == 0:
            anomalies.append(Anomaly("never_resumed", item, f"decided by {state.winner} but its graph never resumed"))
        if state.agent_resumes is not None:
            anomalies += _agent_check(item=item, state=state)
        if state.winner is not None and not state.settled:
            anomalies.append(
                Anomaly(
                    "graph_unsettled",
                    item,
                    f"decided by {state.winner} but its graph neither reached its end nor its next interrupt",
                )
            )
    return anomalies


def _agent_check(*, item: str, state: FinalItem) -> list[Anomaly]:
    if state.agent_resumes > 1:
        return [Anomaly("double_resume", item, f"the agent ran the decided step {state.agent_resumes} times")]
    if state.winner is not None and state.agent_resumes == 0:
        return [Anomaly("never_resumed", item, f"decided by {state.winner} but its agent never resumed")]
    return []


def _votes_check(*, item: str, item_ops: list[Op], state: FinalItem) -> list[Anomaly]:
    anomalies: list[Anomaly] = []
    votes = state.votes or {}
    last: dict[str, Op] = {}
    # The deadline decides for the whole team (moderation.review.deadlines): a resolution, not a vote.
    ballots = (op for op in item_ops if op.completion == "ok" and op.reviewer != DEADLINE_USERNAME)
    for op in sorted(ballots, key=lambda op: op.completed_at or 0):
        last[op.reviewer] = op
    for reviewer, op in last.items():
        if votes.get(reviewer) != op.decision:
            anomalies.append(
                Anomaly(
                    "vote_lost",
                    item,
                    f"{reviewer} was told their {op.decision} vote counted; the final votes say {votes.get(reviewer)}",
                )
            )
    if state.tally is not None and state.tally != votes:
        anomalies.append(Anomaly("tally_incomplete", item, f"resolved with {state.tally}; votes counted {votes}"))
    for voter in state.ineligible:
        anomalies.append(Anomaly("ineligible_vote", item, f"{voter}'s vote counted though they were not allowed to vote"))
    return anomalies


def history_wait_applied(*, items: Iterable[str], stall: float = 30.0) -> None:
    """Wait until the worker has applied every decision on ``items`` (their graphs resumed), or
    until none was applied for ``stall`` seconds (a busy worker is slow, a stuck one never moves).

    The guard answers before the graph runs (``moderation.review.apply``); judging earlier
    would see decided items whose graphs were simply not resumed yet.
    """
    from moderation.items.models import ApplyState, QueueItem

    ids = list(items)
    applying = QueueItem.objects.filter(public_id__in=ids, apply_state=ApplyState.APPLYING)
    progress_wait(lambda: set(applying.values_list("pk", flat=True)), done=lambda left: not left, stall=stall, poll=0.05)


def history_final_read(*, items: Iterable[str]) -> dict[str, FinalItem]:
    """Read the final state of ``items`` from the database and the checkpointer."""
    from django.db.models import Count

    from moderation.graphs.runtime import graph_run_counts
    from moderation.items.models import DECISION_FOR_STATUS, QueueItem
    from moderation.records.models import AttemptOutcome

    rows = (
        QueueItem.objects.filter(public_id__in=list(items))
        .select_related("decided_by")
        .annotate(won=Count("attempts", filter=Q(attempts__outcome=AttemptOutcome.WON)))
    )

    def final(row: QueueItem) -> FinalItem:
        runs = graph_run_counts(name=row.graph, thread_id=row.thread_id)
        return FinalItem(
            winner=row.decided_by.get_username() if row.decided_by else None,
            winning_attempts=row.won,
            resumes=runs.resumes,
            starts=runs.starts,
            decision=DECISION_FOR_STATUS[row.status].value if row.is_decided else None,
            settled=runs.settled,
            **_votes_read(row),
        )

    return {str(row.public_id): final(row) for row in rows}


def _votes_read(item: object) -> dict:
    """The quorum fields of ``FinalItem`` for ``item`` (its latest ask), read from the database."""
    from moderation.policies.models import TeamMembership, Vote
    from moderation.policies.rules import policy_parse
    from moderation.policies.teams import SUPERVISE_PERMISSION

    if not policy_parse(item.policy).is_quorum:
        return {}
    ask = item.asks.order_by("-round", "-position").first()
    votes = list(Vote.objects.filter(ask=ask).select_related("voter"))
    tally = {v["voter"]: v["vote"] for v in ask.tally.get("votes", [])} if ask.tally else None
    ineligible = []
    for vote in votes:
        voter = vote.voter
        if voter.pk == item.requested_by_id or (
            vote.team_id
            and not voter.has_perm(SUPERVISE_PERMISSION)
            and not TeamMembership.objects.filter(
                Q(removed_at__isnull=True) | Q(removed_at__gt=vote.cast_at),
                team_id=vote.team_id,
                user=voter,
                added_at__lte=vote.cast_at,
            ).exists()
        ):
            ineligible.append(voter.get_username())
    return {"votes": {v.voter.get_username(): v.vote for v in votes}, "tally": tally, "ineligible": tuple(ineligible)}
