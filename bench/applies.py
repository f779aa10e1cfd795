"""Benches of the graph's work after a decision, with one real ``manage.py db_worker`` (issue 14).

The servers run in worker mode (``REVIEWQUEUE_APPLY_INLINE`` empty): the guard records
the decision and queues the resume; the worker runs the graph on.

- 11. Decision response latency on the example agent's items, whose refund tool takes
  ``REFUND_AGENT_TOOL_SECONDS`` (0.5 s), vs the same on moderation items (instant
  graph), interleaved at a steady pace (a little faster than one worker runs the
  tools: what the reviewer waits for must not depend on it); target p99 ratio ≤ 1.5. For
  contrast, decision → applied (the ask's ``applied_at``, written with ``apply_state``
  back to idle), timed one decision at a time with the worker idle, which for the agent
  must take at least the tool's time: the proof the tool ran, and ran in the worker,
  not in the response.
- 12. Decisions applied per second by one worker: N decisions on N moderation items
  from 8 reviewers as fast as they go; from the first request until the last item is
  applied, beside the HTTP decisions/s of the same run.
"""

from __future__ import annotations

import asyncio
import os
import time

from bench.common import Login, Metric, Servers, log, median, percentile
from bench.served import _client, _decide

# A message the example agent's scripted model turns into one refund and nothing else
# (examples/refund_agent/model.py: an order id and "refund", no email).
AGENT_MESSAGE = "Hi, order A-17 arrived broken. Please refund 120 EUR."


def agent_items_make(count: int) -> list[str]:
    from moderation.review.items import item_create

    return [
        str(
            item_create(
                title=f"bench refund {n}",
                body=AGENT_MESSAGE,
                source="bench-agent",
                graph="refund_agent",
                graph_input={"messages": [{"role": "user", "content": AGENT_MESSAGE}]},
            ).public_id
        )
        for n in range(count)
    ]


def applied_wait(items: list[str], *, timeout: float) -> dict[str, float]:
    """Wait until none of ``items`` is applying; the moment (epoch s) each one's ask was applied."""
    from moderation.items.models import ApplyState, QueueItem, ReviewAsk

    deadline = time.monotonic() + timeout
    while QueueItem.objects.filter(public_id__in=items, apply_state=ApplyState.APPLYING).exists():
        if time.monotonic() > deadline:
            log(f"WARNING: items still applying after {timeout:.0f} s")
            break
        time.sleep(0.05)
    applied = ReviewAsk.objects.filter(item__public_id__in=items, applied_at__isnull=False).values_list(
        "item__public_id", "applied_at"
    )
    return {str(public_id): at.timestamp() for public_id, at in applied}


def backlog_drain(*, timeout: float) -> None:
    """Let the worker apply what earlier benches decided with no worker running, before timing it."""
    from moderation.items.models import ApplyState, QueueItem

    waiting = QueueItem.objects.filter(apply_state=ApplyState.APPLYING)
    count, start = waiting.count(), time.perf_counter()
    while waiting.exists() and time.perf_counter() - start < timeout:
        time.sleep(0.2)
    log(
        f"worker: applied the {count} decisions earlier benches left in {time.perf_counter() - start:.1f} s"
        + (f"; {waiting.count()} still applying" if waiting.exists() else "")
    )


async def _paced(servers: Servers, logins: list[Login], pairs: list[tuple[str, str]], *, rate: float) -> list[dict]:
    """Decide (kind, item) pairs one at a time at ``rate``/s, round-robin over the logins' clients."""
    clients = [_client(servers.host(i), logins[i % len(logins)]) for i in range(len(logins))]
    runs: list[dict] = []
    try:
        begin = time.perf_counter()
        for n, (kind, item) in enumerate(pairs):
            await asyncio.sleep(max(0.0, begin + n / rate - time.perf_counter()))
            sent_at, start = time.time(), time.perf_counter()
            status = await _decide(clients[n % len(clients)], item, "approve")
            runs.append(
                {"kind": kind, "item": item, "status": status, "sent_at": sent_at, "ms": (time.perf_counter() - start) * 1000}
            )
    finally:
        for c in clients:
            await c.aclose()
    return runs


def _solo_applied_ms(servers: Servers, logins: list[Login], pairs: list[tuple[str, str]]) -> dict[str, list[float]]:
    """Decision → applied for each (kind, item), one at a time with the worker otherwise idle (no queueing)."""
    out: dict[str, list[float]] = {}
    for kind, item in pairs:
        [run] = asyncio.run(_paced(servers, logins, [(kind, item)], rate=1.0))
        applied = applied_wait([item], timeout=30)
        if item in applied:
            out.setdefault(kind, []).append((applied[item] - run["sent_at"]) * 1000)
    return out


def bench_agent_response(
    servers: Servers, logins: list[Login], moderation_items: list[str], *, count: int, rate: float, solo: int = 3
) -> list[Metric]:
    from moderation.items.models import QueueItem

    tool_ms = float(os.environ.get("REFUND_AGENT_TOOL_SECONDS", "0") or 0) * 1000
    agent = agent_items_make(count + 2 + solo)
    plain = [moderation_items.pop() for _ in range(count + 2 + solo)]
    # Warm-up (the agent graph compiled in the server and the worker), then A B A B so a
    # burst of load from elsewhere on this shared machine hits both kinds alike.
    warm = [pair for _ in range(2) for pair in (("agent", agent.pop()), ("moderation", plain.pop()))]
    asyncio.run(_paced(servers, logins, warm, rate=rate))
    solo_pairs = [pair for _ in range(solo) for pair in (("agent", agent.pop()), ("moderation", plain.pop()))]
    pairs = [pair for a, m in zip(agent, plain, strict=False) for pair in (("agent", a), ("moderation", m))]
    runs = asyncio.run(_paced(servers, logins, pairs, rate=rate))
    applied_wait([r["item"] for r in runs], timeout=60 + count * tool_ms / 1000)
    solo_ms = _solo_applied_ms(servers, logins, solo_pairs)
    by_kind: dict[str, dict[str, list]] = {}
    for r in runs:
        kind = by_kind.setdefault(r["kind"], {"ms": [], "statuses": []})
        kind["ms"].append(r["ms"])
        kind["statuses"].append(r["status"])
    agent_ids = [item for kind, item in (*pairs, *solo_pairs) if kind == "agent"]
    answers = QueueItem.objects.filter(public_id__in=agent_ids).values_list("applied_result", flat=True)
    tool_ran = sum("refunded 120 EUR" in str((a.get("result") or {}).get("answer", "")) for a in answers)
    summary = {
        k: {
            "p50_ms": median(v["ms"]),
            "p99_ms": percentile(v["ms"], 99),
            "decisions": len(v["ms"]),
            "statuses": {s: v["statuses"].count(s) for s in set(v["statuses"])},
            "solo_applied_ms": solo_ms.get(k, []),
        }
        for k, v in by_kind.items()
    }
    agent_applied = min(solo_ms.get("agent", []), default=float("nan"))
    plain_applied = min(solo_ms.get("moderation", []), default=float("nan"))
    log(
        f"agent: response p50 {summary['agent']['p50_ms']:.1f} / p99 {summary['agent']['p99_ms']:.1f} ms vs moderation "
        f"p50 {summary['moderation']['p50_ms']:.1f} / p99 {summary['moderation']['p99_ms']:.1f} ms; applied after "
        f"{agent_applied:.0f} ms (moderation {plain_applied:.0f} ms, tool {tool_ms:.0f} ms), "
        f"{tool_ran}/{len(agent_ids)} refunds recorded"
    )
    detail = {**summary, "rate": rate, "tool_ms": tool_ms, "refunds_recorded": tool_ran, "agent_items": len(agent_ids)}
    return [
        Metric(
            "agent_response_p99",
            f"11. decision response p99, agent item whose tool takes {tool_ms:.0f} ms (worker)",
            summary["agent"]["p99_ms"],
            "ms",
            summary["moderation"]["p99_ms"],
            "same, moderation items (instant graph)",
            target=1.5,
            check="ratio",
            op="<=",
            detail=detail,
        ),
        Metric(
            "agent_response_p50",
            "11. decision response p50, agent item",
            summary["agent"]["p50_ms"],
            "ms",
            summary["moderation"]["p50_ms"],
            "same, moderation items (instant graph)",
        ),
        Metric(
            "agent_applied_min",
            f"11. (contrast) decision → applied, agent item, worker idle, fastest of {solo}",
            agent_applied,
            "ms",
            plain_applied,
            "same, moderation items",
            target=tool_ms,
            check="value",
            op=">=",
            detail={"solo_applied_ms": solo_ms, "refunds_recorded": tool_ran, "agent_items": len(agent_ids)},
        ),
    ]


async def _burst(servers: Servers, logins: list[Login], items: list[str], *, reviewers: int) -> list[dict]:
    """``reviewers`` clients deciding ``items`` (each a different one) until none is left."""
    clients = [_client(servers.host(i), logins[i % len(logins)]) for i in range(reviewers)]
    runs: list[dict] = []
    todo = list(items)

    async def reviewer(client):
        while todo:
            item = todo.pop()
            status = await _decide(client, item, "approve")
            runs.append({"item": item, "status": status, "done": time.time()})

    try:
        await asyncio.gather(*(reviewer(c) for c in clients))
    finally:
        for c in clients:
            await c.aclose()
    return runs


def bench_applied_rate(servers: Servers, logins: list[Login], items: list[str], *, count: int) -> list[Metric]:
    chosen = [items.pop() for _ in range(count)]
    start = time.time()
    runs = asyncio.run(_burst(servers, logins, chosen, reviewers=8))
    answered = max(r["done"] for r in runs)
    applied = applied_wait(chosen, timeout=120)
    statuses = {s: sum(r["status"] == s for r in runs) for s in {r["status"] for r in runs}}
    http_rate = len(runs) / (answered - start)
    last = max(applied.values(), default=float("nan"))
    applied_rate = len(applied) / (last - start)
    log(
        f"worker: {len(runs)} decisions answered at {http_rate:.1f}/s, {len(applied)} applied at {applied_rate:.1f}/s "
        f"(last applied {last - answered:.1f} s after the last answer) {statuses}"
    )
    if len(applied) < count:
        log(f"WARNING: {count - len(applied)} decisions were never applied")
    return [
        Metric(
            "applied_rate",
            f"12. decisions applied/s, one worker, 8 reviewers on {count} moderation items",
            applied_rate,
            "dec/s",
            http_rate,
            "HTTP decisions answered/s, same run",
            detail={
                "decisions": count,
                "applied": len(applied),
                "statuses": statuses,
                "applied_after_last_answer_s": last - answered,
            },
        )
    ]
