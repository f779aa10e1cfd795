"""The dashboard's websocket: translates between the browser and the channel layer.

One consumer serves both pages: ``ws/queue/`` and ``ws/items/<uuid>/``. The rules
(who is admitted, which groups, what a frame may be, the state snapshot) live in
``moderation.live`` and presence in ``moderation.presence``.

Client -> server: ``{"type": "heartbeat"}`` every ``heartbeat_seconds``; anything
else gets ``{"type": "error", ...}`` and changes nothing.
Server -> client: ``state`` (on connect and after each heartbeat), ``item.created``,
``item.decided``, ``decision.lost``, ``presence.changed``, ``session.ended``.
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from moderation.live import (
    CLOSE_UNAUTHENTICATED,
    FrameError,
    live_frame_parse,
    live_groups,
    live_session_valid,
    live_socket_admit,
    live_state_read,
)
from moderation.presence import presence_join, presence_leave, presence_touch


class LiveConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        self.groups_joined: list[str] = []
        user = self.scope["user"]
        public_id = self.scope["url_route"]["kwargs"].get("public_id")
        self.item_public_id = str(public_id) if public_id else None
        refusal = await database_sync_to_async(live_socket_admit)(user=user, item_public_id=self.item_public_id)
        if refusal is not None:
            await self.close(code=refusal)
            return
        self.user_id = user.pk
        self.username = user.get_username()
        self.session_key = self.scope["session"].session_key
        # Join before reading the state, so nothing can fall between the snapshot and the first event.
        for group in live_groups(user_id=self.user_id, session_key=self.session_key, item_public_id=self.item_public_id):
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.append(group)
        await self.accept()
        if self.item_public_id:
            await database_sync_to_async(presence_join)(
                user_id=self.user_id, item_public_id=self.item_public_id, channel_name=self.channel_name
            )
        await self._state_send()

    async def disconnect(self, code: int) -> None:
        await self._groups_leave()
        if self.item_public_id and hasattr(self, "user_id"):
            await database_sync_to_async(presence_leave)(channel_name=self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not await database_sync_to_async(live_session_valid)(session_key=self.session_key, user_id=self.user_id):
            await self.session_ended({})
            return
        try:
            live_frame_parse(text_data=text_data, bytes_data=bytes_data)
        except FrameError as exc:
            await self.send_json({"type": "error", "error": exc.code, "message": str(exc)})
            return
        if self.item_public_id:
            await database_sync_to_async(presence_touch)(
                user_id=self.user_id, item_public_id=self.item_public_id, channel_name=self.channel_name
            )
        await self._state_send()

    async def relay(self, event: dict[str, Any]) -> None:
        await self.send_json(event)

    item_created = item_decided = decision_lost = presence_changed = relay

    async def session_ended(self, event: dict[str, Any]) -> None:
        # Leave the groups first: a logged-out page must not get one more event.
        await self._groups_leave()
        await self.send_json({"type": "session.ended", "message": "you have been logged out"})
        await self.close(code=CLOSE_UNAUTHENTICATED)

    async def _groups_leave(self) -> None:
        while self.groups_joined:
            await self.channel_layer.group_discard(self.groups_joined.pop(), self.channel_name)

    async def _state_send(self) -> None:
        state = await database_sync_to_async(live_state_read)(username=self.username, item_public_id=self.item_public_id)
        await self.send_json(state)
