"""The dashboard's websocket: translates between the browser and the channel layer.

One consumer serves ``ws/queue/`` and ``ws/items/<uuid>/``. The rules (who is admitted, how
many sockets a login may hold, groups, frame rate, the state snapshot) live in
``moderation.live.sockets``; presence in ``moderation.live.presence``.

Client -> server: ``{"type": "heartbeat"}`` only; anything else is answered with an error and
changes nothing; a socket that floods is closed (4429). Server -> client: ``state``,
``item.created``, ``item.decided``, ``item.voted``, ``item.escalated``, ``decision.lost``,
``presence.changed``, ``item.claimed``, ``item.released``, ``session.ended``. Decisions go
through HTTP, never the socket.

Rights are re-read on every heartbeat, on ``rights.changed`` (``moderation.live.rights``) and
at least every ``LIVE_RIGHTS_RECHECK_SECONDS``; a socket whose user lost them is closed
(4401). A socket silent for ``LIVE_SILENT_SECONDS`` is closed (4408), freeing its place under
``LIVE_SOCKETS_PER_SESSION``. Protocol: contributors/live-updates.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.utils import timezone

from moderation.core.permissions import user_can_decide
from moderation.live.presence import presence_join
from moderation.live.sockets import (
    CLOSE_RATE_LIMITED,
    CLOSE_SILENT,
    CLOSE_TOO_MANY_SOCKETS,
    CLOSE_UNAUTHENTICATED,
    RATE_LIMITED_FRAME,
    FrameError,
    live_error_frame,
    live_frame_admit,
    live_frame_budget_new,
    live_frame_parse,
    live_groups,
    live_groups_join,
    live_groups_leave,
    live_heartbeat,
    live_rights_read,
    live_silent,
    live_silent_frame,
    live_socket_admit,
    live_socket_forget,
    live_socket_hold,
    live_state_read,
    too_many_sockets_message,
)
from moderation.records.claims import claim_release
from moderation.records.metrics import metrics_open_track

logger = logging.getLogger(__name__)

# Events passed to the browser as they are (their fields are the frame).
RELAYED = frozenset(
    {
        "item.created",
        "item.decided",
        "item.voted",
        "item.escalated",
        "item.applied",
        "decision.lost",
        "presence.changed",
        "item.claimed",
        "item.released",
    }
)


class LiveConsumer(AsyncJsonWebsocketConsumer):
    channel_name = ""
    item_public_id: str | None = None
    session_key: str | None = None
    forgotten = False
    ended = False
    rights_checked_at = 0.0
    # When the socket was admitted or last answered a heartbeat: silent past LIVE_SILENT_SECONDS, it is closed.
    heard_at = 0.0
    watch: asyncio.Task | None = None
    # When an item page's socket was admitted: leaving releases only claims taken before it.
    opened_at: datetime | None = None
    # Admitted as a moderator (presence, claims) or as a viewer (listening only).
    can_decide = False
    # The groups joined when admitted: a rights check ends the socket once one is no longer its user's.
    groups: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # A client can close between an event's arrival and its delivery; daphne then refuses
        # the send (autobahn's Disconnected) before it has told us of the disconnect. The
        # socket is gone and its disconnect follows, so the message is dropped, not raised.
        async def send_or_drop(message: dict[str, Any]) -> None:
            try:
                await send(message)
            except Exception as exc:
                logger.debug("live: %s to a closed socket dropped (%s: %s)", message["type"], type(exc).__name__, exc)

        # Every frame is weighed against the socket's budget as it arrives, by a pump of its own,
        # not when the consumer gets round to it: a flood is dropped (no task, no database work
        # per frame) and cut off while the consumer may still be busy with admitted frames.
        self.budget = live_frame_budget_new(now=time.monotonic())
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def pump() -> None:
            while True:
                message = await receive()
                if message["type"] == "websocket.receive":
                    verdict = live_frame_admit(budget=self.budget, now=time.monotonic())
                    if verdict == "drop":
                        continue
                    if verdict == "close":
                        logger.warning("live: closing a socket of %s for flooding (4429)", getattr(self, "username", "?"))
                        while not inbox.empty():  # frames admitted but not yet handled go too
                            inbox.get_nowait()
                        await send_or_drop({"type": "websocket.send", "text": json.dumps(RATE_LIMITED_FRAME)})
                        await send_or_drop({"type": "websocket.close", "code": CLOSE_RATE_LIMITED})
                        continue
                inbox.put_nowait(message)
                if message["type"] == "websocket.disconnect":
                    return

        pumping = asyncio.ensure_future(pump())
        # Channels runs disconnect() only when the server's disconnect message reaches a
        # consumer still alive; any exception before it would skip the clean-up and leave a
        # presence row and group subscriptions behind. This runs however the socket ended.
        try:
            with metrics_open_track(kind="socket"):
                await super().__call__(scope, inbox.get, send_or_drop)
        finally:
            pumping.cancel()
            await self._forget()

    async def connect(self) -> None:
        user = self.scope["user"]
        public_id = self.scope["url_route"]["kwargs"].get("public_id")
        self.item_public_id = str(public_id) if public_id else None
        refusal = await database_sync_to_async(live_socket_admit)(user=user, item_public_id=self.item_public_id)
        if refusal is not None:
            await self.close(code=refusal)
            return
        self.user_id = user.pk
        self.can_decide = await database_sync_to_async(user_can_decide)(user=user)
        self.username = user.get_username()
        self.session_key = self.scope["session"].session_key
        if not await sync_to_async(live_socket_hold)(session_key=self.session_key, channel_name=self.channel_name):
            # Accepted, told, then closed: a refused handshake reaches a browser only as 1006.
            await self.accept()
            await self.send_json(live_error_frame(code="too_many_sockets", message=too_many_sockets_message()))
            await self.close(code=CLOSE_TOO_MANY_SOCKETS)
            self.session_key = None  # not counted, so nothing to release
            return
        # Join before reading the state, so nothing can fall between the snapshot and the first event.
        self.groups = await database_sync_to_async(live_groups)(
            user=user, session_key=self.session_key, item_public_id=self.item_public_id
        )
        await live_groups_join(layer=self.channel_layer, channel_name=self.channel_name, groups=self.groups)
        await self.accept()
        if self.item_public_id and self.can_decide:
            self.opened_at = timezone.now()
            await database_sync_to_async(presence_join)(
                user_id=self.user_id, item_public_id=self.item_public_id, channel_name=self.channel_name
            )
        self.rights_checked_at = self.heard_at = time.monotonic()
        self.watch = asyncio.ensure_future(self._watch())
        state = await database_sync_to_async(live_state_read)(
            username=self.username, item_public_id=self.item_public_id, can_decide=self.can_decide
        )
        await self.send_json(state)

    async def disconnect(self, code: int) -> None:
        await self._forget()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            live_frame_parse(text_data=text_data, bytes_data=bytes_data)
        except FrameError as exc:
            await self.send_json(live_error_frame(code=exc.code, message=str(exc)))
            return
        state = await database_sync_to_async(live_heartbeat)(
            session_key=self.session_key,
            user_id=self.user_id,
            username=self.username,
            item_public_id=self.item_public_id,
            channel_name=self.channel_name,
            can_decide=self.can_decide,
            groups=self.groups,
        )
        if state is None:
            await self.rights_changed({})
            return
        self.rights_checked_at = self.heard_at = time.monotonic()
        await self.send_json(state)

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels' dispatch first runs close_old_connections in a thread, for every message:
        # for a relayed event that is a thread hop per socket per event, all through one
        # thread (1,000 hops for one decision seen by 1,000 queue pages), and the relay
        # touches no database. Everything else takes channels' path.
        if message["type"] in RELAYED:
            if not self.ended:  # an event already queued for a socket being closed stays unsent
                await self.send_json(message)
            return
        await super().dispatch(message)

    async def rights_changed(self, event: dict[str, Any]) -> None:
        """Re-read this socket's rights now (the event claims nothing: forging it costs a query)."""
        if self.ended:
            return
        rights = await database_sync_to_async(live_rights_read)(
            session_key=self.session_key,
            user_id=self.user_id,
            can_decide=self.can_decide,
            item_public_id=self.item_public_id,
            groups=self.groups,
        )
        self.rights_checked_at = time.monotonic()
        if rights.lost is not None:
            logger.info("live: closing a socket of %s: %s", self.username, rights.lost)
            await self._end(frame={"type": "session.ended", "message": rights.lost}, code=CLOSE_UNAUTHENTICATED)
        elif rights.can_decide and not self.can_decide:
            # Promoted: the page has no decision forms; a state saying so now, not at its next heartbeat.
            await self.send_json(
                await database_sync_to_async(live_state_read)(
                    username=self.username, item_public_id=self.item_public_id, can_decide=True
                )
            )

    # A logout shows up as its session row being deleted (moderation.live.rights). A
    # "session.ended" someone published to the shared layer claims no more than that:
    # it is checked against the database like any rights change, never just obeyed.
    session_ended = rights_changed

    async def _watch(self) -> None:
        # For a client that sends nothing: its rights are re-read (and changes made behind the
        # ORM's back are seen), and once it has missed its heartbeats it is closed.
        interval = settings.LIVE_RIGHTS_RECHECK_SECONDS
        while not self.ended:
            recheck_at = self.rights_checked_at + interval
            silent_at = self.heard_at + settings.LIVE_SILENT_SECONDS
            await asyncio.sleep(max(0.0, min(recheck_at, silent_at) - time.monotonic()))
            if live_silent(heard_at=self.heard_at, now=time.monotonic()):
                logger.info("live: closing a silent socket of %s (4408)", self.username)
                await self._end(frame=live_silent_frame(), code=CLOSE_SILENT)
                return
            if time.monotonic() - self.rights_checked_at >= interval:
                try:
                    await self.rights_changed({})
                except Exception:  # the database out of reach: try again next interval
                    self.rights_checked_at = time.monotonic()
                    logger.warning("live: could not re-check the rights of %s", self.username, exc_info=True)

    async def _end(self, *, frame: dict[str, Any], code: int) -> None:
        if self.ended:
            return
        self.ended = True
        # Leave the groups first: a socket whose rights are gone must not get one more event.
        await live_groups_leave(layer=self.channel_layer, channel_name=self.channel_name)
        await self.send_json(frame)
        await self.close(code=code)

    async def _forget(self) -> None:
        if self.forgotten or not self.channel_name:
            return
        self.forgotten = True
        if self.watch is not None and self.watch is not asyncio.current_task():
            self.watch.cancel()
        await live_groups_leave(layer=self.channel_layer, channel_name=self.channel_name)
        await database_sync_to_async(live_socket_forget)(
            session_key=self.session_key, channel_name=self.channel_name, on_item=self.opened_at is not None
        )
        if self.opened_at is not None:
            # The page is gone (navigated away, closed, or its connection died): so is its claim.
            await database_sync_to_async(claim_release)(
                item_public_id=self.item_public_id, user_id=self.user_id, taken_before=self.opened_at
            )
