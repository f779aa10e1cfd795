"""An async agent service (``e2e/async_agent.py``: ``ainvoke``, an async webhook route, ``AsyncReviewQueue``
and ``reviewqueue_client.aio_langgraph``), in its own processes, against one real server and its worker.

Two replicas share one ``AsyncSqliteSaver`` file. A moderator edits the agent's call
(``grace_days`` 30 → 14); the worker delivers the decision to both; one replica (``--hold``)
has received it and is killed (SIGKILL) before acting on it, while the other resumes and
the same signed body is replayed to it at once, twice, as a retry would send it; the killed
replica restarts, reconciles and is sent the body again. Resumes start 2 s after the check
that allowed them and the tool takes 2 s (a wide window for a second resume, in both arms).
The tool runs once, with the moderator's edit; the naive control (no per-thread lock) runs
it more than once.
"""

from __future__ import annotations

import pytest

from e2e.agent_site import (  # noqa: F401 - site and hooks are fixtures
    EDITED,
    REPLAYS,
    VARIANTS,
    agent_start,
    delivery_captured,
    edit_recorded,
    hooks,
    item_of,
    replays_at_once,
    site,
)
from e2e.agents import agent_effects
from e2e.server import free_port
from moderation.lab.history import HistoryRecorder
from moderation.lab.waits import progress_wait

pytestmark = [pytest.mark.either_pass, pytest.mark.timeout(600)]


@VARIANTS
def test_async_replicas_duplicate_deliveries_and_a_kill_run_the_tool_once_with_the_edit(site, hooks, tmp_path, naive):
    thread, ports = f"async-{naive}", [free_port(), free_port()]
    for n, port in enumerate(ports):
        hooks(f"async-{n}-{naive}", port)
    doomed = agent_start(site, tmp_path, ports[0], thread=thread, naive=naive, flags=("--hold",), script="async_agent.py")
    survivor = restarted = None
    try:
        assert doomed.ready() == []  # ran the agent, forwarded its ask
        survivor = agent_start(site, tmp_path, ports[1], thread=thread, naive=naive, script="async_agent.py")
        assert survivor.ready() == []  # forwarded again: the same item
        item = item_of(site, thread)
        answer = edit_recorded(site, HistoryRecorder(), item)
        assert answer.status_code == 200 and answer.json()["outcome"] == "won", answer.text
        delivery = delivery_captured(site, item)
        replays = replays_at_once(delivery, [ports[1]] * REPLAYS)  # while the worker's own delivery resumes it
        doomed.said("received")  # verified, not acted on
        doomed.kill()
        restarted = agent_start(site, tmp_path, ports[0], thread=thread, naive=naive, script="async_agent.py")
        restarted.said("serving")
        replays += replays_at_once(delivery, [ports[0]])  # a redelivery racing its reconcile
        reconciled = restarted.ready()
        for replay in replays:
            replay.join()
        resumed = survivor.resumes(at_least=REPLAYS + 1) + restarted.resumes(at_least=1)
        effects = progress_wait(lambda: agent_effects(tmp_path), done=lambda e: len(e) > (1 if naive else 0), stall=60)
    finally:
        for agent in (doomed, survivor, restarted):
            if agent is not None:
                agent.stop()
    if naive:
        assert len(effects) > 1 and all(e == EDITED for e in effects), effects
    else:
        assert effects == [EDITED]  # once, with the moderator's edit
        assert (reconciled + resumed).count(True) == 1, (reconciled, resumed)
