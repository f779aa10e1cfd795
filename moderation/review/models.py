"""The review services' own rows (``moderation.review``): what a reviewer asks for, and the LangGraph
deployments whose threads are reviewed."""

from django.db import models

from moderation.items.models import NO_NUL, QueueItem


class Decision(models.TextChoices):
    """What a reviewer asks for."""

    APPROVE = "approve", "Approve"
    REJECT = "reject", "Reject"


# --- LangGraph deployments (moderation.review.deployments) -----------------------
class Deployment(models.Model):
    """A LangGraph Server deployment whose interrupted threads reviewqueue reviews.

    Its items are submitted by its own service client (``client``: no token, so nobody
    can call the API as it), keyed by ``<thread id>:<interrupt id>`` as their
    ``external_id``: the database's one-item-per-key constraint
    (``item_external_id_unique_per_client``) is what makes a webhook and a sweep, or two
    workers, discovering one interrupt create one item.
    """

    name = models.SlugField(max_length=64, unique=True)
    url = models.URLField(max_length=500)
    # Sent as x-api-key; never shown back (the admin and the commands only say whether one is set).
    api_key = models.CharField(max_length=500, blank=True, default="", validators=[NO_NUL])
    # {graph or assistant id: {"match": "graph_id" | "assistant_id", "team": slug or null, "policy": {...}}}:
    # what is reviewed (threads whose metadata has that key and value), and who decides it.
    graphs = models.JSONField(default=dict)
    client = models.OneToOneField("ApiClient", on_delete=models.PROTECT, related_name="deployment", editable=False)
    # SHA-256 of the secret in its webhook URL (shown once, at registration).
    webhook_digest = models.CharField(max_length=64, editable=False)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # When the last sweep of its threads finished, and what went wrong with it, if anything.
    swept_at = models.DateTimeField(null=True, blank=True, editable=False)
    sweep_error = models.TextField(blank=True, default="", editable=False)

    def __str__(self) -> str:
        return f"{self.name} ({self.url})"


class DeploymentInterrupt(models.Model):
    """An interrupt of a deployment's thread, and the item that asks about it (``moderation.review.remote``).

    Written with the item's first asks (discovery) and, for a later round, before the item's
    own thread asks it: the database allows one item per interrupt, so a sweep racing the
    apply that opens a round cannot make a second item of the round's interrupts.
    """

    deployment = models.ForeignKey(Deployment, on_delete=models.PROTECT, related_name="interrupts")
    thread_id = models.CharField(max_length=128)
    interrupt_id = models.CharField(max_length=64)
    # Purged with its item (``audit_items_purge``).
    item = models.ForeignKey(QueueItem, on_delete=models.CASCADE, related_name="deployment_interrupts")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["deployment", "thread_id", "interrupt_id"], name="deployment_interrupt_asked_once"),
        ]

    def __str__(self) -> str:
        return f"{self.thread_id}:{self.interrupt_id} -> item {self.item_id}"
