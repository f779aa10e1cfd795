"""Agents' outcome reports racing on one item, in real threads: the first report stands, every answer tells the truth.

The check (``_reports_check``) judges each thread's answer against the final rows: one
report, one ledger entry, one ``item.outcome`` delivery; "recorded" only for the report
stored; "the same" only when it equals the stored one; "already reported" only when it
differs; nothing unknown (a 500). The negative control runs a check-then-insert without the
item's lock through the same threads, and the check sees it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection

from moderation.api.clients import apiclient_create
from moderation.core.faults import fault_inject
from moderation.delivery.models import WebhookDelivery, WebhookEndpoint
from moderation.items.models import QueueItem
from moderation.records.models import AuditLedgerEntry, LedgerKind, OutcomeReport
from moderation.review.decisions import item_decide
from moderation.review.outcomes import OutcomeRefused, item_outcome_report
from moderation.review.submissions import Submission, item_submit
from moderation.tests.races import meetings

pytestmark = [pytest.mark.postgres_variant, pytest.mark.django_db(transaction=True)]

REPORTS = [("done", "sent"), ("failed", "CRM down"), ("done", "sent"), ("failed", "timeout"), ("done", "sent"), ("done", "")]


def _decided_items(alice, n: int):
    client = apiclient_create(name="agent", scopes=["items:write"])[0]
    WebhookEndpoint.objects.create(name="agent", url="http://agent.test/hooks", events=["item.outcome"])
    items = []
    for i in range(n):
        item = item_submit(client=client, submission=Submission(title=f"t{i}", body="b", source="s", ask={"q": i})).item
        assert item_decide(item_public_id=item.public_id, reviewer=alice, decisions=[{"type": "approve"}]).won
        items.append(str(item.public_id))
    return client, items


def _race(report: Callable[[str, str, str], str], items: list[str]) -> dict[str, list[tuple[tuple[str, str], str]]]:
    """Every REPORTS entry on every item at once, a thread each; each thread's (report, answer) by item."""
    answers: dict[str, list[tuple[tuple[str, str], str]]] = {item: [] for item in items}
    barrier = threading.Barrier(len(REPORTS) * len(items))

    def one(item: str, sent: tuple[str, str]) -> None:
        barrier.wait()
        try:
            answer = report(item, *sent)
        except OutcomeRefused as exc:
            answer = exc.code
        except Exception as exc:  # noqa: BLE001 - the check counts it: an answer the agent cannot trust
            answer = f"unknown: {type(exc).__name__}"
        finally:
            connection.close()
        answers[item].append((sent, answer))

    threads = [threading.Thread(target=one, args=(item, sent)) for item in items for sent in REPORTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def _reports_check(answers: dict[str, list[tuple[tuple[str, str], str]]]) -> list[str]:
    anomalies = []
    for item_id, told in answers.items():
        item = QueueItem.objects.get(public_id=item_id)
        stored = [(r.status, r.message) for r in OutcomeReport.objects.filter(item=item)]
        ledger = AuditLedgerEntry.objects.filter(item_public_id=item_id, kind=LedgerKind.OUTCOME).count()
        sent = WebhookDelivery.objects.filter(item_public_id=item_id, event="item.outcome").count()
        if (len(stored), ledger, sent) != (1, 1, 1):
            anomalies.append(f"{item_id}: {len(stored)} reports, {ledger} ledger entries, {sent} webhooks")
        standing = stored[0] if stored else None
        for report, answer in told:
            if answer.startswith("unknown"):
                anomalies.append(f"{item_id}: {report} answered {answer}")
            elif answer in ("recorded", "same") and report != standing:
                anomalies.append(f"{item_id}: {report} told {answer}, but {standing} is the report")
            elif answer == "outcome_already_reported" and report == standing:
                anomalies.append(f"{item_id}: {report} told already reported, but it is the report")
        if sum(answer == "recorded" for _, answer in told) != 1:
            anomalies.append(f"{item_id}: {sum(a == 'recorded' for _, a in told)} reports told they were recorded")
    return anomalies


def _widened():
    # Every thread past its checks at once: what a slow database does now and then.
    return fault_inject("outcome_checked", lambda key: time.sleep(0.05))


def _service(client):
    def report(item: str, status: str, message: str) -> str:
        reported = item_outcome_report(client=client, item_public_id=item, status=status, message=message)
        return "recorded" if reported.created else "same"

    return report


def _naive(client):
    """Check, then insert, without the item's lock (the guard removed). An item's reports all check before any
    inserts (they meet in between), so the race is certain however the threads are scheduled."""
    checked = meetings(parties=len(REPORTS))

    def report(item: str, status: str, message: str) -> str:
        row = QueueItem.objects.get(public_id=item)
        existing = OutcomeReport.objects.filter(item=row).first()
        checked(item)
        if existing is not None:
            return "same" if (existing.status, existing.message) == (status, message) else "outcome_already_reported"
        OutcomeReport.objects.create(
            item=row, status=status, message=message, reported_by=client, reported_at=row.decided_at, key_id="naive", mac="naive"
        )
        return "recorded"

    return report


def test_racing_reports_one_stands_and_every_answer_is_true(alice):
    client, items = _decided_items(alice, 3)
    with _widened():
        answers = _race(_service(client), items)
    assert _reports_check(answers) == []
    assert all({a for _, a in told} <= {"recorded", "same", "outcome_already_reported"} for told in answers.values())


def test_negative_control_without_the_lock_the_check_sees_unknown_answers(alice):
    client, items = _decided_items(alice, 3)
    answers = _race(_naive(client), items)
    anomalies = _reports_check(answers)
    assert any("answered unknown: IntegrityError" in a for a in anomalies), anomalies
