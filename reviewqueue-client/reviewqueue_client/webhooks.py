"""reviewqueue's webhooks, verified with the Standard Webhooks library (the signature scheme they use)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError


class WebhookInvalid(Exception):
    """The request is not what reviewqueue signed with this endpoint's secret: headers missing or malformed,
    a signature that does not match, or a timestamp more than five minutes away."""


@dataclass(frozen=True)
class WebhookEvent:
    """A verified event. ``delivery_id`` is its ``webhook-id``: the same on every retry and redelivery of it,
    so a handler that must act once keys on it (a replay within five minutes verifies too)."""

    delivery_id: str
    type: str
    timestamp: str
    data: dict[str, Any]
    raw: dict[str, Any] = field(repr=False)


def webhook_verify(*, secret: str, headers: Mapping[str, str], body: bytes | str) -> WebhookEvent:
    """The event if ``headers`` sign ``body`` with ``secret`` and their timestamp is within five minutes of now;
    ``WebhookInvalid`` for anything else a request can carry (never another exception).

    It does not remember what it verified: the same request sent again within those five
    minutes verifies again. Act once per ``delivery_id`` where that matters (the LangGraph
    glue needs not: its check-then-resume makes a second delivery a no-op).
    """
    signer = Webhook(secret)  # outside the try: a malformed secret is the caller's error, not the request's
    lowered = {str(k).lower(): v for k, v in headers.items()}
    try:
        raw = signer.verify(body, lowered)
    # A malformed header or body (a signature that is not base64, one without "v1,", bytes
    # that are not UTF-8, JSON that does not parse) raises ValueError or TypeError in the library.
    except (WebhookVerificationError, ValueError, TypeError, AttributeError) as exc:
        raise WebhookInvalid(f"{type(exc).__name__}: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str) or not isinstance(raw.get("data", {}), dict):
        raise WebhookInvalid("not a reviewqueue event")
    return WebhookEvent(
        delivery_id=lowered["webhook-id"],
        type=raw["type"],
        timestamp=str(raw.get("timestamp", "")),
        data=raw.get("data") or {},
        raw=raw,
    )
