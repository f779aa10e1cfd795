"""The soak's judge and report: what a long run under faults did, read from facts gathered after it.

The soak (``make soak``, driven by ``moderation.tests.soak_run``) runs two servers and two
task workers under a steady mixed load while a nemesis injects faults, then gathers
*facts*: the history of every decision, vote and cancel as the clients learned it, the
final state of the items, and what the database, Redis and the processes say at the end.
``soak_judge`` turns facts into findings (none: the run kept every promise);
``soak_report`` turns the timeline of requests and faults into availability, latency
and recovery per phase. Both are plain functions of data, so a corrupted fact (the
negative controls in ``moderation/tests/lab/test_soak.py``) must give a finding.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from moderation.lab.history import FinalItem, Op, history_check

QUIET = "quiet"
# A long-poll answers when the item is decided, by design: its time says nothing of the service's speed.
UNTIMED = {"wait"}
# Memory bound: a server's RSS at the end may exceed the RSS of the same process after
# warm-up by this factor plus this slack (a leak of a few KiB per request grows past it in minutes).
RSS_GROWTH_FACTOR = 1.5
RSS_SLACK_KB = 64 * 1024
# A failure is recorded once an attempt ends past the retry window; the attempt's row is written a
# moment before that check, so its time may fall this much short of the window's end.
FAILED_SLACK = 2.0


@dataclass(frozen=True)
class Finding:
    check: str  # history, submits, webhooks, counters, presence, groups, memory, audit
    subject: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.check}] {self.subject}: {self.detail}"


@dataclass(frozen=True)
class Delivery:
    """One decided item's decision event for one endpoint, as the database has it (``status`` None: no row)."""

    item: str
    endpoint: str
    status: str | None
    msg_id: str = ""
    retry_until: float = 0.0  # epoch seconds
    last_attempt_at: float | None = None
    received: bool | None = None  # its receiver verified this msg_id (None: a receiver we do not watch)


@dataclass(frozen=True)
class Memory:
    server: str
    warm_kb: int  # RSS of this process after warm-up
    end_kb: int  # and after the load stopped


@dataclass
class SoakFacts:
    ops: list[Op]
    final: dict[str, FinalItem]
    accepted: dict[str, str] = field(default_factory=dict)  # Idempotency-Key -> item id the API answered
    rows_by_key: dict[str, list[str]] = field(default_factory=dict)  # Idempotency-Key -> item ids stored
    # Idempotency-Key never accepted during the run -> the status its submit answered when sent once more after
    # every fault was healed (0: no answer). A healthy cluster accepts it then: no key may be stuck.
    resent: dict[str, int] = field(default_factory=dict)
    deliveries: list[Delivery] = field(default_factory=list)
    counters: dict[str, tuple[int, int]] = field(default_factory=dict)  # "graph/status" -> (counter, COUNT)
    live_presence: list[str] = field(default_factory=list)  # rows still counted as viewers once every page closed
    leaked_groups: list[str] = field(default_factory=list)  # group channels still subscribed once every client left
    memory: list[Memory] = field(default_factory=list)
    audit_status: int = 0
    audit_output: str = ""


def soak_judge(facts: SoakFacts) -> list[Finding]:
    """Every broken promise in ``facts``; empty when the run kept them all."""
    findings = [Finding("history", a.item, f"{a.kind}: {a.detail}") for a in history_check(ops=facts.ops, final=facts.final)]
    findings += _submits_check(facts)
    findings += _deliveries_check(facts.deliveries)
    findings += [
        Finding("counters", key, f"counter says {counter}, COUNT says {actual}")
        for key, (counter, actual) in sorted(facts.counters.items())
        if counter != actual
    ]
    findings += [Finding("presence", row, "still counted as a viewer after every page closed") for row in facts.live_presence]
    findings += [Finding("groups", name, "still subscribed after every client left") for name in facts.leaked_groups]
    findings += [
        Finding(
            "memory",
            m.server,
            f"RSS {m.end_kb // 1024} MiB at the end, bound {_rss_bound(m.warm_kb) // 1024} MiB (warm {m.warm_kb // 1024} MiB)",
        )
        for m in facts.memory
        if m.end_kb > _rss_bound(m.warm_kb)
    ]
    if facts.audit_status != 0:
        findings.append(Finding("audit", "verify_audit", f"exit {facts.audit_status}: {facts.audit_output.strip()[-500:]}"))
    return findings


def _rss_bound(warm_kb: int) -> int:
    return int(warm_kb * RSS_GROWTH_FACTOR) + RSS_SLACK_KB


def _submits_check(facts: SoakFacts) -> list[Finding]:
    findings = []
    for key, item in sorted(facts.accepted.items()):
        stored = facts.rows_by_key.get(key, [])
        if stored != [item]:
            findings.append(Finding("submits", key, f"answered item {item}; stored under the key: {stored or 'nothing'}"))
    findings += [
        Finding("submits", key, f"never accepted: sent again once every fault was healed, answered {status or 'nothing'}")
        for key, status in sorted(facts.resent.items())
        if status not in (200, 201)
    ]
    return findings


def _deliveries_check(deliveries: list[Delivery]) -> list[Finding]:
    findings = []
    for d in deliveries:
        subject = f"{d.item} -> {d.endpoint}"
        if d.status is None:
            findings.append(Finding("webhooks", subject, "decided, but no decision event was recorded for the endpoint"))
        elif d.status == "delivered":
            if d.received is False:
                findings.append(Finding("webhooks", subject, f"marked delivered, but the receiver never verified {d.msg_id}"))
        elif d.status == "failed":
            if d.last_attempt_at is None or d.last_attempt_at < d.retry_until - FAILED_SLACK:
                last = (
                    "no attempt"
                    if d.last_attempt_at is None
                    else f"its last attempt {d.retry_until - d.last_attempt_at:.1f} s before"
                )
                findings.append(Finding("webhooks", subject, f"marked failed before its retry window ended ({last})"))
        else:
            findings.append(Finding("webhooks", subject, f"still {d.status} after the run settled"))
    return findings


# --- the report --------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    at: float  # epoch seconds it was sent
    latency: float  # seconds until its answer (or until it gave up)
    kind: str  # decide, vote, submit, duplicate, cancel, wait
    status: int | None  # None: a timeout or a dropped connection

    @property
    def answered(self) -> bool:
        """Answered as designed: any status below 500 (a 409 lost, a 429 too many waits) is the service working."""
        return self.status is not None and self.status < 500


@dataclass(frozen=True)
class Fault:
    kind: str  # kill_server, kill_worker, redis_pause, redis_blackhole, pg_terminate, webhook_down
    target: str
    start: float
    end: float  # when it was healed


def phase_of(at: float, faults: list[Fault]) -> str:
    for fault in faults:
        if fault.start <= at < fault.end:
            return fault.kind
    return QUIET


def p99(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def soak_report(
    *,
    requests: list[Request],
    faults: list[Fault],
    applied: list[tuple[float, float]],
    config: dict[str, Any],
    findings: list[Finding],
) -> dict[str, Any]:
    """Availability and p99 latency per phase, recovery after each fault, decision -> applied p99 in the quiet phase.

    ``applied``: (decided at, applied at) in epoch seconds, one per applied decision.
    """
    by_phase: dict[str, list[Request]] = defaultdict(list)
    for request in requests:
        by_phase[phase_of(request.at, faults)].append(request)
    phases = {}
    for phase, rows in sorted(by_phase.items(), key=lambda kv: (kv[0] != QUIET, kv[0])):
        answered = sum(r.answered for r in rows)
        failures = Counter("timeout" if r.status is None else str(r.status) for r in rows if not r.answered)
        latency = p99([r.latency for r in rows if r.answered and r.kind not in UNTIMED])
        phases[phase] = {
            "requests": len(rows),
            "answered": answered,
            "failed": len(rows) - answered,
            "failures": dict(sorted(failures.items())),
            "availability": round(answered / len(rows), 4),
            "p99_ms": None if latency is None else round(latency * 1000, 1),
        }
    ordered = sorted(faults, key=lambda f: f.start)
    recoveries = []
    for n, fault in enumerate(ordered):
        until = ordered[n + 1].start if n + 1 < len(ordered) else math.inf
        bad = [r.at + r.latency for r in requests if fault.end <= r.at < until and not r.answered]
        recoveries.append({**asdict(fault), "recovery_s": round(max(bad) - fault.end, 2) if bad else 0.0})
    quiet_applied = [done - decided for decided, done in applied if phase_of(decided, faults) == QUIET]
    to_applied = p99(quiet_applied)
    return {
        "config": config,
        "phases": phases,
        "faults": recoveries,
        "decision_to_applied": {
            "quiet_decisions": len(quiet_applied),
            "p99_ms": None if to_applied is None else round(to_applied * 1000, 1),
        },
        "findings": [str(f) for f in findings],
        "verdict": "pass" if not findings else "fail",
    }


def soak_table(report: dict[str, Any]) -> str:
    """The report as the terminal shows it."""
    lines = [f"{'phase':<16}{'requests':>9}{'2xx/4xx':>9}{'5xx/t-o':>9}{'avail':>9}{'p99 ms':>9}  failures"]
    for phase, row in report["phases"].items():
        p = "-" if row["p99_ms"] is None else f"{row['p99_ms']:.0f}"
        lines.append(
            f"{phase:<16}{row['requests']:>9}{row['answered']:>9}{row['failed']:>9}"
            f"{row['availability']:>9.2%}{p:>9}  {_words(row['failures'])}"
        )
    lines.append("")
    lines.append(f"{'fault':<16}{'target':<14}{'at s':>8}{'lasted s':>10}{'recovery s':>12}")
    began = report["config"].get("began", 0)
    for fault in report["faults"]:
        lines.append(
            f"{fault['kind']:<16}{fault['target']:<14}{fault['start'] - began:>8.0f}"
            f"{fault['end'] - fault['start']:>10.1f}{fault['recovery_s']:>12.1f}"
        )
    applied = report["decision_to_applied"]
    lines.append("")
    lines.append(f"decision -> applied p99 in the quiet phase: {applied['p99_ms']} ms ({applied['quiet_decisions']} decisions)")
    lines.append(f"verdict: {report['verdict']}" + "".join(f"\n  {f}" for f in report["findings"]))
    return "\n".join(lines)


def _words(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {what}" for what, n in counts.items())


def soak_save(*, report: dict[str, Any], requests: list[Request], faults: list[Fault], directory: Path) -> tuple[Path, Path]:
    """Write the report as JSON and the latency chart as SVG under ``directory``; their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    json_path, svg_path = directory / "soak.json", directory / "soak.svg"
    json_path.write_text(json.dumps(report, indent=2))
    _chart(requests=requests, faults=faults, began=report["config"].get("began", 0), path=svg_path)
    return json_path, svg_path


_FAULT_COLOURS = {
    "kill_server": "#b3261e",
    "kill_worker": "#e07b00",
    "redis_pause": "#2c5cc5",
    "redis_blackhole": "#6a3fb5",
    "pg_terminate": "#00796b",
    "webhook_down": "#8a5a00",
}


def _chart(*, requests: list[Request], faults: list[Fault], began: float, path: Path) -> None:
    # Imported here, as in moderation.lab.chart: matplotlib costs a second to import.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 4.5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    for fault in faults:
        axes.axvspan(
            fault.start - began, fault.end - began, color=_FAULT_COLOURS.get(fault.kind, "#687083"), alpha=0.18, label=fault.kind
        )
    ok = [r for r in requests if r.answered and r.kind not in UNTIMED]
    bad = [r for r in requests if not r.answered]
    axes.scatter([r.at - began for r in ok], [r.latency * 1000 for r in ok], s=2, color="#2c5cc5", label="answered")
    axes.scatter(
        [r.at - began for r in bad], [r.latency * 1000 for r in bad], s=8, color="#b3261e", marker="x", label="5xx / timeout"
    )
    axes.set_yscale("log")
    axes.set_xlabel("seconds into the soak")
    axes.set_ylabel("latency (ms, log)")
    handles, labels = axes.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=False))
    axes.legend(unique.values(), unique.keys(), fontsize=7, loc="upper right", ncols=4)
    axes.set_title("soak: request latency over time, faults shaded")
    figure.savefig(path, format="svg")
