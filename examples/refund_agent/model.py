"""A chat model that needs no API key: it reads the conversation and proposes tool
calls by fixed rules, so the example agent behaves the same on every run.

The rules, for the customer's latest message:

1. It names an order ("A-17"): look the order up first (``lookup_order``, not gated).
2. It asks for a refund: propose ``refund_payment`` for the amount it names ("120 EUR",
   "€80"), else the order's total, in the order's currency unless it names one.
3. It asks for an email: propose ``send_email`` to the address it gives, else the
   order's customer. In the same turn as the refund (one ask with two actions), unless
   the email is to come "then" / "once" / "after" it: then the email is proposed after
   the refund's decision ran (a second round), and says what actually happened.
4. It asks for neither: propose an email with the order's status; it names no order:
   an email asking which order it is about.
5. Everything proposed has a result: answer with what was done and what was not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

_ORDER = re.compile(r"(?<![\w-])([A-Z]{1,3}-\d{1,6})(?![\w-])", re.IGNORECASE)
_SYMBOLS = {"€": "EUR", "$": "USD", "£": "GBP"}
_WORDS = {"eur": "EUR", "euro": "EUR", "euros": "EUR", "usd": "USD", "dollars": "USD", "gbp": "GBP", "pounds": "GBP"}
_AMOUNT = re.compile(
    r"(?P<sym>[€$£])\s*(?P<a1>\d+(?:\.\d{1,2})?)"
    r"|(?<![\w.-])(?P<a2>\d+(?:\.\d{1,2})?)\s*(?P<cur>[€$£]|eur|euros?|usd|dollars|gbp|pounds)\b",
    re.IGNORECASE,
)
_ADDRESS = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_EMAIL = re.compile(r"\be-?mail", re.IGNORECASE)
_EMAIL_AFTER = re.compile(r"\b(then|once|after)\b[^.!?]*\be-?mail", re.IGNORECASE)
FALLBACK_RECIPIENT = "customer@example.com"


class ScriptedChatModel(BaseChatModel):
    """Proposes the refund agent's tool calls from the rules of this module's docstring."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        # The script knows the refund agent's tools by name; nothing to send anywhere.
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=reply_next(messages))])


def reply_next(messages: list[BaseMessage]) -> AIMessage:
    """The agent's next message for this conversation."""
    start = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
    text = str(messages[start].content)
    # By tool name, in the order the calls were proposed (a rejection's message comes first).
    proposed = [c["name"] for m in messages[start:] if isinstance(m, AIMessage) for c in m.tool_calls]
    by_name = {m.name: m for m in messages[start:] if isinstance(m, ToolMessage)}
    results = {name: by_name[name] for name in proposed if name in by_name}
    turn = sum(isinstance(m, AIMessage) for m in messages)

    order_id = _order_id(text)
    if order_id and "lookup_order" not in results:
        return _calls(turn, [("lookup_order", {"order_id": order_id})])
    order = json.loads(str(results["lookup_order"].content)) if order_id else None

    calls = []
    wants_refund = order is not None and "refund" in text.lower()
    wants_email = bool(_EMAIL.search(text)) or not wants_refund
    if wants_refund and "refund_payment" not in results:
        amount, currency = _amount(text) or (order["total"], order["currency"])
        calls.append(("refund_payment", {"order_id": order_id, "amount": amount, "currency": currency}))
    email_waits = wants_refund and "refund_payment" not in results and bool(_EMAIL_AFTER.search(text))
    if wants_email and "send_email" not in results and not email_waits:
        calls.append(
            (
                "send_email",
                _email(text, order=order, refund=calls[0][1] if calls else None, refunded=results.get("refund_payment")),
            )
        )
    if calls:
        return _calls(turn, calls)
    return AIMessage(content=_summary(results))


def _calls(turn: int, calls: list[tuple[str, dict[str, Any]]]) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[
            {"name": name, "args": args, "id": f"call-{turn}-{i}", "type": "tool_call"} for i, (name, args) in enumerate(calls)
        ],
    )


def _order_id(text: str) -> str | None:
    match = _ORDER.search(text)
    return match.group(1).upper() if match else None


def _amount(text: str) -> tuple[float, str] | None:
    match = _AMOUNT.search(text)
    if not match:
        return None
    if match.group("sym"):
        return float(match.group("a1")), _SYMBOLS[match.group("sym")]
    cur = match.group("cur").lower()
    return float(match.group("a2")), _SYMBOLS.get(cur) or _WORDS[cur]


def _email(text: str, *, order: dict | None, refund: dict | None, refunded: ToolMessage | None) -> dict[str, str]:
    address = _ADDRESS.search(text)
    to = address.group(0) if address else order["customer"] if order else FALLBACK_RECIPIENT
    if order is None:
        return {
            "to": to,
            "subject": "Your request",
            "body": "Thank you for writing. Which order is this about (for example A-17), and what should we do?",
        }
    subject = f"Your order {order['order_id']}"
    if refund is not None:
        body = f"We are refunding {refund['amount']:g} {refund['currency']} for order {order['order_id']}."
        return {"to": to, "subject": subject, "body": body}
    if refunded is not None:
        done = refunded.status != "error"
        what = _result_line(refunded)
        return {"to": to, "subject": subject, "body": f"We have {what}." if done else f"We could not make the refund: {what}"}
    return {"to": to, "subject": subject, "body": f"Your order {order['order_id']} is {order['status']}."}


def _result_line(message: ToolMessage) -> str:
    # After an edit LangChain puts a note for the model before the tool's own output.
    return str(message.content).rsplit("\n", 1)[-1]


def _summary(results: dict[str, ToolMessage]) -> str:
    lines = [
        _result_line(m) if m.status != "error" else f"{name} was not run ({_result_line(m)})"
        for name, m in results.items()
        if name != "lookup_order"
    ]
    return "Done: " + "; ".join(lines) + "."
