"""Approval policies on the moderator's side: the item page's vote panel, who sees a team's items,
the live events' groups, the history of votes, and the team admin and command."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from moderation.items.models import ReviewAsk
from moderation.live.sockets import CLOSE_NOT_FOUND, live_groups, live_socket_admit
from moderation.policies.models import Team, TeamMembership
from moderation.policies.teams import team_member_add, team_member_remove
from moderation.records import events
from moderation.review.decisions import ask_escalate, item_decide
from moderation.review.items import item_create
from moderation.tests.records.test_events import recorded  # noqa: F401 (fixture)


@pytest.fixture
def carol(make_moderator):
    return make_moderator("carol")


@pytest.fixture
def erin(make_moderator):
    return make_moderator("erin")  # a moderator of no team


@pytest.fixture
def team(db, alice, bob, carol):
    leads = Team.objects.create(slug="leads", name="Leads")
    team = Team.objects.create(
        slug="payments", name="Payments", approvals=2, veto=True, deadline_seconds=3600, on_deadline="escalate", escalate_to=leads
    )
    for user in (alice, bob, carol):
        team_member_add(team=team, user=user)
    return team


def _item(**kwargs):
    return item_create(title="Refund 120", body="Refund order 7.", source="shop", **kwargs)


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _text(html: bytes, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>(.*?)</(li|p|section)>', html.decode(), re.S)
    assert match, f"no #{element_id}"
    return " ".join(re.sub(r"<[^>]+>", "", match.group(1)).split())


def _vote(client: Client, item, decision: str, **extra):
    ask = ReviewAsk.objects.get(item=item)
    return client.post(f"/items/{item.public_id}/", {"ask": ask.interrupt_id, "action-0-type": decision}, **extra)


@pytest.mark.django_db
def test_the_item_page_shows_the_policy_tally_voters_your_vote_and_deadline(team, alice, bob, carol, make_moderator):
    dora = make_moderator("dora")
    team_member_add(team=team, user=dora)
    item = _item(team="payments", requested_by=dora)
    page = _client(alice).get(f"/items/{item.public_id}/").content
    assert _text(page, "vote-policy") == "Policy: 2 approvals, one rejection vetoes"
    assert _text(page, "vote-team") == "Team Payments"
    assert _text(page, "vote-requester") == "Requested by dora (cannot decide it)"
    assert _text(page, "vote-tally") == "0 of 2 approvals"
    assert _text(page, "vote-waiting") == "May still vote: alice, bob, carol"  # never the requester
    assert _text(page, "vote-deadline").startswith("Deadline: 59") and "then: escalated to Leads" in _text(page, "vote-deadline")
    assert re.findall(rb"<button[^>]*>(Vote \w+)</button>", page) == [b"Vote approve", b"Vote reject"]
    answer = _vote(_client(alice), item, "approve", follow=True)
    assert "Your approve vote on “Refund 120” is counted: 1 of 2 approvals: alice." in answer.content.decode()
    assert _text(answer.content, "vote-yours") == "You voted approve — you can change it until it resolves"
    assert _text(answer.content, "vote-waiting") == "May still vote: bob, carol"
    mine = _client(dora).get(f"/items/{item.public_id}/").content
    assert _text(mine, "vote-requester") == "Requested by you (so you cannot decide it)"
    vetoed = _vote(_client(carol), item, "reject", follow=True).content.decode()
    assert "Resolved: rejected — your vote counted (1 of 2 approvals: alice · carol rejected — vetoed)." in vetoed
    late = _vote(_client(bob), item, "approve")
    assert late.status_code == 409
    assert "Your vote was not counted: the item was already resolved — already reviewed by carol" in late.content.decode()
    assert _text(late.content, "lost-tally") == "Final tally: 1 of 2 approvals: alice · carol rejected — vetoed"
    assert _text(late.content, "vote-tally") == "1 of 2 approvals: alice · carol rejected — vetoed"
    assert _text(late.content, "vote-outcome") == "Resolved: rejected — your vote was not counted: the item was already resolved"
    counted = _client(alice).get(f"/items/{item.public_id}/").content
    assert _text(counted, "vote-outcome") == "Resolved: rejected — your vote counted"


def _offered(html: bytes) -> list[str]:
    """The decision buttons and the bulk boxes a page offers."""
    page = html.decode()
    return re.findall(r"<button[^>]*>((?:Vote )?(?:approve|reject|Approve|Reject))</button>", page) + re.findall(
        r'class="bulk-pick"[^>]*aria-label="Select ([^"]+)"', page
    )


@pytest.mark.django_db
def test_each_viewer_is_offered_only_what_they_may_do_and_told_why(team, alice, bob, carol, erin, make_moderator, make_viewer):
    dora, vic = make_moderator("dora"), make_viewer("vic")
    for user in (dora, vic):  # the requester, and a member without the right to decide
        team_member_add(team=team, user=user)
    item = _item(team="payments", requested_by=dora)
    url = f"/items/{item.public_id}/"

    assert _offered(_client(alice).get(url).content) == ["Vote approve", "Vote reject"]
    assert b'id="no-decision"' not in _client(alice).get(url).content
    assert _offered(_client(alice).get("/").content) == ["Refund 120"]  # the queue's bulk box
    for user, why in (
        (dora, "you requested this item, so someone else must decide it (four eyes)"),
        (vic, "you are not a moderator"),
    ):
        page = _client(user).get(url).content
        assert _offered(page) == [], user
        assert _text(page, "no-decision") == f"You can read this item but not decide it: {why}."
        assert "<code>publish</code>" in page.decode()  # what is asked stays readable
        # The guard agrees: the forged vote is refused and nothing is recorded.
        assert _vote(_client(user), item, "approve").status_code == 403
    requester_queue = _client(dora).get("/").content
    assert _offered(requester_queue) == []
    assert f'name="page_items" value="{item.public_id}"'.encode() not in requester_queue
    assert "Not yours to decide: you requested this item" in requester_queue.decode()
    # A moderator of another team: the item is not theirs to see at all.
    assert _client(erin).get(url).status_code == 404

    _vote(_client(alice), item, "approve")
    _vote(_client(bob), item, "approve")  # the second approval resolves it
    resolved = _client(carol).get(url).content
    assert _offered(resolved) == [] and b'id="no-decision"' not in resolved
    assert _text(resolved, "vote-outcome") == "Resolved: approved"
    assert b'id="decision"' in resolved


@pytest.mark.django_db
def test_a_plain_item_has_no_panel_and_keeps_its_buttons(alice, make_item):
    page = _client(alice).get(f"/items/{make_item().public_id}/").content
    assert b'id="vote-panel"' not in page and b">Approve</button>" in page


@pytest.mark.django_db
def test_a_counted_vote_answers_json_with_the_tally(team, alice):
    item = _item(team="payments")
    answer = _vote(_client(alice), item, "approve", HTTP_ACCEPT="application/json")
    assert answer.status_code == 200
    body = answer.json()
    assert body["outcome"] == "voted" and body["tally"]["summary"] == "1 of 2 approvals: alice"


@pytest.mark.django_db
def test_a_teams_items_are_hidden_from_non_members_everywhere(team, alice, erin, make_viewer):
    theirs = _item(team="payments")
    anyones = item_create(title="Open to all", body="Hello.", source="shop")
    for user in (erin, make_viewer("dave")):
        client = _client(user)
        queue = client.get("/").content.decode()
        assert "Open to all" in queue and "Refund 120" not in queue
        for path in (f"/items/{theirs.public_id}/", f"/items/{theirs.public_id}/history"):
            assert client.get(path).status_code == 404, path
        assert client.post(f"/items/{theirs.public_id}/claim").status_code == 404
        assert live_socket_admit(user=user, item_public_id=str(theirs.public_id)) == CLOSE_NOT_FOUND
        assert client.get(f"/api/items/{theirs.public_id}/state").status_code == 404
    # The next item is never another team's, whatever the order.
    assert _client(erin).get("/next/").url == f"/items/{anyones.public_id}/"
    members_queue = _client(alice).get("/").content.decode()
    assert "Open to all" in members_queue and "Vote: 0 of 2 approvals" in members_queue
    erin.user_permissions.add(Permission.objects.get(codename="supervise_teams"))
    supervisor = get_user_model().objects.get(pk=erin.pk)
    assert _client(supervisor).get(f"/items/{theirs.public_id}/").status_code == 200
    # A removed member loses the view with the right to decide.
    team_member_remove(team=team, user=alice)
    assert _client(alice).get(f"/items/{theirs.public_id}/").status_code == 404


@pytest.mark.django_db
def test_the_decided_page_shows_a_teams_items_to_its_members_only(team, alice, bob, erin):
    item = _item(team="payments")
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject")  # veto
    assert "Refund 120" in _client(bob).get("/decided/").content.decode()
    assert "Refund 120" not in _client(erin).get("/decided/").content.decode()


@pytest.mark.django_db(transaction=True)
def test_a_team_items_live_events_reach_its_members_and_supervisors_queues_only(recorded, team, alice, bob, erin):  # noqa: F811
    item = _item(team="payments")
    recorded.clear()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    voted = [group for group, message in recorded if message["type"] == "item.voted"]
    team_groups = sorted([events.team_group(team.pk), events.SUPERVISORS_GROUP, events.item_group(str(item.public_id))])
    assert sorted(voted) == team_groups
    item_decide(item_public_id=item.public_id, reviewer=bob, decision="reject")  # the veto decides it
    assert sorted(group for group, message in recorded if message["type"] == "item.decided") == team_groups
    assert events.QUEUE_GROUP not in voted
    assert events.team_group(team.pk) in live_groups(user=alice, session_key="s", item_public_id=None)
    outsider = live_groups(user=erin, session_key="s", item_public_id=None)
    assert events.QUEUE_GROUP in outsider and events.team_group(team.pk) not in outsider
    # Negative control: an item of no team still goes to every queue page.
    recorded.clear()
    plain = item_create(title="Open", body="Hello.", source="shop")
    assert [group for group, _ in recorded] == [events.QUEUE_GROUP]
    assert plain.team_id is None


@pytest.mark.django_db
def test_the_history_shows_every_vote_and_the_resolution(team, alice, bob, carol):
    Team.objects.filter(pk=team.pk).update(veto=False)
    item = _item(team="payments")
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject", note="changed my mind")
    item_decide(item_public_id=item.public_id, reviewer=bob, decision="approve")
    item_decide(item_public_id=item.public_id, reviewer=carol, decision="approve")
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    text = " ".join(re.sub(r"<[^>]+>", " ", _client(bob).get(f"/items/{item.public_id}/history").content.decode()).split())
    votes = re.findall(r"(\w+) : (approved|rejected) [^—]*— (vote counted|resolved|lost)", text)
    assert votes == [
        ("alice", "approved", "vote counted"),
        ("alice", "rejected", "vote counted"),
        ("bob", "approved", "vote counted"),
        ("carol", "approved", "resolved"),
        ("alice", "approved", "lost"),
    ]
    assert "this vote settled it — 2 of 2 approvals: bob, carol · alice rejected — approved" in text
    assert "changed my mind" in text


@pytest.mark.django_db
def test_the_history_shows_an_escalation(team, alice):
    item = _item(team="payments")
    ReviewAsk.objects.filter(item=item).update(deadline_at=timezone.now() - timedelta(seconds=1))
    assert ask_escalate(ask_pk=ReviewAsk.objects.get(item=item).pk)
    alice.user_permissions.add(Permission.objects.get(codename="supervise_teams"))
    client = _client(get_user_model().objects.get(pk=alice.pk))
    text = " ".join(re.sub(r"<[^>]+>", " ", client.get(f"/items/{item.public_id}/history").content.decode()).split())
    assert "Escalated to Leads: no decision before the deadline." in text
    assert _text(client.get(f"/items/{item.public_id}/").content, "vote-team").startswith("Team Leads · escalated")


@pytest.mark.django_db
def test_the_team_command_creates_updates_and_refuses_clearly(alice, bob, capsys):
    call_command("team", "leads")
    call_command(
        "team",
        "payments",
        "--approvals",
        "2",
        "--veto",
        "on",
        "--add",
        "alice",
        "--add",
        "bob",
        "--deadline",
        "60",
        "--on-deadline",
        "escalate",
        "--escalate-to",
        "leads",
        "--graph",
        "refund_agent",
    )
    assert (
        "Created team payments (Payments): 2 approvals, one rejection vetoes; deadline 60 s, then escalate to leads; "
        "members: alice, bob" in capsys.readouterr().out
    )
    before = list(TeamMembership.objects.values_list("user__username", "removed_at"))
    for args, error in [
        (["--remove", "bob"], "2 approvals can never be reached: team Payments has 1 moderator(s) who may vote"),
        (["--add", "zed"], "no user named 'zed'"),
        (["--escalate-to", "nosuch"], "no team 'nosuch' to escalate to"),
        (["--escalate-to", "payments"], "a team cannot escalate to itself"),
        (["--approvals", "0"], "approvals must be a whole number from 1 to 50"),
        (["--on-deadline", "escalate", "--escalate-to", ""], "escalate needs a team to escalate to"),
    ]:
        with pytest.raises(CommandError, match=re.escape(error)):
            call_command("team", "payments", *args)
    assert list(TeamMembership.objects.values_list("user__username", "removed_at")) == before
    assert Team.objects.get(slug="payments").approvals == 2
    call_command("team", "payments", "--approvals", "1", "--remove", "bob")
    bob_row = TeamMembership.objects.get(user=bob)
    assert bob_row.removed_at is not None  # stamped, not deleted


@pytest.mark.django_db
def test_the_admin_refuses_a_team_its_members_cannot_satisfy(admin_client, alice, bob):
    data = {
        "slug": "payments",
        "name": "Payments",
        "approvals": "3",
        "on_deadline": "",
        "sources": "[]",
        "graphs": "[]",
        "memberships-TOTAL_FORMS": "2",
        "memberships-INITIAL_FORMS": "0",
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
        "memberships-0-user": str(alice.pk),
        "memberships-1-user": str(bob.pk),
    }
    refused = admin_client.post("/admin/moderation/team/add/", data)
    assert refused.status_code == 200 and not Team.objects.exists()
    assert (
        "Not saved: 3 approvals can never be reached: team Payments has 2 moderator(s) who may vote" in refused.content.decode()
    )
    data["approvals"] = "2"
    assert admin_client.post("/admin/moderation/team/add/", data).status_code == 302
    assert not Team.objects.get().allow_weaker_policies  # off unless asked for
    team = Team.objects.get()
    row = team.memberships.get(user=bob)
    removal = {
        **data,
        "memberships-TOTAL_FORMS": "2",
        "memberships-INITIAL_FORMS": "2",
        "memberships-0-id": str(team.memberships.get(user=alice).pk),
        "memberships-0-team": str(team.pk),
        "memberships-1-id": str(row.pk),
        "memberships-1-team": str(team.pk),
        "memberships-1-remove": "on",
    }
    refused = admin_client.post(f"/admin/moderation/team/{team.pk}/change/", removal)
    assert "Not saved: 2 approvals can never be reached" in refused.content.decode()
    removal["approvals"] = "1"
    assert admin_client.post(f"/admin/moderation/team/{team.pk}/change/", removal).status_code == 302
    row.refresh_from_db()
    assert row.removed_at is not None and TeamMembership.objects.count() == 2


@pytest.mark.django_db
def test_the_admin_and_the_team_command_let_a_team_allow_weaker_policies(admin_client, capsys):
    form = admin_client.get("/admin/moderation/team/add/").content.decode()
    assert 'name="allow_weaker_policies"' in form
    data = {
        "slug": "payments",
        "name": "Payments",
        "approvals": "1",
        "on_deadline": "",
        "sources": "[]",
        "graphs": "[]",
        "allow_weaker_policies": "on",
        "memberships-TOTAL_FORMS": "0",
        "memberships-INITIAL_FORMS": "0",
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
    }
    assert admin_client.post("/admin/moderation/team/add/", data).status_code == 302
    assert Team.objects.get(slug="payments").allow_weaker_policies
    call_command("team", "payments", "--allow-weaker-policies", "off")
    assert not Team.objects.get(slug="payments").allow_weaker_policies
    call_command("team", "payments", "--allow-weaker-policies", "on")
    assert (
        capsys.readouterr()
        .out.splitlines()[-1]
        .startswith("Updated team payments (Payments): one decision settles it; submitters may weaken it")
    )


@pytest.mark.django_db
def test_a_quorum_ask_of_two_tool_calls_offers_one_vote_and_a_veto_through_the_page_rejects_both(team, alice, bob):
    """Issue 40.4: the form offered a vote per action; a mixed one was refused by an unexplained 400 and the veto lost."""
    from moderation.tests.policies.test_votes import two_action_item

    item = two_action_item(team="payments")
    url = f"/items/{item.public_id}/"
    page = _client(alice).get(url).content.decode()
    assert 'type="radio"' not in page  # no choice per action
    assert re.findall(r'<button[^>]*name="decision" value="(\w+)"[^>]*>(Vote \w+)</button>', page) == [
        ("approve", "Vote approve"),
        ("reject", "Vote reject"),
    ]
    assert "One vote covers all 2 actions" in page
    ask = ReviewAsk.objects.get(item=item)
    # A per-action post (a page from before) that mixes votes: refused, saying why, nothing recorded.
    mixed = _client(alice).post(
        url, {"ask": ask.interrupt_id, "action-0-type": "reject", "action-1-type": "approve", "note": "wrong amount"}
    )
    assert mixed.status_code == 400
    assert re.search(r'id="error-notice">[^<]*one vote covers all 2 actions of the request', mixed.content.decode())
    assert "wrong amount" in mixed.content.decode()  # the note is kept for the next try
    assert not ask.votes.exists()
    assert _client(bob).post(url, {"ask": ask.interrupt_id, "decision": "approve"}).status_code == 302
    vetoed = _client(alice).post(url, {"ask": ask.interrupt_id, "decision": "reject", "note": "wrong amount"}, follow=True)
    assert "Resolved: rejected — your vote counted" in vetoed.content.decode()
    ask.refresh_from_db()
    assert ask.decisions == [{"type": "reject", "message": "vetoed (alice: wrong amount)"}] * 2
