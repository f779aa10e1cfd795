"""The agent's tools. What each did is its return value: LangChain records it as a
``ToolMessage`` in the thread's ``messages``, so an item's final state is the record
(no global list, and it survives the process that ran the tool)."""

from __future__ import annotations

import os
import time
from typing import Annotated

from langchain_core.tools import tool
from pydantic import Field

# The shop's orders, fixed so every run (and every test) sees the same ones; any other
# id is looked up as a delivered 200 EUR order of its own customer.
ORDERS = {
    "A-17": {"customer": "ana@customers.example", "total": 120.0, "currency": "EUR", "status": "delivered"},
    "B-9": {"customer": "ben@customers.example", "total": 45.5, "currency": "EUR", "status": "delivered"},
    "C-3": {"customer": "chloe@customers.example", "total": 300.0, "currency": "USD", "status": "lost in transit"},
}


def order_read(order_id: str) -> dict:
    default = {"customer": f"{order_id.lower()}@customers.example", "total": 200.0, "currency": "EUR", "status": "delivered"}
    return {"order_id": order_id, **ORDERS.get(order_id, default)}


@tool
def lookup_order(order_id: str) -> dict:
    """Read an order: its customer, total, currency and delivery status."""
    return order_read(order_id)


@tool
def refund_payment(
    order_id: str,
    amount: Annotated[float, Field(gt=0, le=10_000)],
    currency: Annotated[str, Field(pattern="^[A-Z]{3}$", description="ISO 4217 code, e.g. EUR")],
) -> str:
    """Refund part or all of an order's payment to the customer."""
    # A stand-in for a payment provider's latency, so the bench can show the reviewer's
    # answer does not wait for the tool (the worker runs it).
    time.sleep(float(os.environ.get("REFUND_AGENT_TOOL_SECONDS", "0") or 0))
    return f"refunded {amount:g} {currency} for order {order_id}"


@tool
def send_email(to: Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")], subject: str, body: str) -> str:
    """Send an email to a customer."""
    return f"emailed {to}: {subject}"
