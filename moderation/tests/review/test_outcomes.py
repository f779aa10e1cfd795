"""The outcome report's service: one report per item, audited (the API's cases are in tests/api/test_api_outcomes.py)."""

import pytest
from django.db import connection

from moderation.api.clients import apiclient_create
from moderation.records.audit import audit_verify
from moderation.records.models import OutcomeReport
from moderation.review.decisions import item_decide
from moderation.review.outcomes import OutcomeInvalid, item_outcome_report, outcome_message_check
from moderation.review.submissions import Submission, item_submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def reported(alice):
    client = apiclient_create(name="agent", scopes=["items:write"])[0]
    item = item_submit(client=client, submission=Submission(title="t", body="b", source="s", ask={"question": "go?"})).item
    assert item_decide(item_public_id=item.public_id, reviewer=alice, decisions=[{"type": "approve"}]).won
    return item_outcome_report(client=client, item_public_id=str(item.public_id), status="done", message="sent").report


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE moderation_outcomereport SET message = 'never sent'",
        "UPDATE moderation_outcomereport SET status = 'failed'",
        "DELETE FROM moderation_outcomereport",
    ],
)
def test_an_edited_or_deleted_report_is_found_by_the_audit(reported, sql):
    assert audit_verify().problems == []

    with connection.cursor() as cursor:
        cursor.execute(sql)

    (problem,) = audit_verify().problems
    assert problem.item == str(reported.item.public_id)
    assert "outcome report" in problem.problem and ("edited" in problem.problem or "deleted" in problem.problem)


@pytest.mark.parametrize("message", ["two\nlines\tand a tab", "", "é" * 500])
def test_a_message_may_have_line_breaks_and_tabs(message):
    assert outcome_message_check(message=message) == message


@pytest.mark.parametrize("message", ["\x00", "bell\x07", "\x7f", "c1\x85", "e" * 501])
def test_a_message_with_other_control_characters_or_too_long_is_refused(message):
    with pytest.raises(OutcomeInvalid) as refused:
        outcome_message_check(message=message)
    assert refused.value.field == "message"


def test_a_report_is_append_only(reported):
    reported.message = "rewritten"
    with pytest.raises(Exception, match="append-only"):
        reported.save()
    assert OutcomeReport.objects.get().message == "sent"
