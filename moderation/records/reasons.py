"""Reason codes: why an item was rejected, from a list the admin keeps, and which of them apply where.

The rule for a reject (``ReasonRuleResolved``) is the first found of: the item's team's
``ReasonRule`` for its graph; the team's rule with an empty ``graph``;
``REJECT_REASON_REQUIRED_BY_GRAPH[graph]``; ``REJECT_REASON_REQUIRED``. A rule offers every
active code of the item's kind (``ReasonKind``: tool calls for the pass-through graph,
content otherwise; ``any`` fits both), only the ones it lists, or none. A rule requiring a
code but offering none requires none.

The code is stored on the ask and the attempt; only where required is it also prefixed to
the message the graph receives. Codes are retired (``active`` off), never deleted in use.
Rules are read before any lock, with the rest of a decision's input.
Reference: operators/reason-codes.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction

from moderation.core.text import TextInvalid, text_check
from moderation.graphs.passthrough import NAME as PASSTHROUGH
from moderation.policies.models import Team
from moderation.records.models import ReasonCode, ReasonKind, ReasonOffer, ReasonRule

GRAPH_MAX_LENGTH = ReasonRule._meta.get_field("graph").max_length


class ReasonInvalid(ValueError):
    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field  # of a rule: which of its fields is wrong


@dataclass(frozen=True)
class ReasonRuleResolved:
    """The reason codes a reject may name (active, in the admin's order) and whether it must name one."""

    codes: list[ReasonCode] = field(default_factory=list)
    required: bool = False
    # Which level it came from, in words: shown to operators ("team payments, graph ask").
    source: str = ""

    @property
    def code_names(self) -> list[str]:
        return [c.code for c in self.codes]


def reason_codes_active() -> list[ReasonCode]:
    return list(ReasonCode.objects.filter(active=True))


def reason_kind(*, graph: str) -> ReasonKind:
    """What a graph's rejects are about: an agent's tool calls (the pass-through graph's asks), else content."""
    return ReasonKind.TOOL_CALL if graph == PASSTHROUGH else ReasonKind.CONTENT


def reason_codes_fitting(*, graph: str) -> list[ReasonCode]:
    """The active codes of ``graph``'s kind, and those that fit any: what "every active code" offers its items."""
    return list(ReasonCode.objects.filter(active=True, kind__in=[reason_kind(graph=graph), ReasonKind.ANY]))


def reason_labels() -> dict[str, str]:
    """Every code's label, retired ones too: old decisions still name them."""
    return dict(ReasonCode.objects.values_list("code", "label"))


def reason_rule(*, team_id: int | None, graph: str = "") -> ReasonRuleResolved:
    """The rule for a reject of an item of team ``team_id`` (None: no team) and graph ``graph``; see the module docstring."""
    if team_id is not None:
        rules = {r.graph: r for r in ReasonRule.objects.filter(team_id=team_id, graph__in={graph, ""}).select_related("team")}
        rule = rules.get(graph) if graph else None
        rule = rule or rules.get("")
        if rule is not None:
            return _rule_resolve(rule, graph=graph)
    if graph in settings.REJECT_REASON_REQUIRED_BY_GRAPH:
        return ReasonRuleResolved(
            codes=reason_codes_fitting(graph=graph),
            required=bool(settings.REJECT_REASON_REQUIRED_BY_GRAPH[graph]),
            source=f"REJECT_REASON_REQUIRED_BY_GRAPH[{graph!r}]",
        )
    return ReasonRuleResolved(
        codes=reason_codes_fitting(graph=graph), required=bool(settings.REJECT_REASON_REQUIRED), source="REJECT_REASON_REQUIRED"
    )


def reason_required(*, team_id: int | None = None, graph: str = "") -> bool:
    """Whether a reject on an item of ``team_id`` and ``graph`` must name a code (``reason_rule``)."""
    return reason_rule(team_id=team_id, graph=graph).required


def reason_check(*, reason: Any, rejecting: bool, rule: ReasonRuleResolved) -> str:
    """The cleaned reason code for a decision under ``rule`` ("" for none); ``ReasonInvalid`` if it cannot go with it."""
    if reason is None or reason == "":
        if rejecting and rule.required:
            raise ReasonInvalid(f"choose a reason for the rejection: one of {', '.join(rule.code_names)}")
        return ""
    if not isinstance(reason, str):
        raise ReasonInvalid("must be a reason code (text)")
    try:
        text_check(text=reason, field="reason")
    except TextInvalid as exc:
        raise ReasonInvalid(str(exc)) from None
    if not rejecting:
        raise ReasonInvalid("a reason goes with a rejection only")
    if not rule.codes:
        raise ReasonInvalid("no reason codes apply to this item's rejections: leave the reason out")
    if reason not in rule.code_names:
        if not ReasonCode.objects.filter(code=reason, active=True).exists():
            raise ReasonInvalid(f"{reason[:40]!r} is not one of the active reason codes")
        raise ReasonInvalid(f"{reason[:40]!r} does not apply to this item; choose from {', '.join(rule.code_names)}")
    return reason


def reason_rule_save(
    *,
    team: Team,
    graph: str = "",
    offer: str | None = None,
    codes: list[str] | None = None,
    required: bool | None = None,
) -> ReasonRule:
    """Create or change ``team``'s rule for ``graph`` ("" for the team's own); a value left None keeps
    the rule's (a new rule: every active code, none required). ``ReasonInvalid``, nothing changed, for
    an unknown offer or code, a "listed" rule listing none, or a rule with no codes that requires one."""
    graph = _graph_clean(graph)
    with transaction.atomic():
        rule = ReasonRule.objects.select_for_update().filter(team=team, graph=graph).first() or ReasonRule(team=team, graph=graph)
        rule.offer = rule.offer if offer is None else offer
        rule.codes = rule.codes if codes is None else codes
        rule.required = rule.required if required is None else required
        rule.codes = reason_rule_check(offer=rule.offer, codes=rule.codes, required=rule.required)
        rule.save()
    return rule


def reason_rule_check(*, offer: str, codes: list[str], required: bool) -> list[str]:
    """The codes a rule of ``offer`` keeps (the listed ones, without repeats; none for another offer);
    ``ReasonInvalid`` naming the field at fault for a rule that cannot be."""
    if offer not in ReasonOffer.values:
        raise ReasonInvalid(f"offer must be one of {', '.join(ReasonOffer.values)}, not {offer!r}", field="offer")
    if offer == ReasonOffer.NONE and required:
        raise ReasonInvalid("a rule that offers no codes cannot require one", field="required")
    if offer != ReasonOffer.LISTED:
        return []
    unknown = sorted(set(codes) - set(ReasonCode.objects.filter(active=True).values_list("code", flat=True)))
    if unknown:
        raise ReasonInvalid(f"unknown or retired reason codes: {', '.join(map(repr, unknown))}", field="codes")
    if not codes:
        raise ReasonInvalid("list the codes the rule offers", field="codes")
    return list(dict.fromkeys(codes))


def reason_rule_delete(*, team: Team, graph: str = "") -> bool:
    """Remove ``team``'s rule for ``graph``: its items fall back to the next level; False if there was none."""
    deleted, _ = ReasonRule.objects.filter(team=team, graph=_graph_clean(graph)).delete()
    return bool(deleted)


def reason_rules_describe(*, team: Team) -> str:
    """``team``'s rules in words, for the ``team`` command: "reasons: spam, abuse required; for ask: none"."""
    parts = []
    for rule in ReasonRule.objects.filter(team=team).order_by("graph"):
        offered = {"all": "every code", "none": "no codes"}.get(rule.offer) or ", ".join(rule.codes)
        parts.append(f"{'for ' + rule.graph + ': ' if rule.graph else ''}{offered}{' required' if rule.required else ''}")
    return "reasons " + "; ".join(parts) if parts else ""


def reason_message(*, reason: str, message: str) -> str:
    """A reject's message to the graph, with its code in front: "spam: link farm"."""
    if not reason:
        return message
    return f"{reason}: {message}" if message else reason


def decisions_rejecting(decisions: list[dict[str, Any]]) -> bool:
    return any(isinstance(d, dict) and d.get("type") == "reject" for d in decisions)


def _graph_clean(graph: str) -> str:
    try:
        graph = text_check(text=graph.strip(), field="graph")
    except TextInvalid as exc:
        raise ReasonInvalid(str(exc)) from None
    if len(graph) > GRAPH_MAX_LENGTH:
        raise ReasonInvalid(f"a graph name has at most {GRAPH_MAX_LENGTH} characters")
    return graph


def _rule_resolve(rule: ReasonRule, *, graph: str) -> ReasonRuleResolved:
    if rule.offer == ReasonOffer.NONE:
        codes = []
    elif rule.offer == ReasonOffer.LISTED:
        codes = [c for c in reason_codes_active() if c.code in rule.codes]
    else:
        codes = reason_codes_fitting(graph=graph)
    where = f"team {rule.team.slug}" + (f", graph {rule.graph}" if rule.graph else "")
    return ReasonRuleResolved(codes=codes, required=rule.required and bool(codes), source=where)
