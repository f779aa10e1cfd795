"""Bulk decisions: every item through the guard on its own, one result per item, nothing
decided for a request that is bad as a whole, and a race with a moderator deciding some
of the same items singly judged by the history checker."""

import threading

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from moderation.items.models import ItemStatus, QueueItem
from moderation.lab.history import HistoryRecorder, history_check, history_final_read, history_wait_applied
from moderation.records.models import AttemptOutcome, DecisionAttempt
from moderation.review.bulk import BulkInvalid, BulkResult, items_decide_bulk
from moderation.review.decisions import NotAModerator, item_decide

BULK_URL = reverse("moderation:bulk")


@pytest.fixture(autouse=True)
def _reasons(reasons):
    pass


def _status(item) -> str:
    return QueueItem.objects.get(pk=item.pk).status


# --- the service ---------------------------------------------------------------------


@pytest.mark.django_db
def test_mixed_results_one_won_one_lost_naming_the_winner_and_refusals_each_on_its_own(
    alice,
    bob,
    make_item,
    make_asking_item,
):
    fresh, taken, broken = make_item("fresh"), make_item("taken"), make_item("broken")
    several = make_asking_item(graph="t_parallel", title="several")
    item_decide(item_public_id=taken.public_id, reviewer=bob, decision="reject", reason="spam")
    QueueItem.objects.filter(pk=broken.pk).update(status=ItemStatus.NEEDS_ATTENTION, attention="its graph is gone")

    results = items_decide_bulk(
        item_public_ids=[str(i.public_id) for i in (fresh, taken, broken, several)],
        reviewer=alice,
        decision="approve",
        note="",
        reason=None,
    )

    assert [(r.title, r.outcome) for r in results] == [
        ("fresh", "won"),
        ("taken", "lost"),
        ("broken", "refused"),
        ("several", "refused"),
    ]
    won, lost, attention, asks = results
    assert won.describe() == "approved" and won.winner == "alice"
    assert (lost.winner, lost.what, lost.describe()) == ("bob", "rejected", "lost to bob (rejected)")
    assert "needs an operator: its graph is gone" in attention.error
    assert asks.error == "it has several open asks; decide it on its own page"
    # The refusals undid nothing: the won item stays approved, the others are as they were.
    assert [_status(i) for i in (fresh, taken, broken, several)] == [
        ItemStatus.APPROVED,
        ItemStatus.REJECTED,
        ItemStatus.NEEDS_ATTENTION,
        ItemStatus.PENDING,
    ]
    assert QueueItem.objects.get(pk=taken.pk).decided_by == bob


@pytest.mark.django_db
def test_an_item_named_twice_or_unknown_is_judged_once_or_refused(alice, make_item):
    item = make_item("once")
    results = items_decide_bulk(
        item_public_ids=[str(item.public_id), str(item.public_id), "not-an-id"],
        reviewer=alice,
        decision="approve",
        note="",
        reason=None,
    )
    assert [(r.outcome, r.title) for r in results] == [("won", "once"), ("refused", "not-an-id")]
    assert DecisionAttempt.objects.filter(item=item).count() == 1


@pytest.mark.django_db
def test_another_teams_item_is_refused_as_unknown_without_its_title(client, payments, alice, make_moderator):
    from moderation.review.items import item_create

    secret = item_create(title="Refund for the CEO", body="Order 7.", source="shop", team="payments")
    key = str(secret.public_id)
    outsider = make_moderator("dave")
    [result] = items_decide_bulk(item_public_ids=[key], reviewer=outsider, decision="approve")
    assert (result.outcome, result.title, result.error) == ("refused", key, "no such item")
    client.force_login(outsider)
    page = client.post(BULK_URL, {"items": [key], "decision": "approve", "reason": ""}).content.decode()
    assert "Refund for the CEO" not in page and "Payments" not in page and "not decided: no such item" in page
    assert _status(secret) == ItemStatus.PENDING and not DecisionAttempt.objects.exists()
    [member] = items_decide_bulk(item_public_ids=[key], reviewer=alice, decision="approve")
    assert (member.outcome, member.title) == ("won", "Refund for the CEO")


@pytest.mark.django_db
def test_a_reject_carries_the_reason_to_every_item(alice, make_item):
    items = [make_item(f"spam {n}") for n in range(3)]
    results = items_decide_bulk(
        item_public_ids=[str(i.public_id) for i in items], reviewer=alice, decision="reject", note="link farm", reason="spam"
    )
    assert [r.describe() for r in results] == ["rejected"] * 3
    assert set(DecisionAttempt.objects.filter(item__in=items).values_list("reason", flat=True)) == {"spam"}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "decision, reason, field",
    [
        ("maybe", None, "decision"),
        ("", None, "decision"),
        ("reject", None, "reason"),
        ("approve", "spam", "reason"),
        ("reject", "nonsense", "reason"),
    ],
)
def test_a_bad_decision_or_reason_decides_nothing(alice, make_item, settings, decision, reason, field):
    settings.REJECT_REASON_REQUIRED = True
    items = [make_item(f"post {n}") for n in range(3)]
    with pytest.raises(BulkInvalid) as caught:
        items_decide_bulk(
            item_public_ids=[str(i.public_id) for i in items], reviewer=alice, decision=decision, note="", reason=reason
        )
    assert caught.value.field == field
    assert DecisionAttempt.objects.count() == 0
    assert {_status(i) for i in items} == {ItemStatus.PENDING}


@pytest.mark.django_db
def test_more_items_than_the_cap_decides_nothing(alice, make_item, settings):
    settings.BULK_MAX_ITEMS = 2
    items = [make_item(f"post {n}") for n in range(3)]
    with pytest.raises(BulkInvalid, match="3 items selected; at most 2"):
        items_decide_bulk(
            item_public_ids=[str(i.public_id) for i in items], reviewer=alice, decision="approve", note="", reason=None
        )
    assert DecisionAttempt.objects.count() == 0
    assert (
        len(
            items_decide_bulk(
                item_public_ids=[str(i.public_id) for i in items[:2]], reviewer=alice, decision="approve", note="", reason=None
            )
        )
        == 2
    )


@pytest.mark.django_db
def test_nothing_selected_or_not_a_moderator_decides_nothing(alice, make_viewer, make_item):
    item = make_item()
    with pytest.raises(BulkInvalid, match="select at least one"):
        items_decide_bulk(item_public_ids=[], reviewer=alice, decision="approve", note="", reason=None)
    with pytest.raises(NotAModerator):
        items_decide_bulk(item_public_ids=[str(item.public_id)], reviewer=make_viewer(), decision="approve", note="", reason=None)
    assert DecisionAttempt.objects.count() == 0


# --- the race: alice bulk-approves 20 while bob decides 10 of them singly ------------


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
def test_bulk_racing_single_decisions_has_one_winner_per_item_and_names_bob_where_alice_lost(alice, bob, make_item):
    items = [make_item(f"race {n}") for n in range(20)]
    keys = [str(i.public_id) for i in items]
    bobs = keys[10:][::-1]  # from the far end, so bob meets alice's bulk somewhere in the middle
    history = HistoryRecorder()
    barrier = threading.Barrier(2)
    # Alice's bulk starts once bob has decided his first item, so he certainly reaches one before her (a thread
    # descheduled for the whole bulk would not); his other nine race the bulk as it goes.
    bob_first = threading.Event()
    bulk: list[BulkResult] = []
    errors: list[str] = []

    def alice_bulk():
        try:
            barrier.wait(timeout=30)
            bob_first.wait(timeout=60)
            ops = {key: history.invoke(reviewer="alice", item=key, decision="approve") for key in keys}
            bulk.extend(items_decide_bulk(item_public_ids=keys, reviewer=alice, decision="approve", note="", reason=None))
            for result in bulk:
                op = ops[result.item]
                if result.outcome == "refused":
                    history.complete(op, completion="unknown", error=result.error)
                else:
                    history.complete(op, completion="ok" if result.outcome == "won" else "fail", told_winner=result.winner)
        except Exception as exc:
            errors.append(repr(exc))
        finally:
            connection.close()

    def bob_singly():
        try:
            barrier.wait(timeout=30)
            for key in bobs:
                op = history.invoke(reviewer="bob", item=key, decision="reject")
                outcome = item_decide(item_public_id=key, reviewer=bob, decision="reject", reason="spam")
                history.complete(op, completion="ok" if outcome.won else "fail", told_winner=outcome.winner)
                bob_first.set()
        except Exception as exc:
            errors.append(repr(exc))
        finally:
            connection.close()

    threads = [threading.Thread(target=alice_bulk), threading.Thread(target=bob_singly)]
    [t.start() for t in threads]
    [t.join() for t in threads]

    assert errors == []
    assert [r.item for r in bulk] == keys and all(r.outcome != "refused" for r in bulk)
    history_wait_applied(items=keys)
    final = history_final_read(items=keys)
    assert [str(a) for a in history_check(ops=history.ops, final=final)] == []
    assert all(final[key].winning_attempts == 1 for key in keys)
    bob_won = {key for key in keys if final[key].winner == "bob"}
    assert bobs[0] in bob_won and bob_won <= set(bobs)  # bob reached his first before alice did
    # Alice's result lists exactly the items she lost, each naming bob and what he did.
    assert {r.item for r in bulk if r.outcome == "lost"} == bob_won
    assert {r.describe() for r in bulk if r.outcome == "lost"} == {"lost to bob (rejected)"}
    assert {r.item for r in bulk if r.outcome == "won"} == set(keys) - bob_won
    assert DecisionAttempt.objects.filter(outcome=AttemptOutcome.WON).count() == 20


# --- the view ------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_queue_offers_checkboxes_and_the_bulk_bar_to_moderators_only(client, alice, make_viewer, make_item):
    item = make_item("pick me")
    client.force_login(alice)
    page = client.get(reverse("moderation:queue")).content.decode()
    assert f'name="items" value="{item.public_id}" form="bulk-form"' in page
    assert "Select all on this page" in page and "Reject selected" in page
    client.force_login(make_viewer())
    page = client.get(reverse("moderation:queue")).content.decode()
    assert 'name="items"' not in page and "bulk-form" not in page


@pytest.mark.django_db
def test_the_bulk_view_lists_each_items_result_and_links_back_to_the_queue(client, alice, bob, make_item):
    fresh, taken = make_item("fresh"), make_item("taken")
    item_decide(item_public_id=taken.public_id, reviewer=bob, decision="reject", reason="spam")
    client.force_login(alice)
    client.get(reverse("moderation:queue"), {"order": "oldest"})
    response = client.post(BULK_URL, {"items": [fresh.public_id, taken.public_id], "decision": "approve", "reason": ""})
    assert response.status_code == 200
    page = response.content.decode()
    assert "approved" in page and "lost to bob (rejected)" in page
    assert 'href="/?order=oldest"' in page
    assert _status(fresh) == ItemStatus.APPROVED
    assert DecisionAttempt.objects.get(item=fresh).origin == "dashboard"


@pytest.mark.django_db
def test_select_all_decides_every_item_the_page_showed(client, alice, make_item):
    items = [make_item(f"post {n}") for n in range(3)]
    client.force_login(alice)
    response = client.post(
        BULK_URL, {"all_on_page": "1", "page_items": [i.public_id for i in items], "decision": "reject", "reason": "spam"}
    )
    assert response.status_code == 200
    assert {_status(i) for i in items} == {ItemStatus.REJECTED}
    # Without the box ticked, the page's list alone decides nothing.
    other = make_item("other")
    response = client.post(BULK_URL, {"page_items": [other.public_id], "decision": "approve"})
    assert response.status_code == 400 and "select at least one item" in response.content.decode()
    assert _status(other) == ItemStatus.PENDING


@pytest.mark.django_db
def test_the_bulk_view_refuses_a_reject_without_a_reason_deciding_nothing(client, alice, make_item, settings):
    settings.REJECT_REASON_REQUIRED = True
    item = make_item()
    client.force_login(alice)
    response = client.post(BULK_URL, {"items": [item.public_id], "decision": "reject", "reason": ""})
    assert response.status_code == 400 and "Nothing was decided" in response.content.decode()
    assert _status(item) == ItemStatus.PENDING


@pytest.mark.django_db
def test_the_bulk_view_is_post_only_csrf_checked_and_for_moderators(alice, make_viewer, make_item):
    item = make_item()
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.get(BULK_URL).status_code == 405
    assert client.post(BULK_URL, {"items": [item.public_id], "decision": "approve"}).status_code == 403
    viewer = Client()
    viewer.force_login(make_viewer())
    assert viewer.post(BULK_URL, {"items": [item.public_id], "decision": "approve"}).status_code == 403
    assert _status(item) == ItemStatus.PENDING
    anonymous = Client().post(BULK_URL, {"items": [item.public_id], "decision": "approve"})
    assert anonymous.status_code == 302 and _status(item) == ItemStatus.PENDING
