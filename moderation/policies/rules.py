"""The approval rules, as pure functions: what a policy is, and when a tally resolves.

A policy (copied onto each item at creation, ``QueueItem.policy``):

- ``approvals``: distinct moderators who must approve; 1 (the default) is the original
  rule, the first decision settles the ask. ``majority``: more than half of the
  eligible moderators instead of a fixed number.
- ``veto``: one rejection ends the vote as rejected. Without it a rejection is one vote,
  and the ask is rejected as soon as approval has become impossible (too few eligible
  moderators left who have not rejected).
- ``deadline_seconds`` / ``on_deadline``: how long an ask may wait, and what then
  (``approve`` / ``reject``: resolved so, by "deadline"; ``escalate``: handed to the
  team's ``escalate_to`` with a higher priority; nothing: it just waits).

A vote resolves the ask the moment the outcome is certain: the Nth approval approves; a
veto, or the rejection that makes N approvals unreachable, rejects.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from moderation.policies.models import APPROVALS_MAX, OnDeadline, TallyWhy, VoteKind

DEADLINE_MAX_SECONDS = 30 * 24 * 3600
# The account a deadline decides as (moderation.review.deadlines); it never logs in, and never votes.
DEADLINE_USERNAME = "deadline"
PAST: dict[str, str] = {VoteKind.APPROVE: "approved", VoteKind.REJECT: "rejected"}


class PolicyInvalid(ValueError):
    """A policy that is malformed or cannot be satisfied; ``field`` names where."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Policy:
    approvals: int = 1
    majority: bool = False
    veto: bool = False
    deadline_seconds: int | None = None
    on_deadline: str = OnDeadline.NOTHING.value

    @property
    def is_quorum(self) -> bool:
        """Votes are counted (anything but "the first decision settles it")."""
        return self.majority or self.approvals > 1

    def needed(self, *, eligible: int) -> int:
        return eligible // 2 + 1 if self.majority else self.approvals

    def as_json(self) -> dict[str, Any]:
        # Flat fields: no need for asdict's recursive copy (every queue row parses its policy).
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def describe(self) -> str:
        if not self.is_quorum:
            return "one decision settles it"
        words = "a majority of the team" if self.majority else f"{self.approvals} approvals"
        return words + (", one rejection vetoes" if self.veto else "")


def policy_parse(value: Any, *, base: Policy | None = None) -> Policy:
    """A policy from JSON (``{"approvals": 2, "veto": true, ...}``), over ``base``'s values; PolicyInvalid names the bad field."""
    base = base or Policy()
    if value in (None, {}):
        return base
    if not isinstance(value, dict):
        raise PolicyInvalid("a policy must be a JSON object", field="policy")
    unknown = sorted(set(value) - set(Policy.__dataclass_fields__))
    if unknown:
        raise PolicyInvalid(f"unknown policy field(s): {', '.join(unknown)}", field=f"policy.{unknown[0]}")
    fields = {**base.as_json(), **value}
    for name, field_value in fields.items():
        policy_field_check(name=name, value=field_value)
    if fields["on_deadline"] and fields["deadline_seconds"] is None:
        raise PolicyInvalid("on_deadline needs deadline_seconds", field="policy.deadline_seconds")
    return Policy(**fields)


def _whole(value: Any, *, most: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and 1 <= value <= most


def policy_field_check(*, name: str, value: Any) -> None:
    """One policy field's own rule; PolicyInvalid names it. ``policy_parse`` checks every field with it, and the
    API's schema each field it is sent (``moderation.api.schemas.PolicyIn``)."""
    if name == "approvals" and not _whole(value, most=APPROVALS_MAX):
        raise PolicyInvalid(f"approvals must be a whole number from 1 to {APPROVALS_MAX}", field="policy.approvals")
    if name in ("majority", "veto") and not isinstance(value, bool):
        raise PolicyInvalid(f"{name} must be true or false", field=f"policy.{name}")
    if name == "deadline_seconds" and value is not None and not _whole(value, most=DEADLINE_MAX_SECONDS):
        raise PolicyInvalid(
            f"deadline_seconds must be a whole number from 1 to {DEADLINE_MAX_SECONDS}", field="policy.deadline_seconds"
        )
    if name == "on_deadline" and value not in OnDeadline.values:
        raise PolicyInvalid(
            f"on_deadline must be one of {', '.join(v or '(empty)' for v in OnDeadline.values)}", field="policy.on_deadline"
        )


def policy_weakenings(*, base: Policy, asked: Policy) -> list[tuple[str, str]]:
    """Where ``asked`` is weaker than ``base`` (a team's policy): (field, why) pairs; none when it is as strict or stricter.

    Weaker means that some votes, at some moment, would approve the item under ``asked``
    and not yet under ``base``, or that the item would reach other hands than ``base``
    sends it to. Per field (README "Approval policies"):

    - ``approvals`` may be raised, never lowered; ``veto`` turned on, never off;
    - ``majority`` may be turned on only over a team whose ``approvals`` is 1 (a majority
      of a small team can be fewer than a fixed count), and never turned off (a team that
      grows needs more than any fixed count);
    - the deadline: ``approve`` approves without anyone, so only the team's own, no
      sooner; ``reject`` approves nothing, so it may be added over a team that waits or
      approves, and brought forward (never put off) over one that rejects or escalates;
      waiting (``""``) drops an auto-approval, but not the team's rejection or escalation;
      ``escalate`` hands the item to the supervisor team and its own policy, which may be
      weaker or stricter, so only the team's own, at the team's time.
    """
    found = []
    if asked.approvals < base.approvals:
        found.append(("policy.approvals", f"approvals {asked.approvals} is fewer than its {base.approvals}"))
    if base.veto and not asked.veto:
        found.append(("policy.veto", "its veto cannot be turned off"))
    if base.majority and not asked.majority:
        found.append(("policy.majority", "its majority cannot be turned off"))
    elif asked.majority and not base.majority and base.approvals > 1:
        found.append(("policy.majority", f"a majority can be fewer than its {base.approvals} approvals"))
    deadline = _deadline_weakening(base=base, asked=asked)
    if deadline:
        found.append(deadline)
    return found


def _deadline_weakening(*, base: Policy, asked: Policy) -> tuple[str, str] | None:
    theirs, ours = base.on_deadline, asked.on_deadline
    later = (asked.deadline_seconds or 0) > (base.deadline_seconds or 0)
    then = f"{theirs or 'nothing'} after {base.deadline_seconds} s" if theirs else "no deadline action"
    if ours == OnDeadline.APPROVE:
        if theirs != OnDeadline.APPROVE:
            return "policy.on_deadline", f"on_deadline approve approves without a moderator; it has {then}"
        if (asked.deadline_seconds or 0) < (base.deadline_seconds or 0):
            return "policy.deadline_seconds", f"deadline_seconds {asked.deadline_seconds} approves sooner than its {then}"
    elif ours == OnDeadline.REJECT:
        if theirs in (OnDeadline.REJECT, OnDeadline.ESCALATE) and later:
            return "policy.deadline_seconds", f"deadline_seconds {asked.deadline_seconds} is later than its {then}"
    elif ours == OnDeadline.ESCALATE:
        if theirs != OnDeadline.ESCALATE:
            return "policy.on_deadline", f"on_deadline escalate hands the item to other moderators; it has {then}"
        if asked.deadline_seconds != base.deadline_seconds:
            return "policy.deadline_seconds", f"its escalation ({then}) cannot be moved"
    elif theirs in (OnDeadline.REJECT, OnDeadline.ESCALATE):
        return "policy.on_deadline", f"its deadline action ({then}) cannot be dropped"
    return None


def ask_deadline_weakening(*, policy: Policy, seconds: int) -> str | None:
    """Why an ask's own ``deadline_seconds`` may not stand over ``policy`` (its item's), or None.

    The rule a submitted policy obeys (``policy_weakenings``' deadline part), with the
    item's policy as the base: an ask may bring an auto-rejection forward or put an
    auto-approval off, never approve sooner, reject later or move an escalation. The
    item's policy is already no weaker than its team's, so neither is the ask's deadline.
    """
    if not 1 <= seconds <= DEADLINE_MAX_SECONDS:
        return f"deadline_seconds must be a whole number from 1 to {DEADLINE_MAX_SECONDS}"
    found = _deadline_weakening(base=policy, asked=replace(policy, deadline_seconds=seconds))
    return found[1] if found else None


def policy_satisfiable_check(*, policy: Policy, eligible: int, team: str) -> None:
    """Refuse a policy no tally could ever approve: more approvals than moderators who may vote."""
    if not policy.majority and policy.approvals > eligible:
        raise PolicyInvalid(
            f"{policy.approvals} approvals can never be reached: {team} has {eligible} moderator(s) who may vote",
            field="policy.approvals",
        )


@dataclass(frozen=True)
class Resolution:
    outcome: str  # approve / reject
    why: TallyWhy


def tally_resolve(*, policy: Policy, votes: dict[str, str], eligible: int) -> Resolution | None:
    """The resolution ``votes`` (voter → approve / reject) force, or None while it is still open.

    ``eligible``: moderators who may vote on the item (voters included). A voter outside
    it (a supervisor) still counts, so the remaining voters are never fewer than zero.
    """
    approvals = sum(1 for v in votes.values() if v == VoteKind.APPROVE)
    rejections = len(votes) - approvals
    eligible = max(eligible, len(votes))
    needed = policy.needed(eligible=eligible)
    if policy.veto and rejections:
        return Resolution(outcome="reject", why=TallyWhy.VETO)
    if approvals >= needed:
        return Resolution(outcome="approve", why=TallyWhy.QUORUM)
    if approvals + (eligible - len(votes)) < needed:
        return Resolution(outcome="reject", why=TallyWhy.IMPOSSIBLE)
    return None


def tally_build(
    *,
    policy: Policy,
    votes: list[tuple[str, str, datetime]],
    eligible: int,
    resolution: Resolution | None,
) -> dict[str, Any]:
    """The votes (voter, approve / reject, cast at; oldest first) as the API, the pages, the events and the resumed graph read them."""
    return {
        "needed": policy.needed(eligible=max(eligible, len(votes))),
        "eligible": eligible,
        "veto": policy.veto,
        "votes": [{"voter": name, "vote": kind, "at": at.isoformat()} for name, kind, at in votes],
        "resolution": resolution.outcome if resolution else None,
        # TallyWhy(...) refuses a why the API's schema would not read (it reads the same enum).
        "why": TallyWhy(resolution.why).value if resolution else None,
        "summary": tally_describe(policy=policy, votes=[(n, k) for n, k, _ in votes], eligible=eligible, resolution=resolution),
    }


def tally_describe(*, policy: Policy, votes: list[tuple[str, str]], eligible: int, resolution: Resolution | None) -> str:
    """ "2 of 3 approvals: alice, bob · carol rejected — vetoed" """
    approvers = [v for v, kind in votes if kind == VoteKind.APPROVE]
    rejecters = [v for v, kind in votes if kind == VoteKind.REJECT]
    text = f"{len(approvers)} of {policy.needed(eligible=max(eligible, len(votes)))} approvals"
    if approvers:
        text += ": " + ", ".join(approvers)
    if rejecters:
        text += " · " + ", ".join(rejecters) + " rejected"
    if resolution is not None:
        text += {
            TallyWhy.VETO: " — vetoed",
            TallyWhy.QUORUM: " — approved",
            TallyWhy.IMPOSSIBLE: " — approval no longer possible",
            TallyWhy.DEADLINE: f" — {PAST[resolution.outcome]} by the deadline",
        }[resolution.why]
    return text
