"""Request ids on log lines (moderation.core.requestid): per request, carried into the worker's apply, as JSON."""

from __future__ import annotations

import io
import json
import logging

import pytest
from django.test import Client
from django_tasks_db.models import DBTaskResult

from moderation.core.requestid import JsonFormatter, RequestIdFilter, request_id_bound
from moderation.review.apply import item_apply_task
from moderation.review.decisions import item_decide


@pytest.fixture
def json_lines():
    """What the console handler of LOG_FORMAT=json would write for the ``moderation`` loggers."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("moderation")
    logger.addHandler(handler)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        logger.removeHandler(handler)


@pytest.mark.django_db
def test_a_request_keeps_a_plain_id_it_brings_and_gets_a_new_one_otherwise():
    client = Client()
    assert client.get("/healthz", HTTP_X_REQUEST_ID="edge-7f3a9c01").headers["X-Request-ID"] == "edge-7f3a9c01"
    fresh = client.get("/healthz", HTTP_X_REQUEST_ID="bad id\n<script>").headers["X-Request-ID"]
    assert len(fresh) == 32 and fresh.isalnum()
    assert client.get("/healthz").headers["X-Request-ID"] != fresh


def test_a_json_line_has_the_documented_fields(json_lines):
    with request_id_bound("req-12345678"):
        logging.getLogger("moderation.test").warning("item %s: %s", 7, "odd")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("moderation.test").exception("outside a request")
    inside, outside = json_lines()
    assert inside["message"] == "item 7: odd" and inside["level"] == "WARNING" and inside["logger"] == "moderation.test"
    assert inside["request_id"] == "req-12345678"
    assert {"time", "process", "thread"} <= inside.keys() and inside["time"].endswith("+00:00")
    assert "request_id" not in outside and "ValueError: boom" in outside["exc"]


@pytest.mark.django_db(transaction=True)
def test_the_worker_logs_a_decisions_apply_under_the_deciding_requests_id(settings, alice, make_item, json_lines):
    settings.REVIEWQUEUE_APPLY_INLINE = False  # queued for a worker, as in production
    item = make_item()
    with request_id_bound("req-decide-0001"):
        assert item_decide(item_public_id=item.public_id, reviewer=alice, decision="approve").won
    queued = DBTaskResult.objects.get(task_path=f"{item_apply_task.module_path}")
    assert queued.args_kwargs == {"args": [item.pk], "kwargs": {"request_id": "req-decide-0001"}}
    # What the worker does with it, in a context of its own (no request bound).
    queued.task.call(*queued.args_kwargs["args"], **queued.args_kwargs["kwargs"])
    applied = [line for line in json_lines() if line["logger"] == "moderation.review.apply"]
    assert applied and all(line["request_id"] == "req-decide-0001" for line in applied)
    assert f"item {item.pk}: resumed 1" in applied[-1]["message"]
