"""LangGraph deployments against a real LangGraph Server (``langgraph dev``, ``moderation/tests/langgraph_app``).

Registration, discovery by sweep (also a real ``db_worker``'s) and by the run's real webhook,
four eyes from the thread's metadata, parallel interrupts (one item, one ask each) and a later
round (round 2 of the same item, also when a sweep runs during the apply or a worker is
killed before recording it), an interrupt resumed elsewhere (withdrawn, the moderator told),
the server unreachable mid-apply. The races (webhook against sweep in
two worker processes; three moderators on one decision) are judged by the history checker against
the server's own count of runs and checkpoints, beside the negative control: the naive
direct resume, which the server accepts twice and answers both with 200.
"""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_tasks.base import TaskResultStatus
from django_tasks_db.models import DBTaskResult, get_date_max

from moderation.core.faults import fault_inject
from moderation.delivery.models import ApiClient
from moderation.graphs.outcome import AppliedState
from moderation.graphs.passthrough import ask_interrupts
from moderation.graphs.remote import remote_thread_read
from moderation.items.models import ApplyState, ItemStatus, QueueItem, ReviewAsk
from moderation.lab.waits import progress_wait
from moderation.records.events import item_group
from moderation.review import deployments
from moderation.review.apply import ApplyOutcome, ApplyResult, item_apply, item_apply_task
from moderation.review.decisions import item_decide
from moderation.review.deployments import (
    DeploymentInvalid,
    GraphRoute,
    deployment_register,
    deployment_thread_discover,
    deployment_webhook_path,
    deployments_sweep,
    interrupts_key,
)
from moderation.review.models import Deployment
from moderation.review.remote import RESOLVED_OUTSIDE, deployment_connection
from moderation.review.submissions import Submission, item_submit
from moderation.tests.deployments_support import (
    agent_run,
    db_worker,
    edit_to,
    items_of,
    register,
    remote_outcome,
    resumes_of,
    sdk,
)
from moderation.tests.docs_examples import block_find
from moderation.tests.langgraph_server import PortGate, free_port


@contextmanager
def item_page(item: QueueItem) -> Iterator[dict]:
    """An open page of the item (its live group on the channel layer); yields the ``item.decided`` it is sent."""
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(item_group(str(item.public_id)), channel)
    told: dict = {}
    yield told

    async def decided() -> dict:
        while (message := await asyncio.wait_for(layer.receive(channel), 30))["type"] != "item.decided":
            pass
        return message

    told.update(async_to_sync(decided)())


@pytest.fixture
def decide(django_capture_on_commit_callbacks):
    """``item_decide``, then what its commit sets off (the apply) run, as the worker would."""

    def run(**kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return item_decide(**kwargs)

    return run


@pytest.fixture
def sweep(django_capture_on_commit_callbacks):
    """``deployments_sweep``, then what its commits set off (a withdrawal's apply)."""

    def run():
        with django_capture_on_commit_callbacks(execute=True):
            return deployments_sweep()

    return run


@pytest.mark.django_db
def test_a_bad_url_key_or_graph_is_a_clear_error_and_creates_nothing(langgraph_server):
    before = (Deployment.objects.count(), ApiClient.objects.count(), get_user_model().objects.count())
    with pytest.raises(DeploymentInvalid, match="cannot reach the deployment"):
        deployment_register(
            name="agents-bad", url=f"http://127.0.0.1:{free_port()}", api_key="", routes=[GraphRoute(graph="hitl")]
        )
    with pytest.raises(DeploymentInvalid, match=r"has no assistant or graph 'nope' \(its graphs: fanout, hitl\)"):
        deployment_register(name="agents-bad", url=langgraph_server.url, api_key="", routes=[GraphRoute(graph="nope")])
    with pytest.raises(DeploymentInvalid, match="url: Enter a valid URL"):
        deployment_register(name="agents-bad", url="ftp://x", api_key="", routes=[GraphRoute(graph="hitl")])
    with pytest.raises(DeploymentInvalid, match="team: no team 'ghosts'"):
        deployment_register(
            name="agents-bad", url=langgraph_server.url, api_key="", routes=[GraphRoute(graph="hitl", team="ghosts")]
        )
    assert (Deployment.objects.count(), ApiClient.objects.count(), get_user_model().objects.count()) == before


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("asks", "field"),
    [
        ([], "asks"),
        ([{"interrupt_id": "a", "value": 1}, {"interrupt_id": "a", "value": 2}], "asks"),
        ([{"interrupt_id": "a"}], "asks[0]"),
        ([{"interrupt_id": "x" * 65, "value": 1}], "asks[0].interrupt_id"),
        ([{"interrupt_id": "a", "value": "\x00"}], "asks[0].value"),
    ],
)
def test_a_bad_set_of_interrupts_is_a_clear_error_and_creates_nothing(asks, field):
    client = ApiClient.objects.create(name="langgraph.bad", user=get_user_model().objects.create(username="lg.bad"))
    submission = Submission(title="t", body="b", source="s", asks=asks, external={"thread_id": "t1"}, external_id="t1:k")
    with pytest.raises(ValidationError) as refused:
        item_submit(client=client, submission=submission)
    assert field in refused.value.message_dict
    assert not QueueItem.objects.exists()


@pytest.mark.django_db
def test_sweep_makes_one_item_per_interrupt_with_four_eyes_and_the_decision_resumes_the_thread_once(
    langgraph_server,
    alice,
    make_moderator,
    decide,
    sweep,
):
    url = langgraph_server.url
    bob = make_moderator("bob")
    agents = register(url)
    thread_id = agent_run(url, agents.hitl, metadata={"requested_by": "bob"}, to="team@example.com")
    sweep()
    [item] = items_of(thread_id)
    sweep()
    assert items_of(thread_id) == [item]  # found again: the same item
    assert (item.requested_by, item.status, item.graph) == (bob, ItemStatus.PENDING, "ask")
    [ask] = item.asks.all()
    assert ask.payload["action_requests"][0]["args"] == {"to": "team@example.com"}
    assert item.title == "hitl: Send the weekly report"
    with pytest.raises(Exception, match="requested"):
        decide(item_public_id=item.public_id, reviewer=bob, decision="approve")  # four eyes
    outcome = decide(item_public_id=item.public_id, reviewer=alice, decisions=edit_to("alice"))
    assert outcome.won
    item.refresh_from_db()
    assert item.apply_state == ApplyState.IDLE
    interrupt_ids = ask_interrupts(graph_input=item.graph_input)
    assert item.applied_result["remote"] == {
        "thread_id": thread_id,
        "interrupt_ids": interrupt_ids,
        "thread_status": "idle",
        "resumed": interrupt_ids,
    }
    assert remote_outcome(url, thread_id) == {"decisions": edit_to("alice")}
    assert resumes_of(url, thread_id) == (1, 1)


@pytest.mark.django_db
def test_parallel_interrupts_found_by_webhook_and_sweep_are_one_item_resumed_once_with_both_answers(
    langgraph_server,
    alice,
    sweep,
    django_capture_on_commit_callbacks,
):
    url = langgraph_server.url
    agents = register(url)
    thread_id = agent_run(url, agents.fanout)
    [found] = deployment_thread_discover(deployment_id=agents.deployment.pk, thread_id=thread_id)
    sweep()
    [item] = items_of(thread_id)  # the webhook's and the sweep's: one item
    assert found.item == item and re.fullmatch(r"fanout: Publish the (news|sports) post\? \(and 1 more\)", item.title)
    asks = {a.payload["action_requests"][0]["args"]["question"]: a for a in item.asks.all()}
    assert sorted(asks) == ["Publish the news post?", "Publish the sports post?"]
    assert item.external_id == interrupts_key(thread_id=thread_id, interrupt_ids=ask_interrupts(graph_input=item.graph_input))
    with django_capture_on_commit_callbacks(execute=False):  # both decided before the worker applies
        item_decide(
            item_public_id=item.public_id, reviewer=alice, ask=asks["Publish the news post?"].interrupt_id, decision="approve"
        )
        item_decide(
            item_public_id=item.public_id, reviewer=alice, ask=asks["Publish the sports post?"].interrupt_id, decision="reject"
        )
    # The agent's next question: this item's round 2.
    assert item_apply(item_id=item.pk) == [ApplyResult(ApplyOutcome.RECORDED, resumed=2, state=AppliedState.ASKED_AGAIN)]
    item.refresh_from_db()
    assert item.applied_result["remote"]["resumed"] == sorted(ask_interrupts(graph_input=item.graph_input))
    state = sdk(url).threads.get_state(thread_id)
    assert sorted((k, v["type"]) for d in state["values"]["answers"] for k, v in d.items()) == [
        ("news", "approve"),
        ("sports", "reject"),
    ]
    assert len(sdk(url).runs.list(thread_id)) == 2  # the agent's run and one resume with both answers


def _question(ask: ReviewAsk) -> str:
    return ask.payload["action_requests"][0]["args"]["question"]


def _runs(url: str, thread_id: str) -> int:
    """The thread's runs on the server: the agent's first, then one per resume that took effect."""
    return len(sdk(url).runs.list(thread_id))


@pytest.mark.django_db
def test_a_partial_decision_resumes_one_interrupt_and_the_later_round_is_round_2_of_the_same_item(
    langgraph_server,
    alice,
    decide,
    sweep,
    client,
):
    url = langgraph_server.url
    agents = register(url)
    thread_id = agent_run(url, agents.fanout)
    sweep()
    [item] = items_of(thread_id)
    news, sports = sorted(item.asks.all(), key=_question)
    decide(item_public_id=item.public_id, reviewer=alice, ask=news.interrupt_id, decision="approve")
    item.refresh_from_db()
    assert item.status == ItemStatus.PENDING and item.applied_result["remote"]["asks_next"] == 1  # sports still waits
    sweep()
    assert items_of(thread_id) == [item]  # the interrupt still waited on is this item's: nothing new, nothing withdrawn
    made_during = []
    with fault_inject("after_remote_resume", lambda key: made_during.append(deployments_sweep())):
        decide(item_public_id=item.public_id, reviewer=alice, ask=sports.interrupt_id, decision="reject")
    assert made_during == [0]  # a sweep between the resume there and the round here leaves the round to the item
    assert _runs(url, thread_id) == 3  # one resume per decision, each with its own answer
    assert deployments_sweep() == 0 and items_of(thread_id) == [item]
    item.refresh_from_db()
    asks = sorted(item.asks.all(), key=lambda a: (a.round, _question(a)))
    assert [(a.round, _question(a), a.status) for a in asks] == [
        (1, "Publish the news post?", "decided"),
        (1, "Publish the sports post?", "decided"),
        (2, "Send the newsletter now?", "pending"),
    ]
    assert item.status == ItemStatus.PENDING and item.applied_result["state"] == "asked again"
    [confirm] = remote_thread_read(connection=deployment_connection(agents.deployment), thread_id=thread_id).interrupts
    assert item.applied_result["remote"]["round"] == [confirm.interrupt_id]
    assert item.applied_result["remote"]["interrupt_ids"][2:] == [confirm.interrupt_id]
    decide(item_public_id=item.public_id, reviewer=alice, ask=asks[2].interrupt_id, decision="approve")
    assert _runs(url, thread_id) == 4  # round 2's decision: one more resume
    state = sdk(url).threads.get_state(thread_id)
    assert state["next"] == [] and state["values"]["final"]["type"] == "approve"
    assert sorted(a for d in state["values"]["answers"] for a in d) == ["news", "sports"]
    item.refresh_from_db()
    assert (item.status, item.applied_result["state"]) == (ItemStatus.APPROVED, "finished")
    assert item.applied_result["remote"]["resumed"] == [confirm.interrupt_id]
    assert deployments_sweep() == 0 and items_of(thread_id) == [item]
    assert _runs(url, thread_id) == 4
    client.force_login(alice)
    assert f"<code>{asks[2].interrupt_id}</code> (round 2)" in client.get(f"/items/{item.public_id}/history").content.decode()


@pytest.mark.django_db
def test_negative_control_discovery_not_holding_off_during_the_apply_makes_the_later_round_a_second_item(
    langgraph_server,
    alice,
    monkeypatch,
):
    """What the sweep during the apply above would do if discovery did not leave a thread with a decision
    not yet applied to that apply: the round becomes an item of its own."""
    url = langgraph_server.url
    agents = register(url)
    thread_id = agent_run(url, agents.fanout)
    deployments_sweep()
    [item] = items_of(thread_id)
    monkeypatch.setattr(deployments, "_apply_owed", lambda **kwargs: False)
    for ask in item.asks.all():  # the apply is not run on commit here: the test runs it
        item_decide(item_public_id=item.public_id, reviewer=alice, ask=ask.interrupt_id, decision="approve")
    with fault_inject("after_remote_resume", lambda key: deployments_sweep()):
        item_apply(item_id=item.pk)
    item.refresh_from_db()
    [_, second] = items_of(thread_id)
    assert second.title == "fanout: Send the newsletter now?" and item.applied_result["state"] == "finished"


class WorkerKilled(BaseException):
    """Stands for a worker killed at a fault point: not an error the apply records, it just stops."""


@pytest.mark.django_db
@pytest.mark.parametrize("point", ["after_remote_resume", "before_record"])
def test_a_worker_killed_between_the_resume_and_the_round_leaves_it_to_the_retry_once(
    langgraph_server,
    alice,
    point,
    django_capture_on_commit_callbacks,
):
    url = langgraph_server.url
    agents = register(url)
    thread_id = agent_run(url, agents.fanout)
    deployments_sweep()
    [item] = items_of(thread_id)
    with django_capture_on_commit_callbacks(execute=False):  # the worker applies both at once, and is killed
        for ask in item.asks.all():
            item_decide(item_public_id=item.public_id, reviewer=alice, ask=ask.interrupt_id, decision="approve")

    def killed(key):
        raise WorkerKilled(point)

    with fault_inject(point, killed), pytest.raises(WorkerKilled):
        item_apply(item_id=item.pk)
    assert _runs(url, thread_id) == 2  # resumed there; nothing recorded here
    assert deployments_sweep() == 0 and items_of(thread_id) == [item]  # the round is left to the apply run again
    # What applies_sweep queues.
    assert item_apply(item_id=item.pk) == [ApplyResult(ApplyOutcome.RECORDED, resumed=0, state=AppliedState.ASKED_AGAIN)]
    assert item_apply(item_id=item.pk) == [ApplyResult(ApplyOutcome.NOTHING_TO_APPLY)]
    assert _runs(url, thread_id) == 2  # not resumed again
    assert [(a.round, a.status) for a in item.asks.all()] == [(1, "decided"), (1, "decided"), (2, "pending")]
    assert deployments_sweep() == 0 and items_of(thread_id) == [item]


@pytest.mark.django_db
def test_an_interrupt_resumed_elsewhere_leaves_the_queue_and_the_deciding_moderator_is_told(
    langgraph_server, alice, decide, sweep
):
    url = langgraph_server.url
    agents = register(url)
    deployment = agents.deployment
    thread_id, deleted = agent_run(url, agents.hitl), agent_run(url, agents.hitl)
    sweep()
    [item] = items_of(thread_id)
    [interrupt_id] = ask_interrupts(graph_input=item.graph_input)
    sdk(url).threads.delete(deleted)
    sdk(url).runs.wait(thread_id, agents.hitl, command={"resume": {interrupt_id: {"decisions": [{"type": "approve"}]}}})
    with item_page(item) as told_live:
        sweep()
    assert (told_live["status"], told_live["winner"]) == ("withdrawn", deployment.client.user.username)
    item.refresh_from_db()
    assert (item.status, item.decided_by, item.decision_note) == (ItemStatus.WITHDRAWN, deployment.client.user, RESOLVED_OUTSIDE)
    assert item.applied_result["remote"]["resolved"] == RESOLVED_OUTSIDE
    assert [i.status for i in items_of(deleted)] == [ItemStatus.WITHDRAWN]  # a deleted thread waits on nothing
    told = decide(item_public_id=item.public_id, reviewer=alice, decision="approve")
    assert not told.won and told.winner == deployment.client.user.username
    assert told.message().startswith(f"Already withdrawn by {deployment.client.user.username}")
    assert resumes_of(url, thread_id) == (1, 1)  # only Studio's


@pytest.mark.django_db
def test_an_unreachable_deployment_mid_apply_keeps_the_decision_and_applies_it_once_when_back(
    langgraph_server,
    alice,
    decide,
    sweep,
    client,
):
    gate = PortGate(langgraph_server.url)
    agents = register(gate.url, server_url=langgraph_server.url)
    thread_id = agent_run(langgraph_server.url, agents.hitl)
    sweep()
    [item] = items_of(thread_id)
    gate.close()
    try:
        assert decide(item_public_id=item.public_id, reviewer=alice, decisions=edit_to("alice")).won
        item.refresh_from_db()
        assert (item.status, item.apply_state) == (ItemStatus.EDITED, ApplyState.APPLYING)
        assert item.applied_result["state"] == "applying" and "cannot reach" in item.applied_result["error"]
        [retry] = DBTaskResult.objects.filter(task_path=item_apply_task.module_path, args_kwargs__args__0=item.pk)
        assert retry.status == TaskResultStatus.READY and retry.run_after > retry.enqueued_at  # after a backoff
        assert [r.outcome for r in item_apply(item_id=item.pk)] == [ApplyOutcome.RETRYING]  # the queued retry, still down
        item.refresh_from_db()
        assert item.applied_result["tries"] == 2
        client.force_login(alice)
        page = client.get(f"/items/{item.public_id}/").content.decode()
        assert "applying…" in page and "could not take it yet (try 2)" in page
    finally:
        gate.open()
    [applied] = item_apply(item_id=item.pk)
    assert (applied.outcome, applied.resumed) == (ApplyOutcome.RECORDED, 1)
    assert item_apply(item_id=item.pk) == [ApplyResult(ApplyOutcome.NOTHING_TO_APPLY)]
    item.refresh_from_db()
    assert item.apply_state == ApplyState.IDLE and item.applied_result["remote"]["resumed"]
    assert remote_outcome(langgraph_server.url, thread_id) == {"decisions": edit_to("alice")}
    assert resumes_of(langgraph_server.url, thread_id) == (1, 1)
    page = client.get(f"/items/{item.public_id}/").content.decode()
    assert "The agent's thread is <strong>idle</strong>, resumed with this decision." in page


@pytest.mark.django_db(transaction=True)  # a worker process of its own reads what the test wrote
def test_a_real_workers_sweep_queues_an_interrupted_thread_without_a_webhook_and_applies_its_decision(
    langgraph_server,
    alice,
    tmp_path,
    settings,
):
    url = langgraph_server.url
    agents = register(url)
    thread_id = agent_run(url, agents.hitl)  # no webhook: only the sweep can find it
    assert items_of(thread_id) == []
    settings.REVIEWQUEUE_APPLY_INLINE = False  # the worker applies, as in production
    log = tmp_path / "worker.log"
    with db_worker(log=log, LANGGRAPH_SWEEP_INTERVAL="0.5") as worker:
        found = progress_wait(lambda: len(items_of(thread_id)), done=lambda n: n == 1, stall=60)
        assert found == 1 and worker.poll() is None, log.read_text()[-3000:]
        [item] = items_of(thread_id)
        assert item_decide(item_public_id=item.public_id, reviewer=alice, decisions=edit_to("alice")).won
        applied = progress_wait(
            lambda: QueueItem.objects.get(pk=item.pk).apply_state, done=lambda s: s == ApplyState.IDLE, stall=60
        )
        assert applied == ApplyState.IDLE, log.read_text()[-3000:]
    assert remote_outcome(url, thread_id) == {"decisions": edit_to("alice")}
    assert resumes_of(url, thread_id) == (1, 1)
    assert Deployment.objects.get(pk=agents.deployment.pk).swept_at is not None


def doc_agent_snippet(*, deployment_url: str, webhook_url: str) -> str:
    """The agent's code of "Connect a LangGraph deployment" (step 2), with this test's URLs."""
    code = block_find("integrators/langgraph-deployments.md", "from langgraph_sdk import get_sync_client").code
    code = re.sub(r'^deployment_url = ".*"$', f"deployment_url = {deployment_url!r}", code, flags=re.M)
    return re.sub(r'^webhook_url = ".*$', f"webhook_url = {webhook_url!r}", code, flags=re.M)


@pytest.mark.django_db(transaction=True)
def test_the_runs_webhook_discovers_its_thread_and_a_wrong_secret_is_refused(
    langgraph_server,
    live_server,
    client,
    make_moderator,
):
    url = langgraph_server.url
    bob = make_moderator("bob")
    deployment, secret = deployment_register(name="my-agents", url=url, api_key="", routes=[GraphRoute(graph="hitl")])
    path = deployment_webhook_path(deployment=deployment, secret=secret)
    agent: dict = {}
    exec(doc_agent_snippet(deployment_url=url, webhook_url=live_server.url + path), agent)  # the docs' agent code
    thread_id = agent["thread"]["thread_id"]
    found = progress_wait(lambda: len(items_of(thread_id)), done=lambda n: n == 1, stall=60)  # LangGraph Server calls it
    assert found == 1 and items_of(thread_id)[0].requested_by == bob
    other = agent_run(url, "hitl")
    wrong = path.replace("token=", "token=x")
    answer = client.post(wrong, {"thread_id": other}, content_type="application/json")
    assert answer.status_code == 404 and answer.json()["error"] == "not_found"
    assert client.post(path, "{", content_type="application/json").json()["error"] == "invalid_json"
    assert items_of(other) == []
    answer = client.post(path, {"thread_id": other}, content_type="application/json")
    assert answer.status_code == 202 and answer.json() == {"thread_id": other}
    assert len(items_of(other)) == 1  # discovered once the request's writes committed (no worker: inline)


@pytest.mark.django_db
def test_the_admin_registers_a_deployment_checked_with_it_and_never_shows_its_key(langgraph_server, admin_client):
    form = {
        "name": "support-agents",
        "url": f"http://127.0.0.1:{free_port()}",
        "api_key": "lsv2-secret-key",
        "routes": "hitl\nfanout",
        "policy": "",
    }
    refused = admin_client.post("/admin/moderation/deployment/add/", form)
    assert refused.status_code == 200 and "cannot reach the deployment" in refused.content.decode()
    assert not Deployment.objects.exists()
    added = admin_client.post("/admin/moderation/deployment/add/", {**form, "url": langgraph_server.url}, follow=True)
    deployment = Deployment.objects.get(name="support-agents")
    assert "/api/v1/deployments/support-agents/webhook?token=" in added.content.decode()
    assert deployment.api_key == "lsv2-secret-key" and set(deployment.graphs) == {"hitl", "fanout"}
    page = admin_client.get(f"/admin/moderation/deployment/{deployment.pk}/change/").content.decode()
    assert "lsv2-secret-key" not in page and "support-agents" in page


@pytest.mark.django_db
def test_the_commands_connect_and_list_a_deployment_without_showing_its_key(langgraph_server, monkeypatch):
    monkeypatch.setenv("AGENTS_KEY", "lsv2-command-key")
    with pytest.raises(CommandError, match="cannot reach the deployment"):
        call_command("deployment_add", "cmd-agents", "--url", f"http://127.0.0.1:{free_port()}", "--graph", "hitl")
    assert not Deployment.objects.exists()
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "deployment_add",
        "cmd-agents",
        "--url",
        langgraph_server.url,
        "--api-key-env",
        "AGENTS_KEY",
        "--graph",
        "hitl",
        "--graph",
        "fanout",
        "--base-url",
        "https://rq.example.com",
        stdout=out,
        stderr=err,
    )
    assert out.getvalue().startswith("https://rq.example.com/api/v1/deployments/cmd-agents/webhook?token=")
    assert Deployment.objects.get(name="cmd-agents").api_key == "lsv2-command-key"
    listed = io.StringIO()
    call_command("deployment_list", stdout=listed)
    assert listed.getvalue().startswith(f"cmd-agents\t{langgraph_server.url}\tactive\tkey set\tgraphs: hitl→any team, fanout")
    assert "lsv2-command-key" not in listed.getvalue() + err.getvalue()


@pytest.mark.django_db
def test_rotating_a_webhook_secret_refuses_the_old_url_and_prints_the_new_one_once(client, monkeypatch):
    """The run's webhook URL is in LangGraph Server's own logs: a leaked one is replaced, not lived with."""
    monkeypatch.setattr(
        deployments, "remote_graphs_resolve", lambda *, connection, names: {name: {"graph_id": name} for name in names}
    )
    deployment, old = deployment_register(
        name="rot-agents", url="http://127.0.0.1:9", api_key="", routes=[GraphRoute(graph="hitl")]
    )
    out, err = io.StringIO(), io.StringIO()
    call_command("deployment_webhook_rotate", "rot-agents", "--base-url", "https://rq.example.org/", stdout=out, stderr=err)
    url = out.getvalue().strip()
    assert re.fullmatch(r"https://rq\.example\.org/api/v1/deployments/rot-agents/webhook\?token=[\w-]{43}", url), url
    new = url.partition("token=")[2]
    assert "shown only now" in err.getvalue() and new not in err.getvalue()
    assert deployments.deployment_verify(name="rot-agents", token=old) is None
    assert deployments.deployment_verify(name="rot-agents", token=new) == deployment
    answer = client.post(
        deployment_webhook_path(deployment=deployment, secret=old), {"thread_id": "t"}, content_type="application/json"
    )
    assert answer.status_code == 404 and answer.json()["error"] == "not_found"
    with pytest.raises(CommandError, match="no deployment 'nope'"):
        call_command("deployment_webhook_rotate", "nope", stdout=io.StringIO(), stderr=io.StringIO())


@pytest.mark.django_db
@pytest.mark.parametrize("discover_priority", [deployments.DISCOVER_PRIORITY, 0])
def test_a_backlog_of_discoveries_is_claimed_after_a_decisions_apply_queued_later(discover_priority):
    """A fleet's burst against a slow deployment leaves discoveries queued: a later apply is claimed first, and
    the claim's walk of the queue index starts at it. Control: at the default priority, the backlog comes first."""
    for n in range(5):
        deployments.deployment_discover_task.using(priority=discover_priority).enqueue(1, f"thread-{n}")
    item_apply_task.enqueue(7)
    first = DBTaskResult.objects.ready().first()  # in the order every worker loop claims in
    if discover_priority == deployments.DISCOVER_PRIORITY:
        assert first is not None and first.task_path == item_apply_task.module_path
    else:
        assert first is not None and first.task_path == deployments.deployment_discover_task.module_path


@pytest.mark.django_db
def test_with_a_worker_the_webhook_only_queues_its_thread_once_and_the_task_discovers_it(langgraph_server, client, settings):
    settings.REVIEWQUEUE_APPLY_INLINE = False  # a worker runs: the webhook calls nothing outside
    agents = register(langgraph_server.url)
    thread_id = agent_run(langgraph_server.url, agents.hitl)
    path = deployment_webhook_path(deployment=agents.deployment, secret=agents.secret)
    for _ in range(2):  # LangGraph Server retries, or two runs of the thread end
        answer = client.post(path, {"thread_id": thread_id}, content_type="application/json")
        assert answer.status_code == 202 and answer.json() == {"thread_id": thread_id}
    assert items_of(thread_id) == []
    [queued] = DBTaskResult.objects.filter(task_path=deployments.deployment_discover_task.module_path)
    assert queued.status == TaskResultStatus.READY and queued.args_kwargs["args"] == [agents.deployment.pk, thread_id]
    assert deployments.deployment_discover_task.call(*queued.args_kwargs["args"]) == 1  # what the worker runs
    assert len(items_of(thread_id)) == 1


@pytest.mark.postgres_variant
@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the index is PostgreSQL's")
@pytest.mark.parametrize("indexed", [True, False], ids=["indexed", "control-dropped"])
def test_a_webhooks_check_for_its_queued_discovery_reads_the_index_not_the_backlog(indexed):
    """The statement ``_discovery_queued`` runs, planned behind a backlog of 2,000 queued discoveries (a stopped
    worker's): by the index of queued discoveries (migration 0034), not a walk of the backlog (before it, 0.4 ms
    with none queued, 13 ms behind 50,000). Control: with the index dropped, the plan cannot name it."""
    path = deployments.deployment_discover_task.module_path
    DBTaskResult.objects.bulk_create(
        DBTaskResult(
            task_path=path,
            queue_name=deployments.DISCOVER_QUEUE,
            backend_name="default",
            priority=deployments.DISCOVER_PRIORITY,
            status=TaskResultStatus.READY,
            args_kwargs={"args": [1, f"thread-{n}"], "kwargs": {}},
            run_after=get_date_max(),
        )
        for n in range(2000)
    )
    with CaptureQueriesContext(connection) as ran:
        assert deployments._discovery_queued(deployment_id=1, thread_id="thread-3")
        assert not deployments._discovery_queued(deployment_id=1, thread_id="thread-x")
    with connection.cursor() as cursor:
        if not indexed:
            cursor.execute("SET LOCAL lock_timeout = '30s'")  # an error, never a hang, if another session held the table
            cursor.execute(f"DROP INDEX {deployments.DISCOVERY_QUEUED_INDEX}")  # rolled back with the test
        cursor.execute(f"ANALYZE {DBTaskResult._meta.db_table}")
        cursor.execute("EXPLAIN " + ran.captured_queries[0]["sql"])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert (deployments.DISCOVERY_QUEUED_INDEX in plan) is indexed, plan
