"""The site the agent race tests share (``test_agent_side.py``, ``test_async_agent.py``,
``test_typescript_agent_races.py``): one real server and its task worker, the webhook endpoints
that reach the agents, and the moves and judgements of a race (a decision approved or edited,
its signed delivery replayed at once to several agents, the history checker's verdict)."""

from __future__ import annotations

import base64
import http.client
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from e2e.agents import AgentProcess, agent_effects
from e2e.server import LiveServer
from moderation.lab.history import FinalItem, HistoryRecorder, history_check
from moderation.lab.waits import progress_wait
from moderation.tests.real_server import CSRF, Reviewer
from moderation.tests.webhook_receiver import Receiver
from reviewqueue_client import Item, ReviewQueue

SECRET = "whsec_" + base64.b64encode(b"agent-races-agent-races-agent-ra").decode()
# Seconds from the check to the resume, and the tool's time: a second resume checked within
# the first and started before the first's run is saved runs the tool again, unless locked out.
SLOW_RESUME, TOOL_SECONDS = "2", "2"
REPLAYS = 2  # the decision's signed body sent again, at once, to each agent process
VARIANTS = pytest.mark.parametrize("naive", [False, True], ids=["guarded", "naive-control"])


@dataclass
class Site:
    server: LiveServer
    token: str
    alice: Reviewer
    bob: Reviewer
    capture: Receiver  # receives every decision too: the signed body the tests replay


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[Site]:
    server = LiveServer(
        tmp_path_factory.mktemp("agent-races"),
        extra_env={"REVIEWQUEUE_APPLY_INLINE": "", "DECISION_RATE_LIMIT": "0", "DEADLINE_SWEEP_INTERVAL": "0.2"},
    )
    seeded = server.seed(users=["alice", "bob"])
    token = server.tool("apiclient", "agents")
    capture = Receiver(SECRET).start()
    server.tool("hook", "capture", "--url", capture.url, "--secret", SECRET)
    try:
        server.start()
        server.worker_start(worker_id="agent-races")
        server.worker_wait_ready("agent-races")
        yield Site(server, token, *(Reviewer(server, name, seeded.sessions[name]) for name in ("alice", "bob")), capture)
    finally:
        server.close()
        capture.stop()


@pytest.fixture
def hooks(site) -> Iterator[Callable[[str, int], None]]:
    """``hooks(name, port)``: the worker sends decisions to an agent on ``port``; removed after the test."""
    names = []

    def add(name: str, port: int) -> None:
        site.server.tool("hook", name, "--url", f"http://127.0.0.1:{port}/hooks", "--secret", SECRET)
        names.append(name)

    yield add
    for name in names:
        site.server.tool("hook", name, "--off")


def race_flags(*, naive: bool, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """An agent's command-line flags in these races (Python or Node alike): its resume starts late, its tool
    is slow, and ``naive`` resumes without the per-thread lock."""
    return ("--slow-resume", SLOW_RESUME, "--tool-seconds", TOOL_SECONDS, *extra, *(("--naive",) if naive else ()))


def agent_start(
    site: Site,
    workdir: Path,
    port: int,
    *,
    thread: str,
    naive: bool,
    flags: tuple[str, ...] = (),
    script: str = "remote_agent.py",
) -> AgentProcess:
    """An agent process (``script`` in e2e/) on ``port`` whose resume starts late and whose tool is slow."""
    return AgentProcess(
        server=site.server,
        workdir=workdir,
        port=port,
        token=site.token,
        secret=SECRET,
        thread=thread,
        flags=race_flags(naive=naive, extra=flags),
        script=script,
    )


def items_of(site: Site, thread: str) -> list[Item]:
    with ReviewQueue(site.server.url, site.token) as client:
        return [i for i in client.list(graph="ask") if (i.external or {}).get("thread_id") == thread]


def item_of(site: Site, thread: str) -> str:
    [item] = items_of(site, thread)
    return item.id


def approve(site: Site, history: HistoryRecorder, item: str) -> None:
    site.alice.decide_recorded(history, item, "approve")


def delivery_captured(site: Site, item: str) -> tuple[bytes, dict[str, str]]:
    """The worker's signed ``item.decided`` for ``item``, as it reached the capturing receiver."""

    def found():
        with site.capture._lock:
            return next(
                (raw for got, raw in zip(site.capture.received, site.capture.raw, strict=False) if got.data["id"] == item), None
            )

    raw = progress_wait(found, done=lambda r: r is not None, stall=60, poll=0.05)
    assert raw is not None, f"no item.decided for {item} reached the receiver"
    return raw


def replay(port: int, delivery: tuple[bytes, dict[str, str]]) -> None:
    body, headers = delivery
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", "/hooks", body=body, headers={k: v for k, v in headers.items() if k.lower() != "host"})
        assert conn.getresponse().status == 204
    finally:
        conn.close()


def replays_at_once(delivery: tuple[bytes, dict[str, str]], ports: list[int]) -> list[threading.Thread]:
    barrier = threading.Barrier(len(ports))

    def send(port: int) -> None:
        barrier.wait(timeout=60)
        replay(port, delivery)

    threads = [threading.Thread(target=send, args=(port,)) for port in ports]
    for thread in threads:
        thread.start()
    return threads


def approved_and_replayed(site: Site, thread: str, ports: list[int]) -> tuple[str, HistoryRecorder]:
    """The thread's ask approved (recorded), then its signed delivery replayed to ``ports`` all at once."""
    item = item_of(site, thread)
    history = HistoryRecorder()
    approve(site, history, item)
    for replay in replays_at_once(delivery_captured(site, item), ports):
        replay.join()
    return item, history


def judge(site: Site, history: HistoryRecorder, item: str, workdir: Path) -> list[str]:
    """The history checker's verdict on the server's final state and the agent's tool runs."""
    progress_wait(lambda: site.server.tool("state", item)[item]["apply_state"], done=lambda s: s != "applying", stall=60)
    final = site.server.tool("state", item)[item]["final"]
    finals = {
        item: FinalItem(**{**final, "ineligible": tuple(final["ineligible"]), "agent_resumes": len(agent_effects(workdir))})
    }
    return [a.kind for a in history_check(ops=history.ops, final=finals)]


def verdict_assert(kinds: list[str], *, naive: bool, workdir: Path) -> None:
    if naive:
        assert "double_resume" in kinds and len(agent_effects(workdir)) > 1, kinds
    else:
        assert kinds == [] and agent_effects(workdir) == [{"customer_id": "C-7", "grace_days": 30}]


EDITED = {"customer_id": "C-7", "grace_days": 14}


def edit_recorded(site: Site, history: HistoryRecorder, item: str) -> httpx.Response:
    """alice edits the call's ``grace_days`` to 14 and approves it, as the item page posts it; in ``history``."""
    op = history.invoke(reviewer="alice", item=item, decision="edit")
    decisions = [{"type": "edit", "edited_action": {"name": "delete_customer", "args": EDITED}}]
    answer = httpx.post(
        f"{site.server.url}/api/items/{item}/decision",
        json={"decisions": decisions},
        timeout=60,
        headers={"X-CSRFToken": CSRF, "Cookie": site.alice.cookie},
    )
    history.complete_from_http(op, status=answer.status_code, body=answer.json())
    return answer
