"""reviewqueue's webhooks, verified with the Standard Webhooks library (the signature scheme they use)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError


class WebhookInvalid(Exception):
    """The body is not what reviewqueue signed with this endpoint's secret (or it is too old, or replayed)."""


def webhook_verify(*, secret: str, headers: Mapping[str, str], body: bytes | str) -> dict[str, Any]:
    """The event (``{"type", "timestamp", "data"}``) if ``headers`` sign ``body`` with ``secret``; ``WebhookInvalid`` otherwise."""
    lowered = {k.lower(): v for k, v in headers.items()}
    try:
        return Webhook(secret).verify(body, lowered)
    except WebhookVerificationError as exc:
        raise WebhookInvalid(str(exc)) from None
