"""SQL statements per decision: a watched number (bench measure 1), which must not grow without a reason.

Counted as the bench counts them (``bench.inprocess.decision_statements``): one decision as a
request makes it, its apply queued for the worker, savepoints aside. A change that adds a
statement raises ``DECISION_STATEMENTS`` in the same commit, with its reason in
docs/contributors/worker-throughput.md.
"""

from unittest import mock

import pytest
from django.db import connection

from bench.inprocess import DECISION_STATEMENTS, decision_statements
from moderation.items.models import ItemStatus
from moderation.review import decisions

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_variant]


def test_one_decision_runs_at_most_the_documented_statements(make_item, alice):
    item = make_item()
    statements = decision_statements(item=str(item.public_id), reviewer_pk=alice.pk)
    sql = "\n".join(s for s, _ in statements)
    assert any(s.startswith("UPDATE") and "moderation_queueitem" in s for s, _ in statements), sql  # it did decide
    assert len(statements) <= DECISION_STATEMENTS[connection.vendor], sql
    item.refresh_from_db()
    assert item.status == ItemStatus.PENDING  # counted in a transaction rolled back after


def test_the_count_sees_one_statement_more(make_item, alice):
    """Negative control: a statement added inside the decision is counted, so the bound above can fail."""
    real = decisions.item_decide

    def with_one_more(**kwargs):
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return real(**kwargs)

    plain = decision_statements(item=str(make_item().public_id), reviewer_pk=alice.pk)
    with mock.patch.object(decisions, "item_decide", with_one_more):
        grown = decision_statements(item=str(make_item().public_id), reviewer_pk=alice.pk)
    assert len(grown) == len(plain) + 1
