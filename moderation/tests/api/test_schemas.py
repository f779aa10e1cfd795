"""What /api/v1 answers reads every value the code writes: each terminal state, through each read."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from moderation.api.clients import apiclient_create
from moderation.api.schemas import AskResolution, TallyOut
from moderation.items.models import QueueItem, ReviewAsk
from moderation.policies.models import TallyWhy, Team
from moderation.policies.rules import Policy, Resolution, tally_build
from moderation.policies.teams import team_member_add
from moderation.review.deadlines import deadlines_sweep
from moderation.review.decisions import item_decide
from moderation.tests.api.test_api_items import ITEM, Api

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_variant]


@pytest.fixture
def api():
    return Api(apiclient_create(name="pipeline", scopes=["items:write", "items:read"])[1])


@pytest.mark.parametrize("why", list(TallyWhy))
def test_every_resolution_a_tally_can_be_written_with_reads_back(why):
    tally = tally_build(policy=Policy(approvals=2), votes=[], eligible=2, resolution=Resolution(outcome="reject", why=why))
    assert TallyOut(**tally).why == why
    assert AskResolution(why.value) == why.value


def _submit(api, **fields) -> str:
    response = api.post("/items", {**ITEM, **fields})
    assert response.status_code == 201, response.content
    return response.json()["id"]


def _decide(item_id, user, decision="approve", **kwargs):
    return item_decide(item_public_id=item_id, reviewer=user, decision=decision, **kwargs)


def _overdue_fire(item_id) -> None:
    ReviewAsk.objects.filter(item__public_id=item_id).update(deadline_at=timezone.now() - timedelta(seconds=1))
    assert deadlines_sweep() == 1


def test_every_terminal_state_reads_back_through_each_read(
    api, payments, alice, bob, carol, reasons, test_graphs, django_capture_on_commit_callbacks
):
    """One item per way an item can end (and the states around it), read one by one, in the list and by the long-poll."""
    expected = {}  # item id -> (status, apply_state, applied state, the ask's resolution, the tally's why)
    with django_capture_on_commit_callbacks(execute=True):
        approved = _submit(api)
        _decide(approved, alice)
        expected[approved] = ("approved", "", "finished", "decision", None)

        rejected = _submit(api)
        _decide(rejected, alice, "reject", reason="spam")
        expected[rejected] = ("rejected", "", "finished", "decision", None)

        edited = _submit(api, graph="t_hitl")
        edit = {"type": "edit", "edited_action": {"name": "refund", "args": {"amount": 80, "to": "acct-1"}}}
        item_decide(item_public_id=edited, reviewer=alice, decisions=[edit])
        expected[edited] = ("edited", "", "finished", "decision", None)

        quorum = _submit(api, team="payments", policy={"approvals": 2})
        _decide(quorum, alice)
        _decide(quorum, bob)
        expected[quorum] = ("approved", "", "finished", "quorum", "quorum")

        vetoed = _submit(api, team="payments", policy={"approvals": 2, "veto": True})
        _decide(vetoed, alice, "reject", reason="spam")
        expected[vetoed] = ("rejected", "", "finished", "veto", "veto")

        impossible = _submit(api, team="payments", policy={"approvals": 3})
        _decide(impossible, alice, "reject", reason="spam")
        expected[impossible] = ("rejected", "", "finished", "impossible", "impossible")

        rejected_by_deadline = _submit(
            api, team="payments", policy={"approvals": 2, "deadline_seconds": 60, "on_deadline": "reject"}
        )
        _decide(rejected_by_deadline, alice)
        _overdue_fire(rejected_by_deadline)
        expected[rejected_by_deadline] = ("rejected", "", "finished", "deadline", "deadline")

        payments.deadline_seconds, payments.on_deadline = 60, "approve"
        payments.save()
        approved_by_deadline = _submit(api, team="payments", policy={"approvals": 2})
        _overdue_fire(approved_by_deadline)
        expected[approved_by_deadline] = ("approved", "", "finished", "deadline", "deadline")
        single_by_deadline = _submit(api, team="payments")
        _overdue_fire(single_by_deadline)
        expected[single_by_deadline] = ("approved", "", "finished", "deadline", None)
        payments.deadline_seconds, payments.on_deadline = None, ""
        payments.save()

        answered = _submit(api, graph="t_hitl")
        item_decide(item_public_id=answered, reviewer=alice, decisions=[{"type": "respond", "message": "use the form"}])
        expected[answered] = ("answered", "", "finished", "decision", None)

        mixed = _submit(api, graph="t_refund", input={"actions": 2})
        item_decide(item_public_id=mixed, reviewer=alice, decisions=[{"type": "approve"}, {"type": "reject"}])
        expected[mixed] = ("decided", "", "finished", "decision", None)

        asked_again = _submit(api, graph="t_refund")  # a response makes it propose again: a second round
        item_decide(item_public_id=asked_again, reviewer=alice, decisions=[{"type": "respond", "message": "less"}])
        expected[asked_again] = ("pending", "", "asked again", None, None)

        withdrawn = _submit(api)
        assert api.post(f"/items/{withdrawn}/cancel", {"reason": "sent by mistake"}).status_code == 200
        expected[withdrawn] = ("withdrawn", "", "finished", "withdrawn", None)

        failed = _submit(api, graph="t_failing")
        _decide(failed, alice)
        expected[failed] = ("approved", "failed", "failed", "decision", None)

    leads = Team.objects.create(slug="leads", name="Leads")
    team_member_add(team=leads, user=alice)
    Team.objects.filter(pk=payments.pk).update(deadline_seconds=60, on_deadline="escalate", escalate_to=leads)
    escalated = _submit(api, team="payments")
    _overdue_fire(escalated)
    expected[escalated] = ("pending", "", None, None, None)

    broken = _submit(api)
    QueueItem.objects.filter(public_id=broken).update(status="needs_attention", attention="its graph is gone")
    expected[broken] = ("needs_attention", "", None, None, None)

    unapplied = _submit(api)
    _decide(unapplied, alice)  # its apply is queued, not run: still applying
    expected[unapplied] = ("approved", "applying", None, "decision", None)

    listed = {}
    cursor = None
    while True:
        page = api.get("/items", **({"cursor": cursor} if cursor else {}))
        assert page.status_code == 200, page.content
        listed.update({item["id"]: item for item in page.json()["items"]})
        if not (cursor := page.json()["next_cursor"]):
            break
    assert set(listed) == set(expected)
    for item_id, (status, apply_state, applied, resolution, why) in expected.items():
        undecided = status in ("pending", "needs_attention")  # the long-poll answers 204 until it is decided
        one = api.get(f"/items/{item_id}")
        waited = api.get(f"/items/{item_id}/decision", wait=0 if undecided else 1)
        assert (one.status_code, waited.status_code) == (200, 204 if undecided else 200), (item_id, one.content)
        for body in (one.json(), listed[item_id], *([] if undecided else [waited.json()])):
            ask = body["asks"][-1]
            read = (
                body["status"],
                body["apply_state"],
                body["applied_result"].get("state"),
                ask["resolution"],
                (ask["tally"] or {}).get("why"),
            )
            assert read == (status, apply_state, applied, resolution, why), (item_id, body)
    assert QueueItem.objects.get(public_id=rejected_by_deadline).decided_by.username == "deadline"
