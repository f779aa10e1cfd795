"""Items paused by the moderation graph before it asked LangChain's way keep working.

Their checkpoints hold the old interrupt payload (flat: item_id, title, excerpt, ...,
allowed_decisions) and no ``ReviewAsk`` rows exist for them. The old graph is rebuilt
here, node for node, to make such a checkpoint; the item is then decided with today's
code, and today's moderation graph (same node names) must finish it.
"""

from __future__ import annotations

import uuid

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from moderation.core.checkpointer import checkpointer_get
from moderation.graphs.builtin import ReviewState
from moderation.graphs.runtime import graph_is_finished, graph_resume_count, graph_values
from moderation.models import AskStatus, ItemStatus, QueueItem
from moderation.review.decisions import item_decide
from moderation.review.recovery import items_recover

pytestmark = pytest.mark.django_db


def _old_graph():
    """The moderation graph as the previous release compiled it (its nodes and its flat payload)."""

    def prescreen(state):
        return {"flags": ["link"], "risk": 40}

    def request_review(state):
        decision = interrupt({
            "item_id": state["item_id"], "title": state["title"], "excerpt": state["body"], "source": state["source"],
            "flags": state["flags"], "risk": state["risk"], "allowed_decisions": ["approve", "reject"],
        })
        return {"decision": decision}

    def apply_decision(state):
        return {"result": {"status": "approved"}}

    builder = StateGraph(ReviewState)
    builder.add_node("prescreen", prescreen)
    builder.add_node("request_review", request_review)
    builder.add_node("apply_decision", apply_decision)
    builder.add_edge(START, "prescreen")
    builder.add_edge("prescreen", "request_review")
    builder.add_edge("request_review", "apply_decision")
    builder.add_edge("apply_decision", END)
    return builder.compile(checkpointer=checkpointer_get())


def _legacy_item() -> QueueItem:
    public_id = uuid.uuid4()
    thread_id = f"item-{public_id}"
    _old_graph().invoke(
        {"item_id": str(public_id), "title": "Old post", "body": "Written before asks", "source": "forum"},
        {"configurable": {"thread_id": thread_id}},
    )
    # What migration 0011 leaves of a pending item: its row, no asks.
    return QueueItem.objects.create(
        public_id=public_id, title="Old post", body="Written before asks", source="forum", thread_id=thread_id,
        review_request={"item_id": str(public_id), "risk": 40, "flags": ["link"]},
    )


def test_a_legacy_item_is_decided_and_finished_by_todays_graph(alice, django_capture_on_commit_callbacks):
    item = _legacy_item()
    assert not item.asks.exists()

    with django_capture_on_commit_callbacks(execute=True):
        outcome = item_decide(item_public_id=item.public_id, reviewer=alice, decision="reject", note="spam")

    assert outcome.won
    item.refresh_from_db()
    assert (item.status, item.decided_by, item.apply_state) == (ItemStatus.REJECTED, alice, "")
    ask = item.asks.get()
    assert ask.status == AskStatus.DECIDED and ask.payload["action_requests"][0]["name"] == "publish"
    assert ask.payload["action_requests"][0]["args"]["risk"] == 40
    assert graph_is_finished(name="moderation", thread_id=item.thread_id)
    assert graph_values(name="moderation", thread_id=item.thread_id)["result"]["status"] == "rejected"
    assert graph_resume_count(name="moderation", thread_id=item.thread_id) == 1


def test_recover_records_the_asks_of_legacy_items():
    item = _legacy_item()

    report = items_recover()

    assert [a.action for a in report.actions] == ["recorded 1 ask(s) its graph waits on"]
    ask = item.asks.get()
    assert ask.is_pending and ask.payload["review_configs"][0]["allowed_decisions"] == ["approve", "reject"]
    assert items_recover().actions == []  # idempotent
