"""The built-in moderation graph, run through moderation.graphs.runtime as the worker runs it."""

import threading
import uuid
from contextlib import suppress

import psycopg
import pytest
from django.db import connection

from moderation.core.checkpointer import PostgresSaver
from moderation.core.faults import fault_inject
from moderation.graphs import runtime
from moderation.graphs.builtin import ResumeValueError
from moderation.graphs.runtime import (
    graph_asks_pending,
    graph_forks,
    graph_get,
    graph_is_finished,
    graph_resume,
    graph_resume_count,
    graph_start,
    graph_start_count,
    graph_values,
)

NAME = "moderation"
DECIDED_AT = "2026-01-01T00:00:00+00:00"


def _start(title="Hello", body="Plain text", thread_id=None):
    thread_id = thread_id or f"test-{uuid.uuid4()}"
    asks = graph_start(
        name=NAME, thread_id=thread_id, state={"item_id": "item-1", "title": title, "body": body, "source": "unit"}
    ).asks
    return thread_id, asks


def _resume(thread_id, decision="approve", reviewer="alice", **meta):
    [ask] = graph_asks_pending(name=NAME, thread_id=thread_id) or [None]
    interrupt_id = ask.interrupt_id if ask else "no-such-interrupt"
    value = {"decisions": [{"type": decision}], "reviewer": reviewer, "decided_at": DECIDED_AT, "note": "", **meta}
    graph_resume(name=NAME, thread_id=thread_id, answers={interrupt_id: value})
    return graph_values(name=NAME, thread_id=thread_id)


@pytest.mark.django_db
def test_start_pauses_at_one_langchain_style_ask():
    thread_id, [ask] = _start(title="FREE MONEY", body="click here http://a.test " + "x" * 400)
    assert ask.spec.kind == "batched"
    [action] = ask.spec.actions
    assert action["name"] == "publish" and action["args"]["title"] == "FREE MONEY"
    assert len(action["args"]["excerpt"]) <= 280 and action["args"]["excerpt"].endswith("…")
    assert "1 link" in action["args"]["flags"] and action["args"]["risk"] > 0
    assert ask.spec.configs == [{"action_name": "publish", "allowed_decisions": ["approve", "reject"]}]
    assert graph_asks_pending(name=NAME, thread_id=thread_id) == [ask]
    assert graph_resume_count(name=NAME, thread_id=thread_id) == 0
    assert not graph_is_finished(name=NAME, thread_id=thread_id)


@pytest.mark.django_db
def test_resume_applies_the_decision_once_and_finishes():
    thread_id, _ = _start()
    final = _resume(thread_id, decision="reject", reviewer="bob")
    assert final["result"] == {"status": "rejected", "reviewer": "bob", "decided_at": DECIDED_AT}
    assert graph_asks_pending(name=NAME, thread_id=thread_id) == []
    assert graph_resume_count(name=NAME, thread_id=thread_id) == 1
    assert graph_forks(name=NAME, thread_id=thread_id) == 0
    assert graph_is_finished(name=NAME, thread_id=thread_id)


@pytest.mark.django_db
def test_a_withdrawal_finishes_the_graph_as_withdrawn():
    thread_id, _ = _start()
    assert _resume(thread_id, decision="reject", reviewer="svc", withdrawn=True)["result"]["status"] == "withdrawn"


@pytest.mark.django_db
def test_resume_on_a_finished_thread_changes_nothing():
    thread_id, _ = _start()
    _resume(thread_id, reviewer="alice")
    _resume(thread_id, reviewer="mallory")
    assert graph_values(name=NAME, thread_id=thread_id)["result"]["reviewer"] == "alice"
    assert graph_resume_count(name=NAME, thread_id=thread_id) == 1


@pytest.mark.django_db
def test_unknown_thread_asks_nothing_and_is_not_finished():
    thread_id = f"never-started-{uuid.uuid4()}"
    assert graph_asks_pending(name=NAME, thread_id=thread_id) == []
    assert graph_values(name=NAME, thread_id=thread_id) == {}
    assert not graph_is_finished(name=NAME, thread_id=thread_id)


@pytest.mark.django_db
@pytest.mark.parametrize("value", [{"decision": "delete-everything"}, {"decisions": [{"type": "edit"}]}, "approve"])
def test_invalid_resume_value_is_refused_by_the_graph(value):
    thread_id, [ask] = _start()
    with pytest.raises(ResumeValueError):
        graph_resume(name=NAME, thread_id=thread_id, answers={ask.interrupt_id: value})
    assert graph_asks_pending(name=NAME, thread_id=thread_id) == [ask]


@pytest.mark.django_db(transaction=True)
def test_two_unguarded_resumes_both_run_and_fork_the_thread():
    """Why the resume lock exists: LangGraph lets racing resumes of one thread both proceed.

    Each round's two resumes meet inside the resumed node, before either checkpoints, so the
    second has read the interrupt however late its thread runs (a window of milliseconds before)."""
    doubled = forked = 0
    for _ in range(5):
        thread_id, _ = _start()
        both_in_node = threading.Barrier(2, timeout=120)

        def meet(_key):  # its threads are joined within this iteration
            with suppress(threading.BrokenBarrierError):
                both_in_node.wait()  # noqa: B023

        threads = [threading.Thread(target=_resume, args=(thread_id,), kwargs={"reviewer": n}) for n in ("alice", "bob")]
        with fault_inject("in_review_node", meet):
            [t.start() for t in threads]
            [t.join() for t in threads]
        doubled += graph_resume_count(name=NAME, thread_id=thread_id) == 2
        forked += graph_forks(name=NAME, thread_id=thread_id) >= 1
    assert doubled == 5, "the history should show the double resume the resume lock prevents"
    assert forked == doubled  # every double resume forks the checkpoints


@pytest.mark.django_db
def test_each_item_has_its_own_thread_and_an_unresumed_one_stays_paused():
    a, _ = _start(title="A")
    b, _ = _start(title="B")
    c, _ = _start(title="C")
    _resume(a, reviewer="alice")
    _resume(c, decision="reject", reviewer="bob")
    assert graph_is_finished(name=NAME, thread_id=a) and graph_is_finished(name=NAME, thread_id=c)
    [ask] = graph_asks_pending(name=NAME, thread_id=b)
    assert ask.spec.actions[0]["args"]["title"] == "B"
    assert graph_get(name=NAME).get_state({"configurable": {"thread_id": b}}).next == ("request_review",)


def test_start_count_tells_a_second_start_from_a_resume():
    thread_id = f"starts-{uuid.uuid4()}"
    state = {"item_id": thread_id, "title": "t", "body": "b", "source": "s"}
    graph_start(name=NAME, thread_id=thread_id, state=state)
    graph_start(name=NAME, thread_id=thread_id, state=state)  # run again on the paused thread: a second start
    _resume(thread_id)
    assert graph_start_count(name=NAME, thread_id=thread_id) == 2
    assert graph_resume_count(name=NAME, thread_id=thread_id) == 1


def _start_cut_before_its_interrupts(thread_id: str, state: dict, monkeypatch) -> None:
    """A start whose connection ends between its checkpoint and its interrupts (as ``pg_terminate_backend`` did in
    the 30-minute soak): the checkpoint saved, start-marked, and nothing it asks."""

    def cut(*args, **kwargs):
        raise psycopg.OperationalError("the connection ended between the checkpoint and its interrupts")

    with monkeypatch.context() as patched:
        patched.setattr(PostgresSaver, "put_writes", cut)
        with pytest.raises(psycopg.OperationalError):
            graph_start(name=NAME, thread_id=thread_id, state=state)
    assert graph_start_count(name=NAME, thread_id=thread_id) == 1
    assert graph_asks_pending(name=NAME, thread_id=thread_id) == []


_one_start_index = pytest.mark.skipif(connection.vendor != "postgresql", reason="the one-start index is PostgreSQL's")


@pytest.mark.postgres_variant
@_one_start_index
@pytest.mark.django_db(transaction=True)
def test_a_start_that_never_saved_its_interrupts_is_cleared_and_run_again_by_the_next_start(monkeypatch):
    """Found by the 30-minute soak: each later start of that thread (the submit sent again) met the one-start
    index, joined a start that asks nothing, and answered 500, for good."""
    thread_id = f"cut-{uuid.uuid4()}"
    state = {"item_id": thread_id, "title": "t", "body": "b", "source": "s"}
    _start_cut_before_its_interrupts(thread_id, state, monkeypatch)
    monkeypatch.setattr(runtime, "START_JOIN_SECONDS", 0.2)  # how long a start waits for a first one's interrupts
    [ask] = graph_start(name=NAME, thread_id=thread_id, state=state).asks
    assert graph_asks_pending(name=NAME, thread_id=thread_id) == [ask]
    assert graph_start_count(name=NAME, thread_id=thread_id) == 1


@pytest.mark.postgres_variant
@_one_start_index
@pytest.mark.django_db(transaction=True)
def test_negative_control_a_start_joining_one_that_never_saved_its_interrupts_fails_for_good(monkeypatch):
    thread_id = f"cut-{uuid.uuid4()}"
    state = {"item_id": thread_id, "title": "t", "body": "b", "source": "s"}
    _start_cut_before_its_interrupts(thread_id, state, monkeypatch)
    monkeypatch.setattr(runtime, "START_JOIN_SECONDS", 0.2)
    monkeypatch.setattr(PostgresSaver, "delete_thread", lambda self, thread_id: None)  # the leftovers kept
    for _ in range(2):
        with pytest.raises(RuntimeError, match="finished without asking for review"):
            graph_start(name=NAME, thread_id=thread_id, state=state)
