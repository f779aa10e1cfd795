"""A real LangChain agent for the glue's tests: ``create_agent`` + ``HumanInTheLoopMiddleware``,
a scripted model that proposes one ``delete_customer`` call, and a tool that counts its runs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver


class ScriptedModel(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


def agent_build(
    *,
    checkpointer: BaseCheckpointSaver,
    runs: Counter,
    interrupt_mode: str = "batched",
    tool_entered: Callable[[], object] | None = None,
) -> Any:
    """The agent; ``runs[customer_id]`` counts each time the tool really ran; ``interrupt_mode`` as LangChain's
    middleware takes it; ``tool_entered``, if given, is called as the tool starts (a race's gate)."""

    @tool
    def delete_customer(customer_id: str) -> str:
        """Delete a customer."""
        runs[customer_id] += 1
        if tool_entered is not None:
            tool_entered()
        return f"deleted {customer_id}"

    model = ScriptedModel(
        messages=iter(
            [
                AIMessage(content="", tool_calls=[{"name": "delete_customer", "args": {"customer_id": "C-7"}, "id": "call-1"}]),
                AIMessage(content="done"),
            ]
        )
    )
    return create_agent(
        model=model,
        tools=[delete_customer],
        checkpointer=checkpointer,
        middleware=[
            HumanInTheLoopMiddleware(
                interrupt_on={"delete_customer": {"allowed_decisions": ["approve", "edit", "reject"]}},
                interrupt_mode=interrupt_mode,
            )
        ],
    )


def agent_start(agent: Any, *, thread_id: str) -> None:
    agent.invoke({"messages": [HumanMessage(content="delete C-7")]}, {"configurable": {"thread_id": thread_id}})


class InvokeAfter:
    """The agent, each ``ainvoke`` starting once ``before()`` is done, after the check that allowed it.

    A race's window: a sleep widens it for a second resume; a naive control's gate (both replicas past
    the check) makes the second resume certain rather than timed, which a loaded CI machine showed a
    window is not. A locked arm keeps the sleep: a gate there would wait for a replica the lock holds off.
    """

    def __init__(self, agent: Any, before: Callable[[], Awaitable[object]]) -> None:
        self.agent, self.before = agent, before

    def __getattr__(self, name: str) -> Any:
        return getattr(self.agent, name)

    async def ainvoke(self, *args: Any, **kwargs: Any) -> Any:
        await self.before()
        return await self.agent.ainvoke(*args, **kwargs)
