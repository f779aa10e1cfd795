"""Workers' heartbeats and the oldest unapplied decision (moderation.records.workers)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from moderation.records.metrics import metrics_exposition
from moderation.records.models import WorkerBeat
from moderation.records.workers import (
    item_apply_wait,
    work_state,
    work_wait,
    worker_beat,
    worker_gone,
)
from moderation.review.apply import item_apply
from moderation.review.decisions import item_decide

pytestmark = pytest.mark.postgres_variant


@pytest.fixture
def no_inline_apply(settings):
    settings.REVIEWQUEUE_APPLY_INLINE = False  # the decision waits for a worker, as with servers


def _beat(worker_id: str, *, seconds_ago: float) -> None:
    worker_beat(worker_id=worker_id, metrics_port=0, started_at=timezone.now())
    WorkerBeat.objects.filter(worker_id=worker_id).update(beat_at=timezone.now() - timedelta(seconds=seconds_ago))


@pytest.mark.django_db
def test_a_worker_is_alive_within_the_grace_and_gone_after_it(settings):
    settings.WORKER_HEARTBEAT_GRACE = 30
    assert work_state().alive == 0 and work_state().workers == []
    _beat("old", seconds_ago=31)  # negative control: past the grace
    _beat("new", seconds_ago=1)
    state = work_state()
    assert [(w.worker_id, w.alive) for w in state.workers] == [("new", True), ("old", False)]
    assert state.alive == 1 and state.workers_ok
    worker_gone(worker_id="new")  # stopped cleanly
    assert work_state().alive == 0 and not work_state().workers_ok


@pytest.mark.django_db
def test_a_beat_prunes_the_rows_of_workers_gone_for_a_day():
    _beat("killed", seconds_ago=2 * 86400)
    _beat("yesterday", seconds_ago=3600)
    worker_beat(worker_id="alive", metrics_port=9101, started_at=timezone.now())
    assert set(WorkerBeat.objects.values_list("worker_id", flat=True)) == {"yesterday", "alive"}
    assert WorkerBeat.objects.get(worker_id="alive").metrics_port == 9101


@pytest.mark.django_db(transaction=True)
def test_the_oldest_unapplied_decision_ages_until_a_worker_applies_it(settings, alice, make_item, no_inline_apply):
    settings.APPLY_WAIT_NOTICE = 60
    item, other = make_item(), make_item()
    assert work_state().unapplied_oldest_seconds is None and item_apply_wait(item=item) is None
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve").won
    item.refresh_from_db()
    state = work_state()
    assert state.unapplied_oldest_seconds is not None and state.unapplied_ok
    assert item_apply_wait(item=item) is not None and item_apply_wait(item=other) is None
    # Two minutes later, with no worker: not ready, and staff are told since when.
    item.asks.update(decided_at=timezone.now() - timedelta(seconds=180))
    state = work_state()
    assert state.unapplied_oldest_seconds >= 180 and not state.unapplied_ok
    assert work_wait(state=state).no_worker and work_wait(state=state).oldest_minutes == 3
    body = metrics_exposition()[0].decode()
    assert "reviewqueue_workers_alive 0.0" in body
    assert "reviewqueue_unapplied_oldest_seconds 18" in body  # 180.x s
    item_apply(item_id=item.pk)  # what the worker does
    state = work_state()
    assert state.unapplied_oldest_seconds is None
    assert "reviewqueue_unapplied_oldest_seconds 0.0" in metrics_exposition()[0].decode()


@pytest.mark.django_db
def test_staff_are_told_only_when_no_worker_is_alive_or_a_decision_waits_past_the_notice(settings):
    settings.APPLY_WAIT_NOTICE = 60
    assert work_wait(state=work_state()) == work_wait(state=work_state())  # no worker ever
    wait = work_wait(state=work_state())
    assert wait.no_worker and wait.silent_minutes is None and wait.oldest_minutes is None
    _beat("w", seconds_ago=1)
    assert work_wait(state=work_state()) is None  # negative control: a worker, nothing waiting
    _beat("w", seconds_ago=125)
    wait = work_wait(state=work_state())
    assert wait.no_worker and wait.silent_minutes == 2
