"""The example refund agent: a real ``create_agent`` agent whose side-effecting tools
wait for a human decision (``HumanInTheLoopMiddleware``), registered in
``REVIEWQUEUE_GRAPHS`` as ``refund_agent``.

Its input is the customer's message: ``{"messages": [{"role": "user", "content": ...}]}``,
which the queue puts beside the item's ``item_id``, ``title``, ``body`` and ``source``;
without ``messages`` the item's body is the message. ``create_agent``'s own state drops
keys it does not declare; ``RefundAgentState`` declares the item's, so its thread keeps them.
"""

from __future__ import annotations

from typing import Any, NotRequired

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState, HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver

from examples.refund_agent.model import ScriptedChatModel
from examples.refund_agent.tools import lookup_order, refund_payment, send_email

TOOLS = [lookup_order, refund_payment, send_email]
INTERRUPT_ON = {
    "refund_payment": {"allowed_decisions": ["approve", "edit", "reject"], "description": "Refund this payment?"},
    "send_email": {"allowed_decisions": ["approve", "edit", "reject", "respond"], "description": "Send this email?"},
}


class RefundAgentState(AgentState):
    item_id: NotRequired[str]
    title: NotRequired[str]
    body: NotRequired[str]
    source: NotRequired[str]
    result: NotRequired[dict[str, Any]]


class ReviewWithSchemas(HumanInTheLoopMiddleware):
    """LangChain's middleware, with each tool's argument schema in its review config.

    The middleware leaves ``args_schema`` out (its docstring says so); with it, the queue
    builds the edit form from the schema and refuses an edit that breaks it (a negative
    amount, a missing currency) before anything is locked. ``_create_action_and_config``
    is the middleware's one place where a review config is made;
    ``moderation/tests/test_refund_agent.py`` fails if a LangChain upgrade stops calling it.
    """

    def __init__(self, *, tools: list[Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._schemas = {t.name: t.tool_call_schema.model_json_schema() for t in tools}

    def _create_action_and_config(self, tool_call: Any, config: Any, state: Any, runtime: Any) -> tuple[Any, Any]:
        action, review = super()._create_action_and_config(tool_call, config, state, runtime)
        schema = self._schemas.get(tool_call["name"])
        return action, ({**review, "args_schema": schema} if schema else review)


class QueueItemAdapter(AgentMiddleware):
    """Fits the agent to a queue item: with no ``messages`` given, the conversation starts
    from the item's body (so ``item_add --graph refund_agent --title .. --body ..`` works);
    when the agent stops, ``result`` holds its answer, which the queue records as the
    item's outcome."""

    state_schema = RefundAgentState

    def before_agent(self, state: RefundAgentState, runtime: Any) -> dict[str, Any] | None:
        if state.get("messages") or not state.get("body"):
            return None
        return {"messages": [HumanMessage(content=state["body"])]}

    def after_agent(self, state: RefundAgentState, runtime: Any) -> dict[str, Any]:
        answer = next((m for m in reversed(state["messages"]) if isinstance(m, AIMessage) and not m.tool_calls), None)
        return {"result": {"status": "answered", "answer": str(answer.content) if answer else ""}}


def build(checkpointer: BaseCheckpointSaver) -> Any:
    return create_agent(
        model=ScriptedChatModel(),
        tools=TOOLS,
        system_prompt="You are a shop's support agent. Refunds and emails need a person's approval.",
        middleware=[ReviewWithSchemas(tools=TOOLS, interrupt_on=INTERRUPT_ON), QueueItemAdapter()],
        state_schema=RefundAgentState,
        checkpointer=checkpointer,
        name="refund_agent",
    )
