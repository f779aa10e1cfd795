"""Remote asks against one real server and its task worker (which sends the webhooks and
sweeps deadlines): the agent's races, the server's race, blocking mode, the docs' example.

The agent's races: its tool runs once per decision, whatever races to resume it. Agents are
``e2e/remote_agent.py`` processes (``e2e.agents``) whose resumes start 2 s after the check
that allowed them and whose tool takes 2 s (``--slow-resume``, ``--tool-seconds``: a wide
window for a second resume, in both arms). LangGraph itself makes a resume that starts
after another's run was saved a no-op; the per-thread lock is what covers the window. A
moderator approves over HTTP; then, racing to resume the agent:

1. duplicate deliveries of the decision (the worker's, plus the same signed body replayed
   at once, as a retry would send it) and the agent's own long-poll;
2. two replicas (two processes on one SQLite checkpointer), each sent the event by the
   worker and the replayed body;
3. the agent killed (SIGKILL) after receiving the decision and before resuming; on restart
   it reconciles its asks while the decision is delivered again.

Each run is judged by the history checker: the moderator's decision is the op, the
server's final read (``history_final_read`` through dbtool) plus the tool's runs
(``FinalItem.agent_resumes``) the final state. The negative controls run the same races
with ``--naive`` agents (check-then-resume without the per-thread lock), and the checker
must then report ``double_resume``.

The server's race: two moderators, the agent's API cancel and the deadline on one ask, over
HTTP, judged by the same checker (its negative control runs in-process, with the race
lab's naive strategy: moderation/tests/review/test_remote_ask_races.py).

Blocking mode (``reviewqueue_client.blocking``): the run waits for a moderator's decision,
and its timeout is the ask's deadline, decided by the worker's sweep. And the blocking
example of docs/integrators/agent-guarantees.md, run as written.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from e2e.agent_site import (  # noqa: F401 - site and hooks are fixtures
    REPLAYS,
    SECRET,
    VARIANTS,
    Site,
    agent_start,
    approve,
    approved_and_replayed,
    delivery_captured,
    hooks,
    item_of,
    items_of,
    judge,
    replays_at_once,
    site,
    verdict_assert,
)
from e2e.agents import agent_effects
from e2e.remote_agent import agent_build
from e2e.server import ROOT, free_port
from moderation.lab.history import FinalItem, HistoryRecorder, history_check
from moderation.lab.waits import progress_wait
from moderation.tests.docs_examples import block_find
from moderation.tests.races import race_rounds
from reviewqueue_client import ReviewQueue, ReviewQueueError
from reviewqueue_client.blocking import BlockingAgent
from reviewqueue_client.langgraph import WebhookResumer, interrupts_forward

pytestmark = [pytest.mark.either_pass, pytest.mark.timeout(600)]


@VARIANTS
def test_duplicate_deliveries_and_a_long_poll_racing_the_webhook_run_the_tool_once(site, hooks, tmp_path, naive):
    thread, port = f"dup-{naive}", free_port()
    hooks(f"dup-{naive}", port)
    agent = agent_start(site, tmp_path, port, thread=thread, naive=naive, flags=("--poll",))
    try:
        assert agent.ready() == []
        item, history = approved_and_replayed(site, thread, [port] * REPLAYS)
        resumed = agent.resumes(at_least=REPLAYS + 2)  # the replays, the worker's delivery, the long-poll
        kinds = judge(site, history, item, tmp_path)
    finally:
        agent.stop()
    verdict_assert(kinds, naive=naive, workdir=tmp_path)
    if not naive:
        assert resumed.count(True) == 1


@VARIANTS
def test_two_replicas_sent_the_same_decision_resume_once(site, hooks, tmp_path, naive):
    thread, ports = f"replicas-{naive}", [free_port(), free_port()]
    for n, port in enumerate(ports):
        hooks(f"replica-{n}-{naive}", port)
    first = agent_start(site, tmp_path, ports[0], thread=thread, naive=naive)
    replicas = [first]
    try:
        assert first.ready() == []
        replicas.append(agent_start(site, tmp_path, ports[1], thread=thread, naive=naive))  # same checkpointer
        assert replicas[1].ready() == []  # forwarded again: the same item
        item, history = approved_and_replayed(site, thread, ports * REPLAYS)
        resumed = [r for replica in replicas for r in replica.resumes(at_least=REPLAYS + 1)]
        kinds = judge(site, history, item, tmp_path)
    finally:
        for replica in replicas:
            replica.stop()
    verdict_assert(kinds, naive=naive, workdir=tmp_path)
    if not naive:
        assert resumed.count(True) == 1


@VARIANTS
def test_an_agent_killed_between_receiving_a_decision_and_resuming_reconciles_once_on_restart(site, hooks, tmp_path, naive):
    thread, port = f"crash-{naive}", free_port()
    hooks(f"crash-{naive}", port)
    agent = agent_start(site, tmp_path, port, thread=thread, naive=naive, flags=("--hold",))
    try:
        assert agent.ready() == []
        item = item_of(site, thread)
        history = HistoryRecorder()
        approve(site, history, item)
        agent.said("received")  # verified, not acted on
    finally:
        agent.kill()
    delivery = delivery_captured(site, item)
    assert agent_effects(tmp_path) == []
    restarted = agent_start(site, tmp_path, port, thread=thread, naive=naive)
    try:
        restarted.said("serving")
        [replay] = replays_at_once(delivery, [port])  # a redelivery racing the reconcile
        reconciled = restarted.ready()
        replay.join()
        kinds = judge(site, history, item, tmp_path)
        # The one resume may be the worker's own redelivery (its first try met the killed agent), which
        # says so when its tool has run: after the reconcile and the replay may have said theirs (false).
        resumed = progress_wait(lambda: restarted.resumes(at_least=1), done=lambda r: naive or True in reconciled + r, stall=60)
    finally:
        restarted.stop()
    verdict_assert(kinds, naive=naive, workdir=tmp_path)
    if not naive:
        assert (reconciled + resumed).count(True) == 1


# --- the server side: four competitors on one remote ask --------------------------------------

RACE_ROUNDS = 6


def _cancel_recorded(history: HistoryRecorder, client: ReviewQueue, account: str, item: str) -> None:
    """The agent's cancel as an op: 200 it won, 409 ``already_decided`` naming who did."""
    op = history.invoke(reviewer=account, item=item, decision="withdraw")
    try:
        client.cancel(item, reason="the customer changed their mind")
    except ReviewQueueError as refused:
        if refused.code == "already_decided":
            history.complete(op, completion="fail", told_winner=refused.body.get("winner"))
        else:
            history.complete(op, completion="unknown", error=str(refused))
        return
    except httpx.HTTPError as exc:
        history.complete(op, completion="unknown", error=repr(exc))
        return
    history.complete(op, completion="ok", told_winner=account)


def test_two_moderators_the_agents_cancel_and_the_deadline_race_on_a_remote_ask_over_http(site):
    """alice approves, bob rejects, the agent cancels, all released by one barrier at about the ask's
    deadline, while the worker's sweep fires it: one winner per ask (the in-process race with its
    negative control: moderation/tests/review/test_remote_ask_races.py)."""
    history, items = HistoryRecorder(), []
    with ReviewQueue(site.server.url, site.token) as client:

        def before(n: int) -> None:  # a fresh ask due in a second; release the racers about then
            item = client.submit(
                title=f"race {n}",
                body="An agent asks.",
                source="support-agent",
                ask={"ship": n},
                external={"thread_id": f"race-{n}", "interrupt_id": "i-1"},
                policy={"deadline_seconds": 1, "on_deadline": "reject"},
            )
            items.append(item.id)
            due = datetime.fromisoformat(item.raw["deadline_at"]).timestamp()
            time.sleep(max(0.0, due - time.time() + random.uniform(-0.3, 0.2)))

        race_rounds(
            RACE_ROUNDS,
            lambda n: site.alice.decide_recorded(history, items[n], "approve"),
            lambda n: site.bob.decide_recorded(history, items[n], "reject"),
            lambda n: _cancel_recorded(history, client, "api.agents", items[n]),
            before=before,
        )
    progress_wait(
        lambda: [s["apply_state"] for s in site.server.tool("state", *items).values()],
        done=lambda states: "applying" not in states,
        stall=60,
    )
    state = site.server.tool("state", *items)
    for item in items:  # the sweep's attempts, as the attempts log recorded them
        if "deadline" in state[item]["won_attempts"]:
            history.complete(
                history.invoke(reviewer="deadline", item=item, decision="reject"), completion="ok", told_winner="deadline"
            )
        for lost in (a for a in state[item]["lost_attempts"] if a["reviewer"] == "deadline"):
            history.complete(
                history.invoke(reviewer="deadline", item=item, decision="reject"),
                completion="fail",
                told_winner=lost["told_winner"],
            )
    finals = {i: FinalItem(**{**state[i]["final"], "ineligible": tuple(state[i]["final"]["ineligible"])}) for i in items}
    assert [op for op in history.ops if op.completion == "unknown"] == []
    assert [str(a) for a in history_check(ops=history.ops, final=finals)] == []
    assert all(state[i]["won_attempts"] == [state[i]["winner"]] and finals[i].resumes == 1 for i in items), state
    print("\nremote ask races over HTTP, won by:", Counter(state[i]["winner"] for i in items))


# --- outcomes ------------------------------------------------------------------------------


class FailingOnce:
    """A proxy in front of the server that answers the first outcome report 500 (and forwards it not)."""

    def __init__(self, upstream: str) -> None:
        self.outcome_posts = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.command == "POST" and self.path.endswith("/outcome"):
                    owner.outcome_posts += 1
                    if owner.outcome_posts == 1:
                        return self._answer(500, {"Content-Type": "text/html"}, b"<h1>Server Error (500)</h1>")
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                answer = httpx.request(self.command, upstream + self.path, headers=headers, content=body, timeout=120)
                self._answer(answer.status_code, {"Content-Type": answer.headers.get("Content-Type", "")}, answer.content)

            do_GET = do_POST = _forward

            def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
                self.send_response(status)
                for name, value in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def test_the_webhook_resumers_outcome_report_that_meets_a_500_is_sent_again_and_stored(site, tmp_path):
    agent = agent_build(checkpoints=str(tmp_path / "agent.db"), effects=str(tmp_path / "effects.jsonl"))
    agent.invoke({"messages": [("user", "Please delete customer C-7.")]}, {"configurable": {"thread_id": "outcome-500"}})
    proxy = FailingOnce(site.server.url)
    try:
        with ReviewQueue(proxy.url, site.token) as client:
            [item] = interrupts_forward(client, agent, thread_id="outcome-500", source="support-agent")
            approve(site, HistoryRecorder(), item.id)
            body, headers = delivery_captured(site, item.id)  # the worker's signed item.decided, as it was sent
            resumed = WebhookResumer(agent, client=client, secret=SECRET)(headers, body)
    finally:
        proxy.close()
    assert (resumed.resumed, resumed.reported, proxy.outcome_posts) == (True, True, 2)
    assert agent_effects(tmp_path) == [{"customer_id": "C-7", "grace_days": 30}]
    with ReviewQueue(site.server.url, site.token) as client:
        assert client.read(item.id).outcome == {**client.read(item.id).outcome, "status": "done", "message": "done"}


# --- blocking mode (reviewqueue_client.blocking) -------------------------------------------


def _blocking_run(site: Site, workdir: Path, thread: str, **options) -> tuple[threading.Thread, dict]:
    """``BlockingAgent.invoke`` on a fresh agent, in a thread of its own (it blocks): (thread, its final state once done)."""
    agent = agent_build(checkpoints=str(workdir / "agent.db"), effects=str(workdir / "effects.jsonl"))
    final: dict = {}

    def run() -> None:
        with ReviewQueue(site.server.url, site.token) as client:
            final.update(
                BlockingAgent(agent, client, source="notebook", **options).invoke(
                    {"messages": [("user", "Please delete customer C-7.")]}, {"configurable": {"thread_id": thread}}
                )
            )

    runner = threading.Thread(target=run)
    runner.start()
    return runner, final


def test_blocking_mode_waits_inside_the_run_for_the_moderators_decision(site, tmp_path):
    runner, final = _blocking_run(site, tmp_path, "blocking-approve", timeout=600)
    item = progress_wait(lambda: items_of(site, "blocking-approve"), done=bool, stall=120)[0]
    assert runner.is_alive() and agent_effects(tmp_path) == []  # the run waits on the ask
    history = HistoryRecorder()
    approve(site, history, item.id)
    runner.join()
    assert agent_effects(tmp_path) == [{"customer_id": "C-7", "grace_days": 30}] and final["messages"][-1].content == "done"
    assert item.raw["policy"]["deadline_seconds"] == 600 and item.raw["policy"]["on_deadline"] == "reject"
    assert judge(site, history, item.id, tmp_path) == []
    with ReviewQueue(site.server.url, site.token) as client:  # blocking mode reports what the run did, too
        assert client.read(item.id).outcome["status"] == "done"


def test_blocking_modes_timeout_is_the_asks_deadline_and_the_run_carries_on_with_its_outcome(site, tmp_path):
    runner, final = _blocking_run(site, tmp_path, "blocking-timeout", timeout=1)
    runner.join()  # nobody decides: the worker's deadline sweep does, with the outcome asked for
    [item] = items_of(site, "blocking-timeout")
    assert (item.status, item.raw["decision"]["by"]) == ("rejected", "deadline")
    assert agent_effects(tmp_path) == [] and final["messages"][-1].content == "done"
    assert "no decision before the deadline" in final["messages"][-2].content  # what the agent was told
    # Approving without a moderator weakens the default policy: only a team that allows it may.
    agent = agent_build(checkpoints=str(tmp_path / "approve.db"), effects=str(tmp_path / "approve.jsonl"))
    with ReviewQueue(site.server.url, site.token) as client, pytest.raises(ReviewQueueError) as refused:
        BlockingAgent(agent, client, timeout=1, on_timeout="approve").invoke(
            {"messages": [("user", "Please delete customer C-7.")]}, {"configurable": {"thread_id": "blocking-approve-1"}}
        )
    assert refused.value.code == "invalid" and "policy.on_deadline" in refused.value.message


def test_the_guarantees_pages_blocking_example_runs_as_written(site, tmp_path):
    script = tmp_path / "agent.py"
    script.write_text(
        block_find("integrators/agent-guarantees.md", "import os\n\nfrom langchain.agents import create_agent").code
    )
    env = {
        **os.environ,
        "REVIEWQUEUE_URL": site.server.url,
        "REVIEWQUEUE_TOKEN": site.token,
        "ASK_TIMEOUT": "1",
        "PYTHONPATH": str(ROOT / "reviewqueue-client"),
    }
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no decision before the deadline" in done.stdout  # nobody decided: the deadline's reject reached the agent
