"""A LangChain.js agent service (clients/typescript/test/agent-service.ts, ``@reviewqueue/client``'s glue) in
its own Node processes, against one real server and its worker: the race of e2e/test_async_agent.py.

Two replicas share one PostgresSaver database. A moderator edits the agent's call
(``grace_days`` 30 → 14); the worker delivers the decision to both; one replica (``--hold``)
takes the thread's lock for it and is killed (SIGKILL) mid-resume, holding it, while the other
is sent the same signed body again, twice at once, as a retry would send it; the killed replica
restarts, reconciles and is sent the body again. Resumes start 2 s after the check that allowed
them and the tool takes 2 s (a wide window for a second resume, in both arms). The tool runs
once, with the moderator's edit; the naive control (no per-thread lock) runs it more than once.
Each run is judged by the history checker (the moderator's edit the op, the server's final
read plus the tool's runs the final state), which must report ``double_resume`` for the control.
"""

from __future__ import annotations

import pytest

from e2e.agent_site import (  # noqa: F401 - site and hooks are fixtures
    EDITED,
    REPLAYS,
    SECRET,
    VARIANTS,
    delivery_captured,
    edit_recorded,
    hooks,
    item_of,
    judge,
    race_flags,
    replays_at_once,
    site,
)
from e2e.agents import agent_effects
from e2e.node import node_modules_ready, postgres_database, ts_agent
from e2e.server import free_port
from moderation.lab.history import HistoryRecorder
from moderation.lab.waits import progress_wait

pytestmark = [pytest.mark.either_pass, pytest.mark.timeout(600)]


@VARIANTS
def test_node_replicas_duplicate_deliveries_and_a_kill_mid_resume_run_the_tool_once_with_the_edit(site, hooks, tmp_path, naive):
    node_modules_ready()
    thread, ports = f"ts-{naive}", [free_port(), free_port()]
    for n, port in enumerate(ports):
        hooks(f"ts-{n}-{naive}", port)
    with postgres_database() as postgres_url:

        def agent(port: int, *extra: str):
            return ts_agent(
                server=site.server,
                workdir=tmp_path,
                port=port,
                token=site.token,
                secret=SECRET,
                postgres_url=postgres_url,
                thread=thread,
                flags=race_flags(naive=naive, extra=extra),
            )

        doomed = agent(ports[0], "--hold")
        survivor = restarted = None
        try:
            assert doomed.ready() == []  # ran the agent, forwarded its ask
            survivor = agent(ports[1])
            assert survivor.ready() == []  # forwarded again: the same item
            item = item_of(site, thread)
            history = HistoryRecorder()
            edit_recorded(site, history, item)
            delivery = delivery_captured(site, item)
            replays = replays_at_once(delivery, [ports[1]] * REPLAYS)  # while the worker's own delivery resumes it
            doomed.said("received")  # holds the thread's lock (guarded), about to resume
            doomed.kill()
            restarted = agent(ports[0])
            restarted.said("serving")
            replays += replays_at_once(delivery, [ports[0]])  # a redelivery racing its reconcile
            reconciled = restarted.ready()
            for replay in replays:
                replay.join()
            resumed = survivor.resumes(at_least=REPLAYS + 1) + restarted.resumes(at_least=1)
            effects = progress_wait(lambda: agent_effects(tmp_path), done=lambda e: len(e) > (1 if naive else 0), stall=60)
            kinds = judge(site, history, item, tmp_path)
        finally:
            for process in (doomed, survivor, restarted):
                if process is not None:
                    process.stop()
    if naive:
        assert "double_resume" in kinds and len(effects) > 1 and all(e == EDITED for e in effects), (kinds, effects)
    else:
        assert kinds == [] and effects == [EDITED]  # once, with the moderator's edit
        assert (reconciled + resumed).count(True) == 1, (reconciled, resumed)
