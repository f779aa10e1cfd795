"""Attempting deliveries: one signed POST per attempt, retried with backoff, in order per item.

Each attempt is a ``delivery_send`` task in a worker, never in a web process. The delivery row
is the truth; a task only says "look at it":

- an attempt first takes a lease on the row (``next_attempt_at`` moved past
  ``WEBHOOK_TIMEOUT``), so a duplicate task does nothing; ``deliveries_sweep`` re-queues
  deliveries whose lease ran out (a killed worker's);
- a delivery whose earlier sibling (same item and endpoint) is pending is parked, and queued
  when the sibling finishes;
- one endpoint holds at most half of a worker's delivery lanes (``_EndpointSlots``), so a
  hung receiver delays no other endpoint; a fast endpoint's attempt hands over to its next
  parked delivery itself (``HANDOVER_MAX`` in a row).

The request: ``moderation.delivery.posting.webhook_post``. Measurements:
contributors/worker-throughput.md.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone
from django_tasks import task
from standardwebhooks import Webhook

from moderation.core.backoff import retry_delay
from moderation.core.dbpool import connection_release
from moderation.core.taskqueue import tasks_orphaned
from moderation.delivery.models import DeliveryAttempt, DeliveryStatus, WebhookDelivery
from moderation.delivery.posting import webhook_post
from moderation.records.metrics import metrics_webhook_attempt_record

logger = logging.getLogger(__name__)

# An attempt's lease outlasts its HTTP timeout by this much (recording the result included).
LEASE_MARGIN_SECONDS = 2.0
# Attempts one task makes at most, handing its endpoint's slot from one parked delivery to the
# next, before it leaves the rest to the queue (the main loop has graph work too).
HANDOVER_MAX = 10
# Every worker also runs threads serving this queue alone (``manage.py db_worker``'s
# delivery lanes), so a webhook never waits behind the graph work of earlier decisions.
DELIVERY_QUEUE = "default"


@task(queue_name=DELIVERY_QUEUE)
def delivery_send(delivery_id: int) -> None:
    delivery_attempt(delivery_id=delivery_id)


def delivery_body(*, delivery: WebhookDelivery) -> str:
    """The exact bytes signed and sent: the same on every attempt (sorted keys, no spaces)."""
    return json.dumps(delivery.payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class _EndpointSlots:
    """The attempts each endpoint has in flight in this process, and a lock per endpoint.

    A lease is taken (or the delivery parked) and a result recorded (waking a parked one,
    then the slot given back) under the endpoint's lock, so a delivery parked for want of a
    slot is always seen by the attempt whose end frees one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[int, threading.Lock] = {}
        self.busy: Counter[int] = Counter()

    def lock(self, endpoint_id: int) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(endpoint_id, threading.Lock())

    def full(self, endpoint_id: int) -> bool:
        return self.busy[endpoint_id] >= max(1, settings.WEBHOOK_LANES // 2)


_slots = _EndpointSlots()


def delivery_attempt(*, delivery_id: int) -> str | None:
    """Make one attempt if the delivery is due, first in line and its endpoint has a free slot; return the
    delivery's status after it (a ``DeliveryStatus``; None: no attempt made: gone, not due, not first in line,
    or no free slot)."""
    endpoint_id = WebhookDelivery.objects.filter(pk=delivery_id).values_list("endpoint_id", flat=True).first()
    if endpoint_id is None:
        return None
    with _slots.lock(endpoint_id):
        delivery = _lease_take(delivery_id)
        if delivery is None:
            return None
        _slots.busy[endpoint_id] += 1
    outcome: str | None = None
    for made in range(1, HANDOVER_MAX + 1):
        try:
            connection_release()  # the receiver may take WEBHOOK_TIMEOUT: not with a pooled connection held
            started = time.monotonic()
            status_code, error = _post(delivery)
            latency_ms = int((time.monotonic() - started) * 1000)
        except BaseException:
            with _slots.lock(endpoint_id):
                _slots.busy[endpoint_id] -= 1
            raise
        # Recorded (the slot handed to a parked delivery) and the slot given back in one hold of
        # the lock: a delivery parked between the two would miss the slot that was freed.
        with _slots.lock(endpoint_id):
            following = None
            try:
                status, following = _result_record(
                    delivery_id=delivery.pk,
                    status_code=status_code,
                    error=error,
                    latency_ms=latency_ms,
                    hand_over=made < HANDOVER_MAX and latency_ms < settings.WEBHOOK_TIMEOUT * 1000 / 2,
                )
            finally:
                if following is None:
                    _slots.busy[endpoint_id] -= 1
        outcome = outcome or status
        if following is None:
            break
        delivery = following
    return outcome


def deliveries_sweep() -> int:
    """Re-queue pending deliveries whose attempt was lost; return how many.

    Not those whose task still waits in the queue (a backlog) or runs under a live worker
    (``moderation.core.taskqueue``): each would have been queued again on every sweep.
    """
    overdue = timezone.now() - timedelta(seconds=settings.WEBHOOK_LEASE_GRACE)
    lapsed = WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING, next_attempt_at__lt=overdue)
    chosen = tasks_orphaned(ids=lapsed.values_list("pk", flat=True).iterator(), task=delivery_send, started_since=overdue)
    with transaction.atomic():
        # Locked and read again: an attempt may have taken one since.
        lost = list(lapsed.select_for_update().filter(pk__in=chosen).values_list("pk", flat=True))
        # Due now, so the next sweep leaves them alone for a grace period.
        WebhookDelivery.objects.filter(pk__in=lost).update(next_attempt_at=timezone.now())
        for pk in lost:
            delivery_send.enqueue(pk)
    if lost:
        logger.warning("re-queued %d webhook deliveries whose attempt was lost", len(lost))
    return len(lost)


def _lease_take(delivery_id: int) -> WebhookDelivery | None:
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update(of=("self",)).select_related("endpoint").filter(pk=delivery_id).first()
        )
        now = timezone.now()
        # Gone, finished, leased by a running attempt, or a retry not yet due.
        if delivery is None or delivery.status != DeliveryStatus.PENDING or delivery.next_attempt_at > now:
            return None
        if _earlier_pending(delivery).exists() or (delivery.endpoint.active and _slots.full(delivery.endpoint_id)):
            # Parked: finishing the earlier one, or an attempt to the endpoint, queues this one (and makes it due).
            delivery.next_attempt_at = delivery.retry_until
            delivery.save(update_fields=["next_attempt_at"])
            return None
        if not delivery.endpoint.active:
            delivery.status = DeliveryStatus.FAILED
            delivery.last_error = "the endpoint is inactive"
            delivery.save(update_fields=["status", "last_error"])
            _next_in_line_queue(delivery)
            return None
        _lease(delivery, now=now)
    return delivery


def _lease(delivery: WebhookDelivery, *, now) -> None:
    delivery.attempts += 1
    delivery.next_attempt_at = now + timedelta(seconds=settings.WEBHOOK_TIMEOUT + LEASE_MARGIN_SECONDS)
    delivery.save(update_fields=["attempts", "next_attempt_at"])


def _post(delivery: WebhookDelivery) -> tuple[int | None, str]:
    body = delivery_body(delivery=delivery)
    sent_at = datetime.now(tz=UTC)
    headers = {
        "content-type": "application/json",
        "user-agent": "reviewqueue-webhooks/1",
        "webhook-id": delivery.msg_id,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": Webhook(delivery.endpoint.secret).sign(delivery.msg_id, sent_at, body),
    }
    return webhook_post(url=delivery.endpoint.url, body=body.encode(), headers=headers, timeout=settings.WEBHOOK_TIMEOUT)


def _result_record(
    *,
    delivery_id: int,
    status_code: int | None,
    error: str,
    latency_ms: int,
    hand_over: bool,
) -> tuple[str, WebhookDelivery | None]:
    """Record the attempt and give its endpoint's slot to the oldest parked delivery: leased
    here and returned when ``hand_over`` (the caller attempts it next), else queued."""
    with transaction.atomic():
        delivery = WebhookDelivery.objects.select_for_update(of=("self",)).select_related("endpoint").get(pk=delivery_id)
        DeliveryAttempt.objects.create(delivery=delivery, status_code=status_code, latency_ms=latency_ms, error=error)
        now = timezone.now()
        delivery.last_error = error
        if not error:
            delivery.status = DeliveryStatus.DELIVERED
            delivery.delivered_at = now
        elif now >= delivery.retry_until:
            delivery.status = DeliveryStatus.FAILED
            logger.error(
                "webhook %s to %s failed after %d attempts: %s", delivery.msg_id, delivery.endpoint_id, delivery.attempts, error
            )
        else:
            delay = retry_delay(tries=delivery.attempts, base=settings.WEBHOOK_RETRY_BASE, most=settings.WEBHOOK_RETRY_MAX)
            delivery.next_attempt_at = now + timedelta(seconds=delay)
            delivery_send.using(run_after=delivery.next_attempt_at).enqueue(delivery.pk)
        delivery.save(update_fields=["status", "delivered_at", "last_error", "next_attempt_at"])
        if delivery.status != DeliveryStatus.PENDING:
            _next_in_line_queue(delivery)
        following = _slot_hand_on(delivery=delivery, now=now, hand_over=hand_over)
    metrics_webhook_attempt_record(endpoint_id=delivery.endpoint_id, failed=bool(error))
    return delivery.status, following


def _slot_hand_on(*, delivery: WebhookDelivery, now: datetime, hand_over: bool) -> WebhookDelivery | None:
    """In the attempt's transaction: give its endpoint's slot to the oldest parked delivery,
    leased and returned when ``hand_over`` (the caller attempts it next), else queued."""
    parked = _parked_for_a_slot(endpoint_id=delivery.endpoint_id)
    if parked is None:
        return None
    if hand_over and delivery.endpoint.active:
        # Locked and read again: another worker's attempt may have handed it a slot since.
        following = (
            _parked(WebhookDelivery.objects.select_for_update(of=("self",)).select_related("endpoint")).filter(pk=parked).first()
        )
        if following is not None:
            _lease(following, now=now)
        return following
    _parked(WebhookDelivery.objects.filter(pk=parked)).update(next_attempt_at=now)
    delivery_send.enqueue(parked)
    return None


def _earlier_pending(delivery: WebhookDelivery):
    if delivery.item_public_id is None:
        return WebhookDelivery.objects.none()
    return WebhookDelivery.objects.filter(
        endpoint_id=delivery.endpoint_id,
        item_public_id=delivery.item_public_id,
        sequence__lt=delivery.sequence,
        status=DeliveryStatus.PENDING,
    )


def _next_in_line_queue(delivery: WebhookDelivery) -> None:
    if delivery.item_public_id is None:
        return
    following = (
        WebhookDelivery.objects.filter(
            endpoint_id=delivery.endpoint_id,
            item_public_id=delivery.item_public_id,
            sequence__gt=delivery.sequence,
            status=DeliveryStatus.PENDING,
        )
        .order_by("sequence")
        .values_list("pk", flat=True)
        .first()
    )
    if following is not None:
        WebhookDelivery.objects.filter(pk=following).update(next_attempt_at=timezone.now())
        delivery_send.enqueue(following)


def _parked_for_a_slot(*, endpoint_id: int) -> int | None:
    """The endpoint's oldest delivery parked while its slots were full (first in line for its item)."""
    earlier = WebhookDelivery.objects.filter(
        endpoint_id=endpoint_id,
        item_public_id=OuterRef("item_public_id"),
        sequence__lt=OuterRef("sequence"),
        status=DeliveryStatus.PENDING,
    )
    return (
        _parked(WebhookDelivery.objects.filter(endpoint_id=endpoint_id))
        .exclude(Exists(earlier))
        .order_by("pk")
        .values_list("pk", flat=True)
        .first()
    )


def _parked(deliveries):
    """Those parked: pending, their next attempt put off to the end of their retry window."""
    return deliveries.filter(status=DeliveryStatus.PENDING, next_attempt_at=F("retry_until"))
