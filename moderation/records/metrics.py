"""What /metrics reports to Prometheus: events counted where they happen, the queue's state read at scrape.

One target per process (not prometheus-client's multiprocess mode): each server process
serves its own /metrics, each task worker its own from ``METRICS_WORKER_PORT`` up
(``metrics_worker_serve``); sum event series over instances.

- Events (decisions, lost races, applies, webhook attempts, deadline fires, lock-outs):
  counters and histograms changed in ``after_commit`` callbacks, so a rolled-back
  transaction counts nothing and no lock is held while counting.
- The queue's state, read from the database at scrape by ``QueueCollector``, the same from
  every server (take ``max``, not ``sum``; workers do not report it). No query costs
  O(pending): counts come from ``moderation.records.counts``' rows, ages from one index seek
  per team.

Series and alerts: operators/monitoring.md.
"""

from __future__ import annotations

import errno
import hmac
import ipaddress
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING

from django.apps import apps
from django.conf import settings
from django.db.models import Count, Min, Sum
from django.utils import timezone
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from moderation.items.models import AskStatus, ItemStatus, QueueItem, ReviewAsk
from moderation.policies.models import Team
from moderation.records import events
from moderation.records.counts import NO_TEAM
from moderation.records.models import AttemptOutcome, PendingCounter
from moderation.records.workers import work_state

if TYPE_CHECKING:
    from moderation.records.models import DecisionAttempt

# Seconds: from a few seconds (a hot queue) to days (a forgotten one).
_WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 3 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400)
_LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)

DECISIONS = Counter("reviewqueue_decisions", "Judged decision attempts, by outcome (won, lost, refused, voted)", ["outcome"])
LOST_RACES = Counter(
    "reviewqueue_lost_races", "Lost attempts asked before the winner was recorded (a real race, not a stale page)"
)
TIME_TO_DECISION = Histogram(
    "reviewqueue_time_to_decision_seconds", "From an item's creation to its winning decision", buckets=_WAIT_BUCKETS
)
APPLY_LAG = Histogram(
    "reviewqueue_apply_lag_seconds", "From a decision to the worker having run the graph on from it", buckets=_LAG_BUCKETS
)
APPLY_FAILURES = Counter("reviewqueue_apply_failures", "Applies whose graph failed (the item is marked failed)")
WEBHOOK_ATTEMPTS = Counter("reviewqueue_webhook_attempts", "Webhook POSTs made, by endpoint id", ["endpoint"])
WEBHOOK_FAILURES = Counter(
    "reviewqueue_webhook_failures", "Webhook POSTs that failed (error or non-2xx), by endpoint id", ["endpoint"]
)
OPEN = Gauge("reviewqueue_open_connections", "Live connections open in this process, by kind (socket, long_poll)", ["kind"])
DEADLINE_FIRES = Counter("reviewqueue_deadline_fires", "Asks settled or escalated by their deadline, by action", ["action"])
ESCALATIONS = Counter("reviewqueue_escalations", "Overdue items handed to their team's escalation team")
LOCKOUTS = Counter("reviewqueue_login_lockouts", "Logins locked out after too many failures (django-axes)")

_OUTCOME_WORDS = {
    AttemptOutcome.WON: "won",
    AttemptOutcome.LOST: "lost",
    AttemptOutcome.INVALID: "refused",
    AttemptOutcome.VOTED: "voted",
}
for _kind in ("socket", "long_poll"):
    OPEN.labels(kind=_kind)  # reported as 0 before the first one opens
for _outcome in _OUTCOME_WORDS.values():
    DECISIONS.labels(outcome=_outcome)


def metrics_attempt_record(*, attempt: DecisionAttempt, item_created_at: datetime) -> None:
    """Count a judged attempt once its transaction commits. Call in that transaction."""
    outcome = _OUTCOME_WORDS.get(attempt.outcome, attempt.outcome)
    raced = (
        attempt.outcome == AttemptOutcome.LOST
        and attempt.winner_decided_at is not None
        and attempt.requested_at <= attempt.winner_decided_at
    )
    waited = (
        (attempt.winner_decided_at - item_created_at).total_seconds()
        if attempt.outcome == AttemptOutcome.WON and attempt.winner_decided_at
        else None
    )

    def count() -> None:
        DECISIONS.labels(outcome=outcome).inc()
        if raced:
            LOST_RACES.inc()
        if waited is not None:
            TIME_TO_DECISION.observe(max(0.0, waited))

    events.after_commit(count)


def metrics_applied_record(*, asks: list[ReviewAsk], at: datetime) -> None:
    """Observe the apply lag of ``asks``, marked applied at ``at`` in the caller's transaction (observed if it commits).

    The caller read them unapplied under the thread's resume lock, which every mark of
    applied holds: none is marked twice, so none is observed twice.
    """
    lags = [(at - ask.decided_at).total_seconds() for ask in asks if ask.decided_at is not None]
    events.after_commit(lambda: [APPLY_LAG.observe(max(0.0, lag)) for lag in lags])


def metrics_apply_failed_record() -> None:
    events.after_commit(APPLY_FAILURES.inc)


def metrics_webhook_attempt_record(*, endpoint_id: int, failed: bool) -> None:
    """Count one webhook POST (called once its result is committed)."""
    WEBHOOK_ATTEMPTS.labels(endpoint=str(endpoint_id)).inc()
    if failed:
        WEBHOOK_FAILURES.labels(endpoint=str(endpoint_id)).inc()


def metrics_deadline_fired_record(*, action: str) -> None:
    DEADLINE_FIRES.labels(action=action).inc()


def metrics_escalated_record() -> None:
    """Count an escalation once its transaction commits; call in it."""
    events.after_commit(ESCALATIONS.inc)


def metrics_lockout_record(**_signal) -> None:
    """django-axes' ``user_locked_out`` receiver (connected in ``moderation.apps``)."""
    LOCKOUTS.inc()


@contextmanager
def metrics_open_track(*, kind: str) -> Iterator[None]:
    """Count a live connection (``socket``, ``long_poll``) as open for as long as the block runs."""
    gauge = OPEN.labels(kind=kind)
    gauge.inc()
    try:
        yield
    finally:
        gauge.dec()


class QueueCollector:
    """The queue's state, read from the database at each scrape (see the module docstring for the cost)."""

    def collect(self):
        now = timezone.now()
        slugs = dict(Team.objects.values_list("pk", "slug"))
        pending = GaugeMetricFamily(
            "reviewqueue_pending_items", "Items waiting for a decision (from the counter rows)", labels=["team", "graph", "band"]
        )
        rows = PendingCounter.objects.values("team_key", "graph", "band").annotate(n=Sum("n")).order_by()
        for row in rows:
            pending.add_metric([slugs.get(row["team_key"], ""), row["graph"], row["band"]], int(row["n"]))
        yield pending
        oldest = GaugeMetricFamily(
            "reviewqueue_oldest_pending_age_seconds",
            "Age of the oldest pending item, by team (absent: none pending)",
            labels=["team"],
        )
        for team_key in (NO_TEAM, *slugs):
            created = _oldest_pending(team_id=team_key or None)
            if created is not None:
                oldest.add_metric([slugs.get(team_key, "")], (now - created).total_seconds())
        yield oldest
        overdue = ReviewAsk.objects.filter(status=AskStatus.PENDING).aggregate(first=Min("deadline_at"))["first"]
        yield GaugeMetricFamily(
            "reviewqueue_deadline_overdue_seconds",
            "How long the most overdue open ask has been past its deadline (0: none); the worker fires deadlines",
            value=max(0.0, (now - overdue).total_seconds()) if overdue else 0.0,
        )
        backlog = GaugeMetricFamily(
            "reviewqueue_webhook_backlog", "Webhook deliveries not yet delivered or failed, by endpoint id", labels=["endpoint"]
        )
        # By name, with "pending" for DeliveryStatus.PENDING: the model is moderation.delivery's, a layer above this one.
        deliveries = apps.get_model("moderation", "WebhookDelivery").objects
        waiting = deliveries.filter(status="pending").values("endpoint_id").annotate(n=Count("id"))
        for row in waiting.order_by():
            backlog.add_metric([str(row["endpoint_id"])], row["n"])
        yield backlog
        work = work_state()
        yield GaugeMetricFamily(
            "reviewqueue_workers_alive",
            "Task workers whose heartbeat is newer than WORKER_HEARTBEAT_GRACE (0: nothing applies the decisions)",
            value=work.alive,
        )
        yield GaugeMetricFamily(
            "reviewqueue_unapplied_oldest_seconds",
            "How long the oldest decision not yet applied by a worker has waited (0: none waits)",
            value=work.unapplied_oldest_seconds or 0.0,
        )


def _oldest_pending(*, team_id: int | None):
    # One seek on the partial index item_pending_team_age_idx (team, created_at) WHERE pending.
    items = QueueItem.objects.filter(status=ItemStatus.PENDING, is_lab=False, team_id=team_id)
    return items.order_by("created_at").values_list("created_at", flat=True).first()


_queue_registry = CollectorRegistry(auto_describe=False)
_queue_registry.register(QueueCollector())


def metrics_exposition(*, with_queue: bool = True) -> tuple[bytes, str]:
    """This process's series (and the queue's state), in Prometheus' text format, with its content type."""
    body = generate_latest(REGISTRY)
    if with_queue:
        body += generate_latest(_queue_registry)
    return body, CONTENT_TYPE_LATEST


def metrics_access(*, remote_addr: str, forwarded: bool, authorization: str) -> int:
    """Who may read /metrics: 200 for a loopback caller or the right ``Bearer METRICS_TOKEN``; 401 without
    a token, 403 with a wrong one (or when no token is set: only loopback callers may read).

    A request that came through a proxy (``forwarded``: it carries a forwarding header) is not a
    loopback caller even from 127.0.0.1: behind a proxy on the same host every request is.
    """
    try:
        if ipaddress.ip_address(remote_addr).is_loopback and not forwarded:
            return 200
    except ValueError:
        pass
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return 401
    expected = settings.METRICS_TOKEN
    if expected and hmac.compare_digest(token.strip().encode(), expected.encode()):
        return 200
    return 403


class MetricsPortsBusy(Exception):
    """No port of a worker's range could be listened on (``str()``: one line that says which and why)."""


def metrics_worker_serve(*, base: int, tries: int, addr: str) -> int:
    """Serve this worker process's series (no queue state) on the first free port of ``addr:base`` ..
    ``base + tries - 1``, in a daemon thread; return that port.

    Several workers of one host share one environment (one ``METRICS_WORKER_PORT``): each takes the
    next free port, and Prometheus scrapes the range. Binding is the test (no check-then-bind race
    between two workers starting at once). No token check there: it listens on loopback
    (``METRICS_WORKER_ADDR``) unless told otherwise.
    """
    for port in range(base, base + max(1, tries)):
        try:
            start_http_server(port, addr=addr, registry=REGISTRY)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                continue
            raise MetricsPortsBusy(f"METRICS_WORKER_PORT: cannot listen on {addr}:{port}: {exc.strerror}") from None
        return port
    last = base + max(1, tries) - 1
    raise MetricsPortsBusy(
        f"METRICS_WORKER_PORT: ports {base}-{last} on {addr} are all in use (by other workers?): "
        f"raise METRICS_WORKER_PORTS ({tries}) or give this worker --metrics-port"
    )
