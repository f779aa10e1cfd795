"""reviewqueue's client: the /api/v1 HTTP client, webhook verification, and LangGraph glue.

``from reviewqueue_client import ReviewQueue`` for the API; ``reviewqueue_client.langgraph``
(needs ``langgraph``) forwards an agent's interrupts and resumes its thread with the decision.
"""

from reviewqueue_client.client import Item, ReviewQueue, ReviewQueueError, WebhookEndpoint
from reviewqueue_client.webhooks import WebhookEvent, WebhookInvalid, webhook_verify

__all__ = ["Item", "ReviewQueue", "ReviewQueueError", "WebhookEndpoint", "WebhookEvent", "WebhookInvalid", "webhook_verify"]
