"""Claims that expire: taken, renewed, released, ignored once expired, advisory unless required."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from moderation.items.models import AskStatus, ItemStatus
from moderation.policies.teams import team_member_remove
from moderation.records.claims import (
    ItemClaim,
    claim_held_by_other,
    claim_live,
    claim_release,
    claim_take,
    claims_live,
    next_item_pick,
)
from moderation.records.models import DecisionAttempt
from moderation.review.decisions import ItemClaimed, item_decide
from moderation.review.items import item_create

pytestmark = pytest.mark.django_db

CLAIM = timedelta(seconds=300)


def test_take_claims_for_claim_seconds(alice, make_item):
    item = make_item()
    now = timezone.now()
    claim = claim_take(item=item, user=alice, now=now)
    assert (claim.holder, claim.expires_at) == ("alice", now + CLAIM)
    assert claim.describe(now=now) == "claimed by alice · 5 min left"
    assert claim.describe(now=now + timedelta(seconds=179)) == "claimed by alice · 3 min left"


def test_someone_elses_live_claim_is_not_stolen(alice, bob, make_item):
    item = make_item()
    now = timezone.now()
    claim_take(item=item, user=alice, now=now)
    seen = claim_take(item=item, user=bob, now=now + timedelta(seconds=60))
    assert seen.holder == "alice" and seen.expires_at == now + CLAIM
    assert ItemClaim.objects.get(item=item).user == alice


def test_expired_claim_is_ignored_and_anyone_takes_the_item(alice, bob, make_item):
    item, other = make_item(), make_item()
    now = timezone.now()
    claim_take(item=item, user=alice, now=now)
    expired = now + CLAIM
    assert claim_live(item=item, now=expired) is None
    assert claims_live(items=[item, other], now=now) == {item.pk: claim_live(item=item, now=now)}
    assert claims_live(items=[item, other], now=expired) == {}
    assert claim_take(item=item, user=bob, now=expired).holder == "bob"
    assert ItemClaim.objects.filter(item=item).count() == 1


def test_a_page_leaving_releases_only_a_claim_taken_before_it_opened(alice, bob, make_item):
    item = make_item()
    opened = timezone.now()
    claim_take(item=item, user=alice, now=opened - timedelta(seconds=1))
    # Reloaded: the new page claimed it again after the old page's socket opened.
    claim_take(item=item, user=alice, now=opened + timedelta(seconds=1))
    assert not claim_release(item_public_id=str(item.public_id), user_id=alice.pk, taken_before=opened)
    assert not claim_release(item_public_id=str(item.public_id), user_id=bob.pk)
    assert claim_release(item_public_id=str(item.public_id), user_id=alice.pk, taken_before=opened + timedelta(seconds=2))
    assert not ItemClaim.objects.filter(item=item).exists()


def test_deciding_releases_the_deciders_claim(alice, make_item):
    item = make_item()
    claim_take(item=item, user=alice)
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve").won
    assert not ItemClaim.objects.filter(item=item).exists()


def test_claims_are_advisory_by_default(alice, bob, make_item):
    item = make_item()
    claim_take(item=item, user=bob)
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve").won


def test_required_claims_refuse_a_decision_over_someone_elses_live_claim(settings, alice, bob, make_item):
    settings.CLAIMS_REQUIRED = True
    item = make_item()
    claim = claim_take(item=item, user=bob)
    with pytest.raises(ItemClaimed) as refused:
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject", note="spam")
    assert refused.value.http_status == 409 and refused.value.code == "claimed"
    assert str(refused.value).startswith("bob has claimed this item (5 min left)")
    item.refresh_from_db()
    assert item.status == ItemStatus.PENDING and item.asks.get().status == AskStatus.PENDING
    assert not DecisionAttempt.objects.filter(item=item).exists()
    # Once bob's claim has run out, the item is anyone's again.
    ItemClaim.objects.filter(item=item).update(expires_at=claim.expires_at - CLAIM)
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve").won


def test_required_claims_let_the_holder_and_the_unclaimed_decide(settings, alice, bob, make_item):
    settings.CLAIMS_REQUIRED = True
    mine, free = make_item(), make_item()
    claim_take(item=mine, user=alice)
    assert item_decide(item_public_id=mine.public_id, reviewer=alice, decision="approve").won
    assert item_decide(item_public_id=free.public_id, reviewer=bob, decision="approve").won


def _requested_by(requester, **policy):
    return item_create(
        title="Refund for the requester",
        body="Order 7.",
        source="shop",
        team="payments",
        requested_by=requester,
        policy=policy or None,
    )


def test_nobody_who_may_not_decide_an_item_claims_it(payments, alice, carol, make_moderator, make_viewer):
    item = _requested_by(carol)
    for user in (carol, make_moderator("dave"), make_viewer("vera")):  # requester, not in the team, view-only
        assert claim_take(item=item, user=user) is None
    assert not ItemClaim.objects.exists()
    claim_take(item=item, user=alice)
    assert claim_take(item=item, user=carol).holder == "alice"  # told who holds it, nothing taken
    assert ItemClaim.objects.get().user == alice


def test_a_claim_binds_nobody_once_its_holder_may_no_longer_decide(settings, payments, alice, bob, carol):
    settings.CLAIMS_REQUIRED = True
    item = _requested_by(carol)
    claim_take(item=item, user=bob)
    assert claim_held_by_other(item=item, user=alice).holder == "bob"
    team_member_remove(team=payments, user=bob)
    assert claim_held_by_other(item=item, user=alice) is None
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve").won


def test_the_requester_opening_her_item_neither_claims_it_nor_blocks_the_team(settings, client, payments, alice, carol):
    """Issue 27.3: carol opened her own request; everyone saw her claim, /next/ skipped it, alice's approve got 409."""
    settings.CLAIMS_REQUIRED = True
    item = _requested_by(carol)
    client.force_login(carol)
    page = client.get(reverse("moderation:item", args=[item.public_id])).content.decode()
    assert "claimed by" not in page and not ItemClaim.objects.exists()
    assert client.post(reverse("moderation:item-claim", args=[item.public_id])).json() == {"claimed": False}
    client.force_login(alice)
    assert client.get(reverse("moderation:next")).url == reverse("moderation:item", args=[item.public_id])
    assert ItemClaim.objects.get(item=item).user == alice
    answer = client.post(
        reverse("moderation:api-decide", args=[item.public_id]), {"decision": "approve"}, content_type="application/json"
    )
    assert answer.status_code == 200 and answer.json()["outcome"] == "won"


def test_a_vote_ends_the_voters_claim_and_a_voter_does_not_claim_again(payments, alice, bob, carol):
    item = _requested_by(carol, approvals=2)
    claim_take(item=item, user=alice)
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve").counted
    assert not ItemClaim.objects.exists()
    assert claim_take(item=item, user=alice) is None  # she has voted: the claim is for the next voter
    assert next_item_pick(candidates=[item], user=alice) is None
    assert next_item_pick(candidates=[item], user=bob) == item
    assert ItemClaim.objects.get(item=item).user == bob


def test_claims_off_claims_nothing(settings, alice, make_item):
    settings.CLAIMS_ENABLED = False
    item = make_item()
    assert claim_take(item=item, user=alice) is None
    assert not ItemClaim.objects.exists()


def _in_threads(*jobs):
    """Run each job in its own thread (its own database connection), released together."""
    barrier = threading.Barrier(len(jobs))
    results, errors = [None] * len(jobs), []

    def run(n, job):
        try:
            barrier.wait()
            results[n] = job()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(n, job)) for n, job in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    return results


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
def test_two_moderators_claiming_at_once_get_one_claim(make_moderator, make_item):
    for round_ in range(10):
        item = make_item(title=f"claim race {round_}")
        a, b = make_moderator(), make_moderator()
        claims = _in_threads(lambda: claim_take(item=item, user=a), lambda: claim_take(item=item, user=b))  # noqa: B023 - run at once
        [row] = ItemClaim.objects.filter(item=item)
        # Both were told the same holder: the one whose row exists.
        assert {c.holder for c in claims} == {row.user.username}, (claims, row)


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
def test_a_claim_taken_on_one_connection_holds_on_another(settings, alice, bob, make_item):
    settings.CLAIMS_REQUIRED = True
    item = make_item()
    [claim] = _in_threads(lambda: claim_take(item=item, user=bob))
    assert claim.holder == "bob"

    def alice_decides():
        try:
            item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
        except ItemClaimed as exc:
            return str(exc)
        return "decided"

    [answer] = _in_threads(alice_decides)
    assert answer.startswith("bob has claimed this item")
    [bob_answer] = _in_threads(lambda: item_decide(item_public_id=item.public_id, reviewer=bob, decision="approve").won)
    assert bob_answer is True
    assert not ItemClaim.objects.filter(item=item).exists()


# --- Pages -------------------------------------------------------------------------


def test_opening_an_item_claims_it_and_others_see_who_holds_it(client, alice, bob, make_item):
    item = make_item(title="Claimed post")
    client.force_login(alice)
    page = client.get(reverse("moderation:item", args=[item.public_id])).content.decode()
    assert "claimed by you · 5 min left" in page
    client.force_login(bob)
    page = client.get(reverse("moderation:item", args=[item.public_id])).content.decode()
    assert "claimed by alice · 5 min left" in page
    assert ItemClaim.objects.get(item=item).user == alice
    queue = client.get(reverse("moderation:queue")).content.decode()
    assert "claimed by alice · 5 min left" in queue


def test_activity_post_renews_the_claim(client, alice, bob, make_item):
    item = make_item()
    client.force_login(alice)
    url = reverse("moderation:item-claim", args=[item.public_id])
    assert client.post(url).json() == {"claimed": True, "holder": "alice", "mine": True, "seconds_left": 300}
    client.force_login(bob)
    answer = client.post(url).json()
    assert answer["holder"] == "alice" and not answer["mine"]


def test_viewers_do_not_claim(client, make_viewer, make_item):
    item = make_item()
    client.force_login(make_viewer())
    client.get(reverse("moderation:item", args=[item.public_id]))
    assert not ItemClaim.objects.exists()
    assert client.post(reverse("moderation:item-claim", args=[item.public_id])).status_code == 403


def test_next_skips_the_decided_and_the_claimed_and_claims_what_it_picks(client, alice, bob, make_item):
    first, second, third = make_item(title="one"), make_item(title="two"), make_item(title="three")
    claim_take(item=second, user=bob)
    client.force_login(alice)
    answer = client.get(reverse("moderation:next") + f"?after={first.public_id}")
    assert answer.url == reverse("moderation:item", args=[third.public_id])
    assert ItemClaim.objects.get(item=third).user == alice


def test_next_without_claims_takes_the_first_pending_item(settings, client, alice, bob, make_item):
    first, _ = make_item(title="one"), make_item(title="two")
    claim_take(item=first, user=bob)
    settings.CLAIMS_ENABLED = False
    client.force_login(alice)
    assert client.get(reverse("moderation:next")).url == reverse("moderation:item", args=[first.public_id])


def test_next_on_an_empty_queue_says_so(client, alice, bob, make_item):
    item = make_item()
    claim_take(item=item, user=bob)
    client.force_login(alice)
    page = client.get(reverse("moderation:next"), follow=True)
    assert page.redirect_chain[-1][0] == reverse("moderation:queue")
    assert "Nothing left to review." in page.content.decode()


@pytest.mark.parametrize("next_item", [True, False])
def test_a_decision_lands_on_the_next_item_unless_turned_off(settings, client, alice, make_item, next_item):
    settings.NEXT_ITEM_AFTER_DECISION = next_item
    decided, waiting = make_item(title="decided"), make_item(title="waiting")
    client.force_login(alice)
    url = reverse("moderation:item", args=[decided.public_id])
    client.get(url)
    answer = client.post(url, {"decision": "approve"}, follow=True)
    landed = answer.redirect_chain[-1][0]
    assert landed == reverse("moderation:item", args=[(waiting if next_item else decided).public_id])
    assert "You approved “decided”." in answer.content.decode()
    assert not ItemClaim.objects.filter(item=decided).exists()
    assert ItemClaim.objects.filter(item=waiting).exists() == next_item


def test_a_decision_refused_over_a_claim_is_a_409_naming_the_holder(settings, client, alice, bob, make_item):
    settings.CLAIMS_REQUIRED = True
    item = make_item()
    claim_take(item=item, user=bob)
    client.force_login(alice)
    answer = client.post(
        reverse("moderation:api-decide", args=[item.public_id]), {"decision": "approve"}, content_type="application/json"
    )
    assert answer.status_code == 409
    assert answer.json()["error"] == "claimed" and answer.json()["message"].startswith("bob has claimed this item (5 min left)")


def test_next_skips_an_item_decided_after_the_queue_was_read(alice, bob, make_item):
    decided, waiting = make_item(title="decided"), make_item(title="waiting")
    read = [decided, waiting]  # the queue as read just before bob's decision committed
    claim_take(item=decided, user=bob)
    assert item_decide(item_public_id=decided.public_id, reviewer=bob, decision="approve").won
    assert next_item_pick(candidates=read, user=alice) == waiting
    assert list(ItemClaim.objects.values_list("item_id", "user__username")) == [(waiting.pk, "alice")]
