"""Sockets lose what their user lost: rights are re-read on every change, on any server.

Every socket here sends nothing after connecting (a page left open in a background tab):
the server alone must notice and close it, and no event may reach it afterwards.
"""

import asyncio
import json

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.contrib.auth.models import Group, Permission
from django.contrib.sessions.models import Session
from django.core.management import call_command
from django.db import connection
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from e2e.server import LiveServer
from moderation.core.permissions import MODERATORS_GROUP
from moderation.live.sockets import CLOSE_UNAUTHENTICATED, LOST_DECIDE_MESSAGE, LOST_ITEM_MESSAGE, LOST_TEAM_MESSAGE
from moderation.policies.models import Team, TeamMembership
from moderation.policies.teams import team_member_add, team_member_remove
from moderation.records import events
from moderation.review.items import item_create
from moderation.tests.real_server import Reviewer, redis_env
from moderation.tests.sockets import (  # noqa: F401 (fixtures)
    decide,
    fresh_layer,
    login,
    next_of,
    opened,
    session_of,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

# Well under LIVE_RIGHTS_RECHECK_SECONDS (10 s): these must come from the change itself.
AT_ONCE = 3


async def _ended(communicator, *, timeout: float = AT_ONCE) -> dict:
    frame = await next_of_within(communicator, "session.ended", timeout=timeout)
    closed = await communicator.receive_output(timeout=timeout)
    assert (closed["type"], closed.get("code")) == ("websocket.close", CLOSE_UNAUTHENTICATED), closed
    return frame


async def next_of_within(communicator, kind, *, timeout):
    while True:
        frame = await communicator.receive_json_from(timeout=timeout)
        if frame["type"] == kind:
            return frame
        assert frame["type"] in {"presence.changed", "item.created"}, frame


def _revocations():
    group = lambda user: user.groups.remove(Group.objects.get(name=MODERATORS_GROUP))  # noqa: E731

    def deactivate(user):
        user.is_active = False
        user.save()

    def password_reset(user):
        user.set_password("a-new-password-after-an-incident")
        user.save()

    def sessions_deleted(user):
        for session in Session.objects.all():
            if session.get_decoded().get("_auth_user_id") == str(user.pk):
                session.delete()

    def group_loses_permission(user):
        Group.objects.get(name=MODERATORS_GROUP).permissions.clear()

    def group_deleted(user):
        Group.objects.get(name=MODERATORS_GROUP).delete()

    return {
        "removed from moderators": (group, LOST_DECIDE_MESSAGE),
        "deactivated": (deactivate, "you have been logged out"),
        "password reset": (password_reset, "you have been logged out"),
        "sessions deleted": (sessions_deleted, "you have been logged out"),
        "group loses the permission": (group_loses_permission, LOST_DECIDE_MESSAGE),
        "group deleted": (group_deleted, LOST_DECIDE_MESSAGE),
    }


def _own_permission(user):
    user.user_permissions.add(Permission.objects.get(codename="decide_item"))
    return type(user).objects.get(pk=user.pk)  # fresh: permissions are cached per instance


@pytest.mark.parametrize("revoke", list(_revocations()))
async def test_a_silent_socket_is_closed_at_once_when_its_rights_go(alice, bob, make_item, login, revoke):
    change, message = _revocations()[revoke]
    item = await database_sync_to_async(make_item)(title="Secret title")
    # bob holds the permission himself too, so he keeps it whatever happens to the group.
    bob = await database_sync_to_async(_own_permission)(bob)
    queue_tab, _ = await opened("/ws/queue/", await database_sync_to_async(login)(alice))
    bob_tab, _ = await opened("/ws/queue/", await database_sync_to_async(login)(bob))

    await database_sync_to_async(change)(alice)
    assert (await _ended(queue_tab))["message"] == message

    await decide(item_public_id=item.public_id, reviewer=bob, decision="approve")
    assert (await next_of(bob_tab, "item.decided"))["title"] == "Secret title"  # others still hear it
    assert await queue_tab.receive_nothing(timeout=0.5)  # the closed socket hears nothing more
    await bob_tab.disconnect()


@pytest.mark.parametrize("revoke", ["deactivated", "password reset", "sessions deleted"])
async def test_a_viewers_socket_is_closed_at_once_when_its_login_goes(make_viewer, login, revoke):
    change, message = _revocations()[revoke]
    dave = await database_sync_to_async(make_viewer)("dave")
    tab, state = await opened("/ws/queue/", await database_sync_to_async(login)(dave))
    assert state["can_decide"] is False

    await database_sync_to_async(change)(dave)
    assert (await _ended(tab))["message"] == message
    await tab.disconnect()


async def test_a_viewer_made_moderator_is_told_at_once_and_the_socket_stays_read_only(make_viewer, login, make_item):
    """The page, rendered without decision forms, hears it may now decide without waiting for a
    heartbeat (live.js then asks for a reload); the socket keeps what it was admitted as: it
    never shows the viewer as present on the item."""
    item = await database_sync_to_async(make_item)(title="Promoted")
    dave = await database_sync_to_async(make_viewer)("dave")
    tab, state = await opened(f"/ws/items/{item.public_id}/", await database_sync_to_async(login)(dave))
    assert state["can_decide"] is False
    await database_sync_to_async(lambda: dave.groups.add(Group.objects.get(name=MODERATORS_GROUP)))()
    told = await next_of_within(tab, "state", timeout=AT_ONCE)
    assert (told["can_decide"], told["viewers"]) == (True, [])
    await tab.send_json_to({"type": "heartbeat"})
    after = await next_of(tab, "state")
    assert (after["can_decide"], after["viewers"]) == (True, [])  # still not present: admitted read-only
    await tab.disconnect()


async def test_an_unrelated_change_leaves_the_socket_open(alice, login, make_item):
    tab, _ = await opened("/ws/queue/", await database_sync_to_async(login)(alice))

    def harmless(user):
        user.first_name = "Alice"
        user.save()  # announced, re-checked, still a moderator
        user.user_permissions.add(Permission.objects.get(codename="view_queueitem"))

    await database_sync_to_async(harmless)(alice)
    await database_sync_to_async(make_item)(title="Still live")
    assert (await next_of(tab, "item.created"))["title"] == "Still live"
    await tab.disconnect()


async def test_a_change_behind_the_orms_back_is_caught_by_the_periodic_recheck(alice, login, settings):
    settings.LIVE_RIGHTS_RECHECK_SECONDS = 1
    client = await database_sync_to_async(login)(alice)
    tab, _ = await opened("/ws/queue/", client)

    def raw_delete(session_key):
        with connection.cursor() as cursor:  # no signal: only the socket's own re-check can see it
            cursor.execute("DELETE FROM django_session WHERE session_key = %s", [session_key])

    await database_sync_to_async(raw_delete)(session_of(client))
    assert (await _ended(tab, timeout=4))["message"] == "you have been logged out"


async def test_a_forged_rights_changed_closes_nothing(alice, login):
    tab, _ = await opened("/ws/queue/", await database_sync_to_async(login)(alice))
    await get_channel_layer().group_send(events.user_group(alice.pk), {"type": "rights.changed"})
    assert await tab.receive_nothing(timeout=1)  # re-checked, still a moderator: open and quiet
    await tab.send_json_to({"type": "heartbeat"})
    assert (await next_of(tab, "state"))["you"] == "alice"
    await tab.disconnect()


@pytest.mark.timeout(120)
async def test_a_change_made_in_another_process_closes_the_socket_through_the_layer(tmp_path):
    """A real server on Redis; the operator's command runs in a process of its own, as on another host."""
    # The periodic re-check is pushed far out: only the change's own message can close the socket in time.
    server = LiveServer(tmp_path / "site", extra_env={**redis_env("rights"), "LIVE_RIGHTS_RECHECK_SECONDS": "300"})
    seeded = await asyncio.to_thread(server.seed, users=["alice", "bob"], items=1, prefix="Rights")
    await server.astart()
    try:
        tabs = {}
        for name in ("alice", "bob"):
            reviewer = Reviewer(server, name, seeded.sessions[name])
            tabs[name] = await connect(
                f"ws://127.0.0.1:{server.port}/ws/queue/",
                origin=f"http://127.0.0.1:{server.port}",
                additional_headers=reviewer.ws_headers(),
                open_timeout=10,
                ping_interval=None,
            )
            assert json.loads(await asyncio.wait_for(tabs[name].recv(), 10))["type"] == "state"
        await asyncio.to_thread(server.manage, "moderator_add", "alice", "--remove")
        frames = []
        with pytest.raises(ConnectionClosed):
            while True:  # until the server closes the socket
                frames.append(json.loads(await asyncio.wait_for(tabs["alice"].recv(), 10)))
        assert tabs["alice"].close_code == CLOSE_UNAUTHENTICATED
        assert frames[-1] == {"type": "session.ended", "message": LOST_DECIDE_MESSAGE}
        status, _ = await asyncio.to_thread(Reviewer(server, "bob", seeded.sessions["bob"]).decide, seeded.items[0], "approve")
        assert status == 200
        decided = json.loads(await asyncio.wait_for(tabs["bob"].recv(), 10))
        assert decided["type"] == "item.decided"  # bob, untouched, still hears everything
        await tabs["bob"].close()
    finally:
        await server.aclose()


async def test_a_forged_session_end_closes_nothing_a_real_logout_closes(alice, login):
    client = await database_sync_to_async(login)(alice)
    tab, _ = await opened("/ws/queue/", client)
    await get_channel_layer().group_send(events.session_group(session_of(client)), {"type": "session.ended"})
    assert await tab.receive_nothing(timeout=1)  # the session is alive: nothing forwarded, nothing closed
    assert (await database_sync_to_async(client.post)("/accounts/logout/")).status_code == 302
    assert (await _ended(tab))["message"] == "you have been logged out"


def _team_item(title: str, team: str = "payments"):
    return item_create(title=title, body="Order 1234.", source="shop", team=team)


def _memberships_end():
    return {
        "manage.py team --remove": lambda user: call_command("team", "payments", "--remove", user.username),
        "team_member_remove (the admin's)": lambda user: team_member_remove(team=Team.objects.get(slug="payments"), user=user),
        "membership row deleted": lambda user: TeamMembership.objects.filter(user=user).delete(),
    }


@pytest.mark.parametrize("end", list(_memberships_end()))
async def test_a_removed_team_members_queue_socket_ends_at_once_and_hears_no_more_of_the_team(payments, alice, bob, login, end):
    """The probe's finding: a member removed from a team kept hearing the team's new items on the
    socket opened before. It ends at once; the page reconnects to the queues its user may see now."""
    alice_client = await database_sync_to_async(login)(alice)
    alice_tab, _ = await opened("/ws/queue/", alice_client)
    bob_tab, _ = await opened("/ws/queue/", await database_sync_to_async(login)(bob))

    await database_sync_to_async(_memberships_end()[end])(alice)
    assert (await _ended(alice_tab))["message"] == LOST_TEAM_MESSAGE

    await database_sync_to_async(_team_item)("Refund for the CEO")
    assert (await next_of(bob_tab, "item.created"))["title"] == "Refund for the CEO"  # a member still hears it
    assert await alice_tab.receive_nothing(timeout=0.5)
    # Reconnected (live.js does, the session being alive): items of no team, never the team's.
    again, _ = await opened("/ws/queue/", alice_client)
    await database_sync_to_async(_team_item)("Refund for the CFO")
    await database_sync_to_async(item_create)(title="A post of no team", body="Hello.", source="forum")
    assert (await next_of(again, "item.created"))["title"] == "A post of no team"
    await again.disconnect()
    await bob_tab.disconnect()


async def test_a_team_membership_gained_or_another_members_removal_leaves_the_socket_open(payments, alice, bob, login):
    """The negative control: the same signals fire, the socket re-checks and stays."""
    tab, _ = await opened("/ws/queue/", await database_sync_to_async(login)(alice))

    def changes():
        team_member_add(team=Team.objects.create(slug="shop", name="Shop"), user=alice)
        team_member_remove(team=Team.objects.get(slug="payments"), user=bob)

    await database_sync_to_async(changes)()
    await database_sync_to_async(_team_item)("Still a member")
    assert (await next_of(tab, "item.created"))["title"] == "Still a member"
    await tab.disconnect()


async def test_an_item_page_ends_when_its_user_may_no_longer_see_the_item(payments, alice, login):
    item = await database_sync_to_async(_team_item)("Refund")
    tab, _ = await opened(f"/ws/items/{item.public_id}/", await database_sync_to_async(login)(alice))
    await database_sync_to_async(_memberships_end()["manage.py team --remove"])(alice)
    assert (await _ended(tab))["message"] == LOST_ITEM_MESSAGE


async def test_a_supervisor_who_stops_being_one_leaves_every_teams_queue(payments, carol, login):
    perm = await database_sync_to_async(Permission.objects.get)(codename="supervise_teams")
    await database_sync_to_async(carol.user_permissions.add)(perm)
    await database_sync_to_async(Team.objects.create)(slug="shop", name="Shop")
    tab, _ = await opened("/ws/queue/", await database_sync_to_async(login)(carol))
    await database_sync_to_async(_team_item)("Shop refund", team="shop")
    assert (await next_of(tab, "item.created"))["title"] == "Shop refund"  # a supervisor hears every team
    await database_sync_to_async(carol.user_permissions.remove)(perm)
    assert (await _ended(tab))["message"] == LOST_TEAM_MESSAGE


@pytest.mark.timeout(120)
async def test_a_team_removal_in_another_process_ends_the_socket_through_the_layer(tmp_path):
    """The probe's own steps: a real server on Redis, ``manage.py team --remove`` in a process of its own,
    then a new item of the team: the removed member's socket is closed before it, the other member hears it."""
    server = LiveServer(tmp_path / "site", extra_env={**redis_env("team-rights"), "LIVE_RIGHTS_RECHECK_SECONDS": "300"})
    seeded = await asyncio.to_thread(server.seed, users=["alice", "bob"])
    await asyncio.to_thread(server.manage, "team", "payments", "--add", "alice", "--add", "bob")
    await server.astart()
    try:
        tabs = {}
        for name in ("alice", "bob"):
            tabs[name] = await connect(
                f"ws://127.0.0.1:{server.port}/ws/queue/",
                origin=f"http://127.0.0.1:{server.port}",
                additional_headers=Reviewer(server, name, seeded.sessions[name]).ws_headers(),
                open_timeout=10,
                ping_interval=None,
            )
            assert json.loads(await asyncio.wait_for(tabs[name].recv(), 10))["type"] == "state"
        await asyncio.to_thread(server.manage, "team", "payments", "--remove", "alice")
        frames = []
        with pytest.raises(ConnectionClosed):
            while True:
                frames.append(json.loads(await asyncio.wait_for(tabs["alice"].recv(), 10)))
        assert tabs["alice"].close_code == CLOSE_UNAUTHENTICATED
        assert frames == [{"type": "session.ended", "message": LOST_TEAM_MESSAGE}]
        await asyncio.to_thread(
            server.manage, "item_add", "--title", "Refund for the CEO", "--body", "Order 1234.", "--team", "payments"
        )
        created = json.loads(await asyncio.wait_for(tabs["bob"].recv(), 10))
        assert (created["type"], created["title"]) == ("item.created", "Refund for the CEO")
        await tabs["bob"].close()
    finally:
        await server.aclose()
