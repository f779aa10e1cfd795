"""reviewqueue's client: the /api/v1 HTTP client, webhook verification, and LangGraph glue.

``from reviewqueue_client import ReviewQueue`` (or ``AsyncReviewQueue``) for the API;
``reviewqueue_client.langgraph`` (needs ``langgraph``) forwards an agent's interrupts and
resumes its thread with the decision, ``reviewqueue_client.aio_langgraph`` the same for async agents.
"""

from reviewqueue_client.client import (
    AsyncReviewQueue,
    Item,
    ReviewQueue,
    ReviewQueueError,
    ReviewQueueUnreachable,
    WebhookEndpoint,
)
from reviewqueue_client.webhooks import WebhookEvent, WebhookInvalid, webhook_verify

__all__ = [
    "AsyncReviewQueue",
    "Item",
    "ReviewQueue",
    "ReviewQueueError",
    "ReviewQueueUnreachable",
    "WebhookEndpoint",
    "WebhookEvent",
    "WebhookInvalid",
    "webhook_verify",
]
