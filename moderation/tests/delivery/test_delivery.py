"""Webhook deliveries in-process: the outbox commits with the event, attempts sign, retry, wait their turn.

The receiver is a real HTTP server (moderation/tests/webhook_receiver.py); tasks are
run by calling the attempt directly, as a worker would. Worker processes, kill -9 and
latency are in test_delivery_server.py.
"""

import threading
import time
from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone
from django_tasks.base import TaskResultStatus
from django_tasks_db.models import DBTaskResult
from standardwebhooks import Webhook

from moderation.admin import WebhookEndpointForm
from moderation.core.faults import fault_inject
from moderation.delivery.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint, WebhookEvent
from moderation.delivery.outbox import delivery_redeliver, endpoint_ping
from moderation.delivery.sending import deliveries_sweep, delivery_attempt
from moderation.graphs.outcome import AppliedState
from moderation.items.models import ApplyState, ReviewAsk
from moderation.policies.models import Team
from moderation.policies.teams import team_member_add
from moderation.review.apply import ApplyOutcome, ApplyResult, item_apply
from moderation.review.deadlines import deadlines_sweep
from moderation.review.decisions import item_decide, item_withdraw
from moderation.review.items import item_create, lab_item_create
from moderation.tests.webhook_receiver import Receiver

ALL_EVENTS = ["item.created", "item.decided", "item.cancelled"]


@pytest.fixture
def receiver():
    r = Receiver().start()
    yield r
    r.stop()


@pytest.fixture
def endpoint(db, receiver):
    endpoint = WebhookEndpoint.objects.create(name="pipeline", url=receiver.url, events=ALL_EVENTS)
    receiver.secret = endpoint.secret
    return endpoint


def _queued(delivery: WebhookDelivery) -> list[DBTaskResult]:
    # Only delivery tasks: an apply task's argument is an item id, which may equal the delivery's.
    return [
        t
        for t in DBTaskResult.objects.filter(task_path="moderation.delivery.sending.delivery_send")
        if t.args_kwargs["args"] == [delivery.pk]
    ]


def _deliveries(item, event=None):
    found = WebhookDelivery.objects.filter(item_public_id=item.public_id).order_by("sequence")
    return list(found.filter(event=event) if event else found)


def test_new_secret_is_standard_webhooks_format(endpoint):
    assert endpoint.secret.startswith("whsec_")
    Webhook(endpoint.secret)  # an off-the-shelf verifier accepts it
    assert WebhookEndpoint.objects.create(name="other", url="http://x.test/", events=ALL_EVENTS).secret != endpoint.secret


def test_created_and_decided_items_record_deliveries_with_their_tasks(endpoint, alice, make_item):
    item = make_item()
    [created] = _deliveries(item)
    assert (created.event, created.sequence, created.status) == ("item.created", 1, DeliveryStatus.PENDING)
    assert created.payload["data"]["status"] == "pending" and len(_queued(created)) == 1

    item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject", note="spam")
    [decided] = _deliveries(item, WebhookEvent.ITEM_DECIDED)
    assert decided.sequence == 2 and len(_queued(decided)) == 1
    data = decided.payload["data"]
    assert (data["id"], data["status"], data["sequence"], data["graph"]) == (str(item.public_id), "rejected", 2, "moderation")
    assert (data["decision"]["by"], data["decision"]["note"]) == ("alice", "spam")
    ask = item.asks.get()
    assert data["decision"]["ask"] == ask.interrupt_id
    assert data["decision"]["decisions"] == [{"type": "reject", "message": "spam"}]
    assert data["decision"]["what"] == "rejected publish (“spam”)"


def test_a_withdrawn_item_is_announced_as_cancelled_not_decided(endpoint, bob, make_item):
    item = make_item()
    item_withdraw(item_public_id=item.public_id, by=bob, reason="sent by mistake")
    assert [d.event for d in _deliveries(item)] == ["item.created", "item.cancelled"]
    decision = _deliveries(item, WebhookEvent.ITEM_CANCELLED)[0].payload["data"]["decision"]
    assert (decision["status"], decision["what"], decision["ask"]) == (
        "withdrawn",
        "withdrew the item",
        item.asks.get().interrupt_id,
    )


def test_rolled_back_decision_records_nothing_and_the_next_one_is_delivered_once(endpoint, alice, bob, make_item):
    item = make_item()

    def explode(key):
        raise RuntimeError("crash before commit")

    with fault_inject("before_commit", explode), pytest.raises(RuntimeError):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    assert _deliveries(item, WebhookEvent.ITEM_DECIDED) == []
    assert DBTaskResult.objects.count() == 1  # item.created's only

    # The graph is resumed only after a commit, so nothing of alice's survives: bob's decision is the first.
    assert item_decide(item_public_id=item.public_id, reviewer=bob, decision="reject").won
    [decided] = _deliveries(item, WebhookEvent.ITEM_DECIDED)
    assert decided.payload["data"]["decision"]["by"] == "bob" and len(_queued(decided)) == 1


@pytest.fixture
def applied_endpoint(db):
    return WebhookEndpoint.objects.create(name="applies", url="http://x.test/", events=["item.applied"])


@pytest.fixture
def applied_by_hand(settings):
    """The decision is only recorded; the test runs the worker's half (``item_apply``) itself."""
    settings.REVIEWQUEUE_APPLY_INLINE = False


def test_an_inline_apply_is_announced_once_after_the_decision(
    applied_endpoint, alice, make_item, django_capture_on_commit_callbacks
):
    item = make_item()
    with django_capture_on_commit_callbacks(execute=True):
        item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    [applied] = _deliveries(item)
    assert (applied.event, len(_queued(applied))) == ("item.applied", 1)
    assert applied.payload["data"]["applied"] == [item.asks.get().interrupt_id]
    assert item_apply(item_id=item.pk) == [ApplyResult(ApplyOutcome.NOTHING_TO_APPLY)]
    assert len(_deliveries(item)) == 1


def test_an_apply_is_announced_once_with_what_the_graph_did(applied_endpoint, applied_by_hand, alice, make_item):
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    assert _deliveries(item) == []  # decided, not yet applied
    item_apply(item_id=item.pk)
    [applied] = _deliveries(item)
    data = applied.payload["data"]
    assert (applied.event, applied.endpoint, len(_queued(applied))) == ("item.applied", applied_endpoint, 1)
    assert data["applied"] == [item.asks.get().interrupt_id]
    assert data["applied_result"]["state"] == "finished" and data["applied_result"]["result"]["status"] == "approved"
    assert data["decision"]["by"] == "alice"
    assert item_apply(item_id=item.pk) == [ApplyResult(ApplyOutcome.NOTHING_TO_APPLY)]
    assert len(_deliveries(item)) == 1


def test_a_failed_apply_is_announced_with_its_error(applied_endpoint, applied_by_hand, alice, make_item):
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")

    def explode(key):
        raise RuntimeError("the publisher is down")

    with fault_inject("in_apply_node", explode):
        item_apply(item_id=item.pk)
    [failed] = _deliveries(item)
    assert failed.payload["data"]["applied"] == []
    assert failed.payload["data"]["applied_result"]["state"] == "failed"
    assert "the publisher is down" in failed.payload["data"]["applied_result"]["error"]


def test_the_announcement_commits_with_the_apply_record_or_not_at_all(
    applied_endpoint, applied_by_hand, alice, make_item, monkeypatch
):
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")

    def outbox_down(**kwargs):
        raise RuntimeError("outbox write failed")

    monkeypatch.setattr("moderation.review.apply.item_applied_record", outbox_down)
    with pytest.raises(RuntimeError, match="outbox write failed"):
        item_apply(item_id=item.pk)
    item.refresh_from_db()
    assert item.asks.get().applied_at is None and item.apply_state == ApplyState.APPLYING
    monkeypatch.undo()
    # The graph was resumed before the failed record; the next run only records it, announced once.
    assert item_apply(item_id=item.pk) == [ApplyResult(ApplyOutcome.RECORDED, resumed=0, state=AppliedState.FINISHED)]
    assert [d.event for d in _deliveries(item)] == ["item.applied"]


def test_unsubscribed_inactive_and_lab_items_get_nothing(db, make_item):
    WebhookEndpoint.objects.create(name="decisions only", url="http://x.test/", events=["item.decided"])
    WebhookEndpoint.objects.create(name="off", url="http://y.test/", events=ALL_EVENTS, active=False)
    WebhookEndpoint.objects.create(name="all", url="http://z.test/", events=ALL_EVENTS)
    lab = lab_item_create(title="Lab", body="A race-lab item.")
    assert _deliveries(lab) == [] and DBTaskResult.objects.count() == 0
    item = make_item()
    assert [d.endpoint.name for d in _deliveries(item)] == ["all"]


def test_attempt_posts_a_signed_body_and_records_it(endpoint, receiver, make_item):
    item = make_item()
    [delivery] = _deliveries(item)
    assert delivery_attempt(delivery_id=delivery.pk) == DeliveryStatus.DELIVERED
    [got] = receiver.received
    assert (got.msg_id, got.type, got.data["id"]) == (delivery.msg_id, "item.created", str(item.public_id))
    delivery.refresh_from_db()
    [attempt] = delivery.attempt_log.all()
    assert (delivery.attempts, attempt.status_code, attempt.error) == (1, 204, "")
    assert receiver.bad_signatures == 0


def test_wrong_secret_is_refused_by_the_receiver(endpoint, receiver, make_item):
    receiver.secret = WebhookEndpoint.objects.create(name="b", url="http://x.test/", events=["item.decided"]).secret
    [delivery] = _deliveries(make_item())
    assert delivery_attempt(delivery_id=delivery.pk) == DeliveryStatus.PENDING
    assert receiver.bad_signatures == 1 and receiver.received == []


def test_failed_attempt_is_retried_later_with_backoff_then_marked_failed(endpoint, receiver, make_item, settings):
    settings.WEBHOOK_RETRY_BASE = 60
    receiver.fail_next = 2
    [delivery] = _deliveries(make_item())
    now = timezone.now()
    # The attempt's clock read once, and the first retry's jitter (half to all of the base, test_backoff) at half.
    with (
        mock.patch("django.utils.timezone.now", return_value=now),
        mock.patch("moderation.core.backoff.random.uniform", return_value=0.0),
    ):
        assert delivery_attempt(delivery_id=delivery.pk) == DeliveryStatus.PENDING
    delivery.refresh_from_db()
    assert delivery.next_attempt_at == now + timedelta(seconds=30)
    assert "HTTP 500" in delivery.last_error
    retry = max(_queued(delivery), key=lambda t: t.enqueued_at)
    assert retry.run_after == delivery.next_attempt_at
    # Not due yet: a task that runs early does nothing.
    assert delivery_attempt(delivery_id=delivery.pk) is None

    WebhookDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now(), retry_until=timezone.now())
    assert delivery_attempt(delivery_id=delivery.pk) == DeliveryStatus.FAILED
    delivery.refresh_from_db()
    assert [a.status_code for a in delivery.attempt_log.all()] == [500, 500] and delivery.attempts == 2


def test_later_event_waits_for_the_earlier_one_of_its_item(endpoint, receiver, alice, make_item):
    receiver.fail_next = 1
    item = make_item()
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    created, decided = _deliveries(item)
    assert delivery_attempt(delivery_id=created.pk) == DeliveryStatus.PENDING  # 500: retry later
    assert delivery_attempt(delivery_id=decided.pk) is None  # parked behind item.created
    assert receiver.received == []

    WebhookDelivery.objects.filter(pk=created.pk).update(next_attempt_at=timezone.now())
    tasks_before = len(_queued(decided))
    assert delivery_attempt(delivery_id=created.pk) == DeliveryStatus.DELIVERED
    assert len(_queued(decided)) == tasks_before + 1  # finishing item.created queued item.decided
    assert delivery_attempt(delivery_id=decided.pk) == DeliveryStatus.DELIVERED
    assert [r.type for r in receiver.received] == ["item.created", "item.decided"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("first_answer", ["quick", "hung"])
def test_an_endpoint_with_its_lanes_taken_parks_a_delivery_until_one_of_its_attempts_ends(receiver, settings, first_answer):
    """A receiver holds at most its share of a worker's lanes; its next delivery waits parked, in no lane.

    The attempt that ends hands its slot on: it goes on with the parked delivery itself when
    the receiver answered within half the timeout, and queues it when the receiver hung.
    """
    settings.WEBHOOK_LANES = 2  # one attempt at a time per endpoint
    settings.WEBHOOK_TIMEOUT = 10 if first_answer == "quick" else 1
    endpoint = WebhookEndpoint.objects.create(name="pipeline", url=receiver.url, events=ALL_EVENTS)
    receiver.secret = endpoint.secret
    first, second = (_deliveries(item_create(title=f"Post {n}", body="Harmless.", source="test"))[0] for n in range(2))
    receiver.stall_next, receiver.stall_seconds = 1, 60.0  # held until released, or past the hung one's timeout
    in_flight = threading.Thread(target=delivery_attempt, kwargs={"delivery_id": first.pk})
    in_flight.start()
    deadline = time.monotonic() + 30
    while receiver.requests == 0:  # the first attempt is held by the receiver
        assert time.monotonic() < deadline, "the first attempt never reached the receiver"
        time.sleep(0.01)

    assert delivery_attempt(delivery_id=second.pk) is None
    second.refresh_from_db()
    assert second.next_attempt_at == second.retry_until and receiver.requests == 1  # parked, not sent
    tasks_before = len(_queued(second))

    if first_answer == "quick":
        receiver.release.set()
    in_flight.join()
    first.refresh_from_db()
    second.refresh_from_db()
    if first_answer == "quick":
        # Handed on: the first attempt's thread delivered the second too, no task needed.
        assert (first.status, second.status, len(_queued(second))) == (DeliveryStatus.DELIVERED,) * 2 + (tasks_before,)
    else:
        # Queued: the hung receiver's slot goes back to the queue, not to this loop.
        assert first.status == DeliveryStatus.PENDING and "the attempt took its whole WEBHOOK_TIMEOUT" in first.last_error
        assert second.next_attempt_at <= timezone.now() and len(_queued(second)) == tasks_before + 1
        assert receiver.requests == 1
        receiver.release.set()
        assert delivery_attempt(delivery_id=second.pk) == DeliveryStatus.DELIVERED
    assert second.msg_id in {r.msg_id for r in receiver.received}


def _worker_died_running(delivery: WebhookDelivery) -> None:
    """Its task was claimed by a worker that died: RUNNING for good (the database backend never reclaims it)."""
    for task in _queued(delivery):
        task.status, task.started_at = TaskResultStatus.RUNNING, timezone.now() - timedelta(hours=1)
        task.save(update_fields=["status", "started_at"])


def test_lost_attempt_is_requeued_by_the_sweep_and_delivered_with_the_same_id(endpoint, receiver, make_item, settings):
    settings.WEBHOOK_LEASE_GRACE = 0
    [delivery] = _deliveries(make_item())
    # A worker took the lease and died: the row is pending, its lease in the future.
    _worker_died_running(delivery)
    leased_until = timezone.now() + timedelta(seconds=30)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(attempts=1, next_attempt_at=leased_until)
    assert deliveries_sweep() == 0 and delivery_attempt(delivery_id=delivery.pk) is None

    WebhookDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now() - timedelta(seconds=1))
    tasks_before = len(_queued(delivery))
    assert deliveries_sweep() == 1 and len(_queued(delivery)) == tasks_before + 1
    assert delivery_attempt(delivery_id=delivery.pk) == DeliveryStatus.DELIVERED
    assert [r.msg_id for r in receiver.received] == [delivery.msg_id]


def test_a_backlog_is_not_queued_again_by_every_sweep(endpoint, receiver, make_item, settings):
    """A delivery overdue only because its task still waits behind others is left to that task."""
    settings.WEBHOOK_LEASE_GRACE = 0
    [delivery] = _deliveries(make_item())
    WebhookDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now() - timedelta(seconds=1))
    for _ in range(3):
        assert deliveries_sweep() == 0
    assert len(_queued(delivery)) == 1

    _worker_died_running(delivery)  # control: the sweep does see the delivery once its task is dead
    WebhookDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now() - timedelta(seconds=1))
    assert deliveries_sweep() == 1 and len(_queued(delivery)) == 2
    WebhookDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now() - timedelta(seconds=1))
    assert deliveries_sweep() == 0  # the task it queued waits: once, not once per sweep
    assert delivery_attempt(delivery_id=delivery.pk) == DeliveryStatus.DELIVERED
    assert [r.msg_id for r in receiver.received] == [delivery.msg_id]


def test_redeliver_resends_with_the_same_id_and_ping_reaches_the_endpoint(endpoint, receiver, make_item):
    [delivery] = _deliveries(make_item())
    assert not delivery_redeliver(delivery=delivery)  # still pending: left alone
    delivery_attempt(delivery_id=delivery.pk)
    assert delivery_redeliver(delivery=delivery)
    assert delivery_attempt(delivery_id=delivery.pk) == DeliveryStatus.DELIVERED
    assert [r.msg_id for r in receiver.received] == [delivery.msg_id] * 2

    ping = endpoint_ping(endpoint=endpoint)
    assert delivery_attempt(delivery_id=ping.pk) == DeliveryStatus.DELIVERED
    assert receiver.received[-1].type == "webhook.ping"


def test_inactive_endpoint_fails_its_pending_deliveries(endpoint, receiver, make_item):
    [delivery] = _deliveries(make_item())
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(active=False)
    assert delivery_attempt(delivery_id=delivery.pk) is None
    delivery.refresh_from_db()
    assert (delivery.status, delivery.last_error) == (DeliveryStatus.FAILED, "the endpoint is inactive")
    assert receiver.requests == 0


@pytest.mark.parametrize(
    "changes, field, message",
    [
        ({"url": "ftp://example.com/hook"}, "url", "http:// or https://"),
        ({"url": "not a url"}, "url", "Enter a valid URL"),
        ({"url": "https://example.com/" + "a" * 2000}, "url", "at most 2000"),
        ({"events": []}, "events", "This field is required"),
        ({"events": ["item.exploded"]}, "events", "not one of the available choices"),
        ({"events": ["webhook.ping"]}, "events", "not one of the available choices"),
        ({"name": ""}, "name", "This field is required"),
    ],
)
def test_bad_endpoint_config_is_refused_and_creates_nothing(db, changes, field, message):
    data = {"name": "hooks", "url": "https://example.com/hook", "events": ["item.decided"], "active": "on", **changes}
    form = WebhookEndpointForm(data=data)
    assert not form.is_valid()
    assert message in " ".join(form.errors[field]), form.errors
    assert WebhookEndpoint.objects.count() == 0


def test_admin_create_shows_the_saved_secret_and_actions_queue_ping_and_redeliver(admin_client, receiver, make_item):
    add_page = admin_client.get("/admin/moderation/webhookendpoint/add/").content.decode()
    assert "whsec_" not in add_page and "The signing secret is made when you save" in add_page
    response = admin_client.post(
        "/admin/moderation/webhookendpoint/add/",
        {"name": "hooks", "url": receiver.url, "events": ["item.created"], "active": "on"},
        follow=True,
    )
    endpoint = WebhookEndpoint.objects.get()
    page = response.content.decode()
    assert endpoint.secret in page and page.count("whsec_") == 1  # the saved secret, and no other
    change_page = admin_client.get(f"/admin/moderation/webhookendpoint/{endpoint.pk}/change/").content.decode()
    assert endpoint.secret in change_page and change_page.count("whsec_") == 1
    admin_client.post("/admin/moderation/webhookendpoint/", {"action": "send_test_ping", "_selected_action": [endpoint.pk]})
    ping = WebhookDelivery.objects.get(event="webhook.ping")
    receiver.secret = endpoint.secret
    delivery_attempt(delivery_id=ping.pk)
    page = admin_client.get(f"/admin/moderation/webhookdelivery/{ping.pk}/change/").content.decode()
    assert "204" in page and ping.msg_id in page
    admin_client.post("/admin/moderation/webhookdelivery/", {"action": "redeliver", "_selected_action": [ping.pk]})
    ping.refresh_from_db()
    assert ping.status == DeliveryStatus.PENDING


# Approval policies (moderation.policies): votes and escalations are events of their own.


@pytest.fixture
def policy_endpoint(db, receiver):
    endpoint = WebhookEndpoint.objects.create(
        name="policies",
        url=receiver.url,
        events=["item.voted", "item.decided", "item.escalated"],
    )
    receiver.secret = endpoint.secret
    return endpoint


def _sent(item, receiver) -> list[dict]:
    """Deliver the item's pending events in order, as a worker would; all the receiver verified and got for it."""
    for delivery in _deliveries(item):
        if delivery.status != DeliveryStatus.PENDING:
            continue
        assert delivery_attempt(delivery_id=delivery.pk) == DeliveryStatus.DELIVERED
    assert receiver.bad_signatures == 0
    return [{"type": got.type, **got.data} for got in receiver.received if got.data["id"] == str(item.public_id)]


def test_the_policy_events_are_offered_by_the_admin_forms(admin_client):
    form = WebhookEndpointForm(
        data={"name": "hooks", "url": "https://example.com/hook", "active": "on", "events": ["item.voted", "item.escalated"]}
    )
    assert form.is_valid(), form.errors
    page = admin_client.get("/admin/moderation/webhookendpoint/add/").content.decode()
    assert 'value="item.voted"' in page and 'value="item.escalated"' in page


def test_a_vote_that_does_not_resolve_sends_item_voted_and_the_resolving_one_item_decided_with_the_tally(
    policy_endpoint, receiver, payments, alice, bob
):
    item = item_create(title="Refund 120", body="Order 7.", source="shop", team="payments", policy={"approvals": 2})
    item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    [voted] = _sent(item, receiver)
    assert (voted["type"], voted["status"], voted["team"], voted["ask"]) == (
        "item.voted",
        "pending",
        "payments",
        item.asks.get().interrupt_id,
    )
    assert voted["tally"]["summary"] == "1 of 2 approvals: alice" and voted["tally"]["resolution"] is None
    assert [(v["voter"], v["vote"]) for v in voted["tally"]["votes"]] == [("alice", "approve")]

    item_decide(item_public_id=item.public_id, reviewer=bob, decision="approve")
    assert [e["type"] for e in _sent(item, receiver)] == ["item.voted", "item.decided"]  # no voted for the resolving vote
    decided = _sent(item, receiver)[-1]
    assert (decided["status"], decided["decision"]["by"], decided["sequence"]) == ("approved", "bob", 2)
    assert decided["decision"]["tally"]["summary"] == "2 of 2 approvals: alice, bob — approved"
    assert decided["decision"]["tally"]["why"] == "quorum" and decided["policy"]["approvals"] == 2


def test_an_escalation_sends_item_escalated_once(policy_endpoint, receiver, payments, make_moderator):
    leads = Team.objects.create(slug="leads", name="Leads")
    team_member_add(team=leads, user=make_moderator("boss"))
    payments.escalate_to, payments.deadline_seconds, payments.on_deadline = leads, 60, "escalate"
    payments.save()
    item = item_create(title="Refund 120", body="Order 7.", source="shop", team="payments")
    ReviewAsk.objects.filter(item=item).update(deadline_at=timezone.now() - timedelta(seconds=1))
    assert deadlines_sweep() == 1
    assert deadlines_sweep() == 0  # escalated: the supervisors' team sets no deadline, nothing fires again
    [escalated] = _sent(item, receiver)
    item.refresh_from_db()
    assert (escalated["type"], escalated["team"], escalated["priority"], escalated["status"]) == (
        "item.escalated",
        "leads",
        10,
        "pending",
    )
    assert escalated["escalated_at"] == item.escalated_at.isoformat()
    assert escalated["policy"]["on_deadline"] == "" and escalated["decision"] is None
