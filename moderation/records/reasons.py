"""Reason codes: why an item was rejected, from a list the admin keeps.

A reject names one active code (``REJECT_REASON_REQUIRED``, on by default, makes it
mandatory; ``REJECT_REASON_REQUIRED_BY_GRAPH`` overrides it per graph); the code is stored on the ask and on the attempt, and travels to the graph
as the start of the reject's message ("spam: <note>"). Codes are never deleted in use:
an admin retires one by turning ``active`` off, and decisions that used it keep it.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from moderation.core.text import TextInvalid, text_check
from moderation.models import ReasonCode


class ReasonInvalid(ValueError):
    pass


def reason_codes_active() -> list[ReasonCode]:
    return list(ReasonCode.objects.filter(active=True))


def reason_labels() -> dict[str, str]:
    """Every code's label, retired ones too: old decisions still name them."""
    return dict(ReasonCode.objects.values_list("code", "label"))


def reason_required(*, graph: str = "") -> bool:
    """Whether a reject on an item of ``graph`` must name a code: ``REJECT_REASON_REQUIRED_BY_GRAPH``, else ``REJECT_REASON_REQUIRED``."""
    return settings.REJECT_REASON_REQUIRED_BY_GRAPH.get(graph, settings.REJECT_REASON_REQUIRED)


def reason_check(*, reason: Any, rejecting: bool, graph: str = "") -> str:
    """The cleaned reason code for a decision on an item of ``graph`` ("" for none); ``ReasonInvalid`` if it cannot go with it."""
    if reason is None or reason == "":
        if rejecting and reason_required(graph=graph):
            raise ReasonInvalid("choose a reason for the rejection")
        return ""
    if not isinstance(reason, str):
        raise ReasonInvalid("must be a reason code (text)")
    try:
        text_check(text=reason, field="reason")
    except TextInvalid as exc:
        raise ReasonInvalid(str(exc)) from None
    if not rejecting:
        raise ReasonInvalid("a reason goes with a rejection only")
    if not ReasonCode.objects.filter(code=reason, active=True).exists():
        raise ReasonInvalid(f"{reason[:40]!r} is not one of the active reason codes")
    return reason


def reason_message(*, reason: str, message: str) -> str:
    """A reject's message to the graph, with its code in front: "spam: link farm"."""
    if not reason:
        return message
    return f"{reason}: {message}" if message else reason


def decisions_rejecting(decisions: list[dict[str, Any]]) -> bool:
    return any(isinstance(d, dict) and d.get("type") == "reject" for d in decisions)
