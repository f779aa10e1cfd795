"""Races on a LangGraph deployment's interrupts, against a real LangGraph Server, judged by the history checker.

- Three moderators deciding one remote ask at once: one wins, the thread is resumed once.
  Control: three naive direct resumes, which the server takes as three successes
  (``moderation.lab.remote_race``).
- A webhook and a sweep discovering the same interrupts in two worker processes: one item.
  Control: a naive check-then-create discoverer in each process.
- A sweep and an apply both asking about a later round's interrupts: ``DeploymentInterrupt``'s
  uniqueness makes one item ask them. Control: the same with that uniqueness dropped.

The guarded races run in the PostgreSQL pass too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection

from moderation.graphs.passthrough import ask_interrupts
from moderation.items.models import ItemStatus, QueueItem
from moderation.lab import remote_race as remote_race_module
from moderation.lab.history import FinalItem, HistoryRecorder, history_check
from moderation.lab.remote_race import remote_race
from moderation.records.models import AttemptOutcome, DecisionAttempt
from moderation.review import deployments
from moderation.review.decisions import item_decide
from moderation.review.deployments import deployment_sweep
from moderation.review.models import DeploymentInterrupt
from moderation.tests.deployments_support import (
    agent_run,
    discovery_processes,
    edit_to,
    items_of,
    register,
    remote_outcome,
    resumes_of,
    sdk,
)
from moderation.tests.races import first_calls_meet, race_rounds

MODERATORS = ["mod_a", "mod_b", "mod_c"]


def in_threads(targets: list) -> None:
    """Each callable in a thread of its own, released together (one round of ``race_rounds``,
    which also raises a thread's exception here instead of losing it)."""
    race_rounds(1, *[lambda _round, target=target: target() for target in targets])


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
def test_three_moderators_racing_one_remote_decision_resume_its_thread_once(langgraph_server, make_moderator):
    url = langgraph_server.url
    agents = register(url)
    users = [make_moderator(name) for name in MODERATORS]
    thread_id = agent_run(url, agents.hitl)
    deployment_sweep(deployment=agents.deployment)
    [item] = items_of(thread_id)
    history = HistoryRecorder()

    def moderator(user):
        def decide() -> None:
            op = history.invoke(reviewer=user.username, item=thread_id, decision="edit")
            # The winner's apply (inline here) resumes the remote thread after the guard's commit.
            outcome = item_decide(item_public_id=item.public_id, reviewer=user, decisions=edit_to(user.username))
            history.complete(op, completion="ok" if outcome.won else "fail", told_winner=outcome.winner)

        return decide

    in_threads([moderator(user) for user in users])
    winner = remote_outcome(url, thread_id)["decisions"][0]["edited_action"]["args"]["to"].split("@")[0]
    runs, resumes = resumes_of(url, thread_id)
    final = FinalItem(
        winner=winner,
        resumes=resumes,
        decision="edit",
        winning_attempts=DecisionAttempt.objects.filter(item=item, outcome=AttemptOutcome.WON).count(),
    )
    assert history_check(ops=history.ops, final={thread_id: final}) == []
    assert (runs, resumes) == (1, 1)


@pytest.mark.django_db(transaction=True)  # the resume lock is an advisory lock on PostgreSQL
def test_naive_direct_resumes_are_all_told_they_won_and_the_guarded_path_tells_the_truth(langgraph_server, monkeypatch):
    """The negative control and the guarded resume side by side, as ``manage.py racelab --langgraph-url`` runs them."""
    # Each reviewer reads the thread before any resumes, however slow its start (the setup's read, here, passes).
    reads = first_calls_meet(remote_race_module.remote_thread_read, parties=len(MODERATORS), exempt=threading.current_thread())
    with monkeypatch.context() as patched:
        patched.setattr(remote_race_module, "remote_thread_read", reads)
        naive = remote_race(url=langgraph_server.url, assistant="hitl", reviewers=MODERATORS, mode="naive")
    assert naive.told_won == sorted(MODERATORS) and naive.resumes == 1 and naive.runs == 1 + len(MODERATORS)
    assert {a.kind for a in naive.anomalies} == {"multiple_winners", "lost_decision"}
    guarded = remote_race(url=langgraph_server.url, assistant="hitl", reviewers=MODERATORS, mode="guarded")
    assert guarded.anomalies == [] and guarded.told_won == [guarded.winner] and (guarded.runs, guarded.resumes) == (2, 1)


def _discovery_final(thread_ids: list[str]) -> dict[str, FinalItem]:
    """Per interrupt: how many items ask about it (the checker's ``starts``: two is a double start)."""
    made: dict[str, int] = {}
    for item in QueueItem.objects.filter(graph_input__external__thread_id__in=thread_ids):
        for interrupt_id in ask_interrupts(graph_input=item.graph_input):
            key = f"{item.graph_input['external']['thread_id']}:{interrupt_id}"
            made[key] = made.get(key, 0) + 1
    return {key: FinalItem(winner=None, winning_attempts=0, resumes=0, starts=n) for key, n in made.items()}


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
def test_a_webhook_and_a_sweep_racing_in_two_worker_processes_make_one_item_per_interrupt(langgraph_server, tmp_path):
    url = langgraph_server.url
    agents = register(url)
    thread_ids = [agent_run(url, agents.hitl), agent_run(url, agents.hitl), agent_run(url, agents.fanout)]
    discovery_processes(roles=["webhook", "sweep"], deployment=agents.deployment, thread_ids=thread_ids, workdir=tmp_path)
    final = _discovery_final(thread_ids)
    assert len(final) == 4  # two HITL requests, two parallel interrupts
    assert history_check(ops=[], final=final) == []
    assert QueueItem.objects.filter(graph_input__external__thread_id__in=thread_ids).count() == 3  # one per thread


@pytest.mark.django_db(transaction=True)
def test_naive_discovery_racing_in_two_worker_processes_makes_two_items_of_one_interrupt(langgraph_server, tmp_path):
    """Negative control: check for the interrupts' item, then create it, without the key the database holds."""
    url = langgraph_server.url
    agents = register(url)
    thread_id = agent_run(url, agents.fanout)
    discovery_processes(roles=["naive", "naive"], deployment=agents.deployment, thread_ids=[thread_id], workdir=tmp_path)
    anomalies = history_check(ops=[], final=_discovery_final([thread_id]))
    assert [a.kind for a in anomalies] == ["double_start", "double_start"]  # each of the two parallel interrupts


WAIT = 60.0


@contextmanager
def interrupt_uniqueness_dropped(monkeypatch) -> Iterator[None]:
    """The negative control's database: ``deployment_interrupt_asked_once`` dropped, put back after."""
    [unique] = [c for c in DeploymentInterrupt._meta.constraints if c.name == "deployment_interrupt_asked_once"]
    with monkeypatch.context() as meta:
        meta.setattr(DeploymentInterrupt._meta, "constraints", [])  # SQLite remakes the table from the model's
        with connection.schema_editor() as editor:
            editor.remove_constraint(DeploymentInterrupt, unique)
    try:
        yield
    finally:
        DeploymentInterrupt.objects.all().delete()  # its duplicates would refuse the constraint back
        with connection.schema_editor() as editor:
            editor.add_constraint(DeploymentInterrupt, unique)


def _round_race(url: str, monkeypatch, moderator) -> tuple[str, dict[str, FinalItem]]:
    """The later round's interrupts raced for by a sweep (held past its check until the apply is done) and
    the apply of a decision made after the thread was resumed elsewhere; per interrupt, the items asking it."""
    agents = register(url)
    thread_id = agent_run(url, agents.fanout)
    deployment_sweep(deployment=agents.deployment)
    [item] = items_of(thread_id)
    state = sdk(url).threads.get_state(thread_id)
    studio = {i["id"]: {"decisions": [{"type": "approve"}]} for i in state["interrupts"]}
    sdk(url).runs.wait(thread_id, agents.fanout, command={"resume": studio})  # the thread asks its next question
    checked, applied = threading.Event(), threading.Event()
    submit = deployments._interrupts_submit

    def submit_after_the_apply(**kwargs):
        checked.set()
        assert applied.wait(WAIT)
        return submit(**kwargs)

    monkeypatch.setattr(deployments, "_interrupts_submit", submit_after_the_apply)

    def decide() -> None:
        assert checked.wait(WAIT)
        try:
            for ask in item.asks.all():  # each applied on its commit, in this thread
                item_decide(item_public_id=item.public_id, reviewer=moderator, ask=ask.interrupt_id, decision="approve")
        finally:
            applied.set()

    in_threads([lambda: deployment_sweep(deployment=agents.deployment), decide])
    asking: dict[str, int] = {}
    for interrupt_id in DeploymentInterrupt.objects.filter(thread_id=thread_id).values_list("interrupt_id", flat=True):
        asking[interrupt_id] = asking.get(interrupt_id, 0) + 1
    return thread_id, {
        f"{thread_id}:{k}": FinalItem(winner=None, winning_attempts=0, resumes=0, starts=n) for k, n in asking.items()
    }


@pytest.mark.postgres_variant
@pytest.mark.django_db(transaction=True)
def test_a_sweep_and_the_apply_racing_for_a_later_rounds_interrupt_make_one_item_ask_it(
    langgraph_server,
    monkeypatch,
    alice,
):
    thread_id, final = _round_race(langgraph_server.url, monkeypatch, alice)
    assert len(final) == 3  # the two parallel interrupts, the next question
    assert history_check(ops=[], final=final) == []
    [item] = items_of(thread_id)  # the sweep's item was refused: the apply had claimed the round
    assert item.status == ItemStatus.PENDING and [a.round for a in item.asks.all()] == [1, 1, 2]


@pytest.mark.django_db(transaction=True)  # the schema is changed for the test
def test_negative_control_without_one_item_per_interrupt_the_race_makes_two_items_ask_the_later_round(
    langgraph_server,
    monkeypatch,
    alice,
):
    with interrupt_uniqueness_dropped(monkeypatch):
        thread_id, final = _round_race(langgraph_server.url, monkeypatch, alice)
        assert [a.kind for a in history_check(ops=[], final=final)] == ["double_start"]
        assert [i.status for i in items_of(thread_id)] == [ItemStatus.PENDING, ItemStatus.PENDING]
