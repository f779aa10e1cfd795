import threading
import uuid

import pytest

from moderation.graph import (
    graph_decision_read,
    graph_get,
    graph_is_finished,
    graph_pending_review,
    graph_resume,
    graph_resume_count,
    graph_start,
)


def _start(title="Hello", body="Plain text", thread_id=None):
    thread_id = thread_id or f"test-{uuid.uuid4()}"
    payload = graph_start(thread_id=thread_id, item_id="item-1", title=title, body=body, source="unit")
    return thread_id, payload


def _resume(thread_id, decision="approve", reviewer="alice"):
    return graph_resume(thread_id=thread_id, decision=decision, reviewer=reviewer, note="", decided_at="2026-01-01T00:00:00+00:00")


@pytest.mark.django_db
def test_start_pauses_at_review_with_a_renderable_payload():
    thread_id, payload = _start(title="FREE MONEY", body="click here http://a.test " + "x" * 400)
    assert payload["item_id"] == "item-1"
    assert payload["title"] == "FREE MONEY"
    assert payload["allowed_decisions"] == ["approve", "reject"]
    assert len(payload["excerpt"]) <= 280 and payload["excerpt"].endswith("…")
    assert "1 link" in payload["flags"] and payload["risk"] > 0
    assert graph_pending_review(thread_id=thread_id) == payload
    assert graph_resume_count(thread_id=thread_id) == 0
    assert not graph_is_finished(thread_id=thread_id)


@pytest.mark.django_db
def test_resume_applies_the_decision_once_and_finishes():
    thread_id, _ = _start()
    final = _resume(thread_id, decision="reject", reviewer="bob")
    assert final["result"] == {"status": "rejected", "reviewer": "bob", "decided_at": "2026-01-01T00:00:00+00:00"}
    assert graph_pending_review(thread_id=thread_id) is None
    assert graph_decision_read(thread_id=thread_id)["reviewer"] == "bob"
    assert graph_resume_count(thread_id=thread_id) == 1
    assert graph_is_finished(thread_id=thread_id)


@pytest.mark.django_db
def test_resume_on_a_finished_thread_changes_nothing():
    thread_id, _ = _start()
    _resume(thread_id, reviewer="alice")
    _resume(thread_id, reviewer="mallory")
    assert graph_decision_read(thread_id=thread_id)["reviewer"] == "alice"
    assert graph_resume_count(thread_id=thread_id) == 1


@pytest.mark.django_db
def test_unknown_thread_is_not_pending_and_has_no_decision():
    thread_id = f"never-started-{uuid.uuid4()}"
    assert graph_pending_review(thread_id=thread_id) is None
    assert graph_decision_read(thread_id=thread_id) is None
    assert not graph_is_finished(thread_id=thread_id)


@pytest.mark.django_db
def test_invalid_resume_value_is_refused_by_the_graph():
    thread_id, _ = _start()
    from langgraph.types import Command

    with pytest.raises(ValueError):
        graph_get().invoke(Command(resume={"decision": "delete-everything"}), {"configurable": {"thread_id": thread_id}})
    assert graph_pending_review(thread_id=thread_id) is not None


@pytest.mark.django_db(transaction=True)
def test_two_unguarded_resumes_both_run_the_review_node():
    """Why the guard exists: LangGraph lets racing resumes of one thread both proceed."""
    doubled = 0
    for _ in range(5):
        thread_id, _ = _start()
        barrier = threading.Barrier(2)

        def go(name):
            barrier.wait()
            _resume(thread_id, reviewer=name)

        threads = [threading.Thread(target=go, args=(n,)) for n in ("alice", "bob")]
        [t.start() for t in threads]
        [t.join() for t in threads]
        doubled += graph_resume_count(thread_id=thread_id) == 2
    assert doubled >= 1, "the history should show the double resume the guard prevents"


@pytest.mark.django_db
def test_each_item_has_its_own_thread_and_an_unresumed_one_stays_paused():
    a, _ = _start(title="A")
    b, _ = _start(title="B")
    c, _ = _start(title="C")
    _resume(a, reviewer="alice")
    _resume(c, decision="reject", reviewer="bob")
    assert graph_is_finished(thread_id=a) and graph_is_finished(thread_id=c)
    assert graph_pending_review(thread_id=b)["title"] == "B"
    assert graph_get().get_state({"configurable": {"thread_id": b}}).next == ("request_review",)
