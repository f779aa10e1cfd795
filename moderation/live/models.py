"""The live pages' own rows (``moderation.live``)."""

from django.conf import settings
from django.db import models

from moderation.items.models import QueueItem


class Presence(models.Model):
    """One open item page (one websocket) and when it last proved it is alive.

    See ``moderation.live.presence`` for why this lives in the database.
    """

    channel_name = models.CharField(max_length=200, unique=True)
    item = models.ForeignKey(QueueItem, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    last_seen = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["last_seen"], name="presence_last_seen_idx")]

    def __str__(self) -> str:
        return f"{self.user_id} on {self.item_id} at {self.last_seen:%H:%M:%S}"
