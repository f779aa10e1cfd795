"""Websocket consumer: joins the dashboard's groups and relays events as JSON."""

from __future__ import annotations

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from moderation import events


class QueueConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.groups_joined = [events.QUEUE_GROUP, events.user_group(user.pk)]
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def item_created(self, event: dict) -> None:
        await self.send_json(event)

    async def item_decided(self, event: dict) -> None:
        await self.send_json(event)

    async def decision_lost(self, event: dict) -> None:
        await self.send_json(event)
