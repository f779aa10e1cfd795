"""Blocking mode, for scripts and notebooks: one call runs the agent to its end, humans deciding in reviewqueue on the way.

``BlockingAgent(agent, client, timeout=300)`` wraps an agent built as usual
(``create_agent`` with ``HumanInTheLoopMiddleware`` and a checkpointer, an ``InMemorySaver``
will do). ``invoke`` runs it; each time it pauses at an interrupt, the ask is submitted
(``interrupts_forward``) and its decision awaited by long-poll, then the thread resumed
with it (``item_resume``: the same check-then-resume under the per-thread lock as the
durable mode, and the same outcome report), until the agent finishes.

Its timeout is the ask's deadline: each ask is submitted with the policy
``{"deadline_seconds": timeout, "on_deadline": on_timeout}``, so when nobody decided in
time the server decides with that default outcome (its workers' deadline sweep) and the
agent carries on with it, like every other decision, recorded in the item's history. Only
if the server has not decided ``grace`` seconds after the deadline (no worker running)
does ``invoke`` give up, raising ``DecisionTimeout``.
"""

from __future__ import annotations

import math
from typing import Any

from reviewqueue_client.client import ReviewQueue
from reviewqueue_client.langgraph import interrupts_forward, item_resume


class DecisionTimeout(TimeoutError):
    """No decision, not even the deadline's, ``grace`` seconds after an ask's deadline."""

    def __init__(self, item_id: str, waited: float) -> None:
        super().__init__(
            f"item {item_id}: no decision after {waited:.0f} s (is a reviewqueue worker running its deadline sweep?)"
        )
        self.item_id = item_id


class BlockingAgent:
    """An agent whose ``invoke`` waits for reviewqueue's decisions instead of returning at an interrupt.

    ``on_timeout``: ``"reject"`` (the default: the tool does not run) or ``"approve"`` (a weaker
    policy than a moderator's decision: only for a ``team`` that allows weaker policies; the
    server refuses it otherwise, a ``ReviewQueueError`` with code ``invalid``).
    ``fields``: any other field of ``POST /items`` (``team``, ``requested_by``, ``priority``, a
    ``policy`` whose other keys are kept).
    """

    def __init__(
        self,
        agent: Any,
        client: ReviewQueue,
        *,
        timeout: float,
        on_timeout: str = "reject",
        source: str = "agent",
        grace: float = 60.0,
        **fields: Any,
    ) -> None:
        policy = {**fields.pop("policy", {}), "deadline_seconds": max(1, math.ceil(timeout)), "on_deadline": on_timeout}
        self.agent = agent
        self.client = client
        self.wait_for = policy["deadline_seconds"] + grace
        self.source = source
        self.fields = {**fields, "policy": policy}

    def invoke(self, input: Any, config: dict[str, Any]) -> Any:
        """Run the agent on ``input`` in ``config``'s thread to its end; its final state's values."""
        thread_id = config["configurable"]["thread_id"]
        self.agent.invoke(input, config)
        answered: set[str] = set()
        while items := interrupts_forward(self.client, self.agent, thread_id=thread_id, source=self.source, **self.fields):
            for item in items:
                decided = self.client.wait(item.id, timeout=self.wait_for)
                if decided is None:
                    raise DecisionTimeout(item.id, self.wait_for)
                if decided.id in answered or decided.resume is None:
                    raise RuntimeError(f"item {decided.id} ended {decided.status} without an answer the agent can resume with")
                answered.add(decided.id)
                item_resume(self.agent, decided, client=self.client)
        return self.agent.get_state(config).values
