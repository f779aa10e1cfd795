"""Everything the dashboard is told live, sent only after the database commits.

A failed push is logged and never turns a decision into an error: the HTTP answer already
tells the reviewer, and pages resync on reconnect. A push never waits on a decision's path:
``after_commit`` inside ``events_held`` holds it until the item lock is released; in a server
process it is handed to the server's event loop (each send bounded by
``SEND_TIMEOUT_SECONDS``, at most ``MAX_PUSHES_IN_FLIGHT`` pending); elsewhere it runs in the
caller's thread under the same bound. Without Redis, processes other than the server record
their pushes for the server to relay (``moderation.records.relay``).

Groups: ``queue`` (items of no team), ``team.<id>``, ``supervisors``, ``item.<uuid>``,
``user.<id>``, ``session.<hash>`` (closed at logout). See contributors/live-updates.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import Q

from moderation.items.models import QueueItem
from moderation.policies.models import Team
from moderation.records.relay import relay_follow, relay_record
from moderation.records.selectors import queue_counts

if TYPE_CHECKING:
    from moderation.records.outcomes import DecisionOutcome

logger = logging.getLogger(__name__)

QUEUE_GROUP = "queue"
SUPERVISORS_GROUP = "supervisors"
# A layer that hangs (a black-holed Redis) must not hold a reviewer's HTTP response
# hostage: the push is given up after this long and the client catches up on resync.
SEND_TIMEOUT_SECONDS = 2.0
# Beyond this many pushes still waiting on the layer, new ones are dropped (and logged):
# memory stays bounded however long the layer hangs, and clients resync anyway.
MAX_PUSHES_IN_FLIGHT = 1000


def item_group(public_id: str) -> str:
    return f"item.{public_id}"


def team_group(team_id: int) -> str:
    return f"team.{team_id}"


def queue_groups(*, team_ids: Iterable[int | None]) -> list[str]:
    """The queue pages that may hear of items of these teams (None: no team): everyone's for an item
    of no team; the team's members' and the supervisors' for a team's item."""
    groups = {QUEUE_GROUP if team_id is None else team_group(team_id) for team_id in team_ids}
    if groups - {QUEUE_GROUP}:
        groups.add(SUPERVISORS_GROUP)
    return sorted(groups)


def _item_queue_groups(item_public_id: str) -> list[str]:
    # Read after the commit, so an item's team is the one it has now. The database out of
    # reach: the supervisors only, rather than risk telling everyone of a team's item.
    try:
        team_id = QueueItem.objects.filter(public_id=item_public_id).values_list("team_id", flat=True).first()
    except DatabaseError:
        logger.exception("could not read the team of %s for a live update", item_public_id)
        return [SUPERVISORS_GROUP]
    return queue_groups(team_ids=[team_id])


def user_group(user_id: int) -> str:
    return f"user.{user_id}"


def session_group(session_key: str) -> str:
    # Hashed because group names travel through Redis and a session key is a credential.
    return "session." + hashlib.sha256(session_key.encode()).hexdigest()[:40]


_held = threading.local()
_server_loop: asyncio.AbstractEventLoop | None = None
_in_flight: set[concurrent.futures.Future] = set()
_in_flight_lock = threading.Lock()
_relay_follower: threading.Thread | None = None
_relay_follower_lock = threading.Lock()


def server_loop_register(loop: asyncio.AbstractEventLoop | None) -> None:
    """The ASGI application's event loop: pushes from request threads are handed to it.

    It is also the loop the in-memory layer's consumers wait on, so a push made there
    wakes them; a loop of our own would not. With ``LIVE_RELAY``, the first call also
    starts passing the events of other processes on to this process's sockets.
    """
    global _server_loop
    _server_loop = loop
    if loop is not None and _relay_follower is None and settings.LIVE_RELAY:
        _relay_follower_start()


def push_loop_start() -> asyncio.AbstractEventLoop:
    """For a process with no server loop on a shared layer (the task worker): a loop thread of its own for pushes.

    Each push then is handed off as a server's is (bounded, never waited for), instead of
    starting an event loop, and with it a new channel-layer connection, per push in the
    caller's thread. Not for the in-memory layer: nothing listens to it here.
    """
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="live-pushes", daemon=True).start()
    server_loop_register(loop)
    return loop


def _relay_follower_start() -> None:
    global _relay_follower
    layer = get_channel_layer()
    with _relay_follower_lock:
        if _relay_follower is not None or layer is None:
            return
        _relay_follower = threading.Thread(
            target=relay_follow,
            name="live-relay",
            daemon=True,
            kwargs={"deliver": _relayed_send, "listening": lambda: bool(layer.groups)},
        )
        _relay_follower.start()


def _relayed_send(sends: list[tuple[str, dict[str, Any]]]) -> None:
    loop, layer = _server_loop, get_channel_layer()
    if loop is not None and loop.is_running() and layer is not None:
        _send_in_background(loop, layer, sends)


@contextmanager
def events_held() -> Iterator[None]:
    """Keep back the pushes ``after_commit`` schedules inside the block; send them when it ends.

    Nested blocks hand their pushes to the outermost one.
    """
    if getattr(_held, "pushes", None) is not None:
        yield
        return
    _held.pushes = []
    try:
        yield
    finally:
        pushes, _held.pushes = _held.pushes, None
        for push in pushes:
            push()


def after_commit(push: Callable[[], object]) -> None:
    """Run ``push`` once the current transaction commits (never if it rolls back),
    or, if that happens inside ``events_held``, when the held block ends."""
    transaction.on_commit(lambda: _push_or_hold(push))


def _push_or_hold(push: Callable[[], None]) -> None:
    pushes = getattr(_held, "pushes", None)
    if pushes is None:
        push()
    else:
        pushes.append(push)


def _send(group: str, message: dict[str, Any]) -> None:
    _send_all([(group, message)])


def _send_all(sends: list[tuple[str, dict[str, Any]]]) -> None:
    """Push to several groups at once, each send bounded and logged on its own."""
    layer = get_channel_layer()
    if layer is None:
        return
    loop = _server_loop
    if loop is not None and loop.is_running():
        _send_in_background(loop, layer, sends)
        return
    if settings.LIVE_RELAY:
        # Not the server: nothing listens to this process's in-memory layer.
        try:
            relay_record(sends=sends)
        except Exception as exc:
            _failures_log(sends, [exc] * len(sends))
        return
    try:
        # One trip into an event loop for all groups: each async_to_sync from a plain
        # thread starts a loop of its own.
        async_to_sync(_group_send_all_logged)(layer, sends)
    except Exception as exc:
        _failures_log(sends, [exc] * len(sends))


def _send_in_background(loop: asyncio.AbstractEventLoop, layer: Any, sends: list[tuple[str, dict[str, Any]]]) -> None:
    with _in_flight_lock:
        if len(_in_flight) >= MAX_PUSHES_IN_FLIGHT:
            logger.error(
                "dropped %s: %d pushes are still waiting on the channel layer",
                ", ".join(str(message.get("type")) for _, message in sends),
                len(_in_flight),
            )
            return
        future = asyncio.run_coroutine_threadsafe(_group_send_all_logged(layer, sends), loop)
        _in_flight.add(future)
    future.add_done_callback(_in_flight_discard)


def _in_flight_discard(future: concurrent.futures.Future) -> None:
    with _in_flight_lock:
        _in_flight.discard(future)


async def _group_send_all_logged(layer: Any, sends: list[tuple[str, dict[str, Any]]]) -> None:
    results = await asyncio.gather(
        *(asyncio.wait_for(layer.group_send(group, message), timeout=SEND_TIMEOUT_SECONDS) for group, message in sends),
        return_exceptions=True,
    )
    _failures_log(sends, results)


def _failures_log(sends: list[tuple[str, dict[str, Any]]], results: list[Any]) -> None:
    for (group, message), result in zip(sends, results, strict=False):
        if isinstance(result, BaseException):
            logger.error("could not push %s to %s", message.get("type"), group, exc_info=result)


def _item_send(item_public_id: str, message: dict[str, Any]) -> None:
    """To the item's own pages and the queue pages that may see it."""
    _send_all([(group, message) for group in [*_item_queue_groups(item_public_id), item_group(item_public_id)]])


def _outcome_send(outcome: DecisionOutcome, message: dict[str, Any]) -> None:
    """To the item's own pages and the queue pages of the team that held it when the attempt
    was judged: known from the locked row, so the commit's push reads nothing more."""
    groups = [*queue_groups(team_ids=[outcome.team_id]), item_group(outcome.item_public_id)]
    _send_all([(group, message) for group in groups])


def _counts() -> dict[str, int]:
    # These run in on_commit callbacks; an exception there would turn a committed
    # decision into a 500, so a failed count only leaves the counts to the next resync.
    try:
        return queue_counts().as_dict()
    except DatabaseError:
        logger.exception("could not count the queue for a live update")
        return {}


def item_created_broadcast(*, item: QueueItem) -> None:
    if get_channel_layer() is None:  # nobody to tell: skip counting the queue
        return
    message = {"type": "item.created", "item": str(item.public_id), "title": item.title, "counts": _counts()}
    _send_all([(group, message) for group in queue_groups(team_ids=[item.team_id])])


def decision_broadcast(*, outcome: DecisionOutcome) -> None:
    """Tell everyone an item was decided (called for the winner's commit)."""
    if get_channel_layer() is None:  # nobody to tell: skip counting the queue
        return
    message = {
        "type": "item.decided",
        **outcome.winner_payload(),
        "seconds_ago": outcome.seconds_ago(),
        "counts": _counts(),
    }
    _outcome_send(outcome, message)


def vote_broadcast(*, outcome: DecisionOutcome) -> None:
    """Tell everyone a vote was counted on a quorum ask that is still open (its tally so far)."""
    message = {"type": "item.voted", **outcome.winner_payload(), "voter_requested": outcome.requested}
    _outcome_send(outcome, message)


def item_escalated_broadcast(*, item_public_id: str, title: str, team: str, team_name: str) -> None:
    """Tell the item's new team, the teams that escalate to it (where the row leaves) and its pages that an overdue item was escalated."""
    message = {"type": "item.escalated", "item": item_public_id, "title": title, "team": team, "team_name": team_name}
    try:
        teams = list(Team.objects.filter(Q(slug=team) | Q(escalate_to__slug=team)).values_list("pk", flat=True))
    except DatabaseError:
        logger.exception("could not read the teams of %s for a live update", item_public_id)
        teams = []
    groups = queue_groups(team_ids=teams) if teams else [SUPERVISORS_GROUP]
    _send_all([(group, message) for group in [*groups, item_group(item_public_id)]])


def item_applied_broadcast(*, item_public_id: str, team_id: int | None, title: str, status: str, applied: dict[str, Any]) -> None:
    """Tell everyone the worker ran an item's graph on from its decision (finished, asked again, failed).

    ``team_id``: read from the row the record locked, as a decision's push does, so the push
    after the commit reads nothing more.
    """
    message = {"type": "item.applied", "item": item_public_id, "title": title, "status": status, "applied": applied}
    _send_all([(group, message) for group in [*queue_groups(team_ids=[team_id]), item_group(item_public_id)]])


def item_applied_after_commit(*, item: QueueItem) -> None:
    """``item_applied_broadcast`` once the transaction commits, from the row as the caller locked and
    saved it (so the push reads nothing more, and every caller sends the same fields)."""
    snapshot = {
        "item_public_id": str(item.public_id),
        "team_id": item.team_id,
        "title": item.title,
        "status": item.status,
        "applied": dict(item.applied_result),
    }
    after_commit(lambda: item_applied_broadcast(**snapshot))


def loser_notify(*, outcome: DecisionOutcome, reviewer_id: int) -> None:
    """Tell the losing reviewer's other open tabs their decision was not applied."""
    message = outcome.loser_notice()
    _send(
        user_group(reviewer_id),
        {
            "type": "decision.lost",
            **outcome.winner_payload(),
            "requested": outcome.requested,
            "seconds_ago": outcome.seconds_ago(),
            "message": message,
        },
    )


def presence_broadcast(*, item_public_id: str, viewers: list[str]) -> None:
    """Tell the item's pages and the queue pages who is viewing the item now."""
    message = {"type": "presence.changed", "item": item_public_id, "viewers": viewers}
    _item_send(item_public_id, message)


def claim_broadcast(*, item_public_id: str, holder: str, seconds_left: int) -> None:
    """Tell the queue and the item's pages who claimed the item and for how long (``moderation.records.claims``)."""
    message = {"type": "item.claimed", "item": item_public_id, "holder": holder, "seconds_left": seconds_left}
    _item_send(item_public_id, message)


def claim_released_broadcast(*, item_public_id: str) -> None:
    message = {"type": "item.released", "item": item_public_id}
    _item_send(item_public_id, message)


def rights_changed_broadcast(*, user_ids: Iterable[int] = (), session_key: str | None = None) -> None:
    """Ask the sockets of these users (or of this session) to re-read their rights; see moderation.live.rights."""
    groups = [user_group(user_id) for user_id in user_ids]
    if session_key:
        groups.append(session_group(session_key))
    _send_all([(group, {"type": "rights.changed"}) for group in groups])
