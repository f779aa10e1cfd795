"""The results table: measured value, baseline, ratio, target, pass/fail."""

from __future__ import annotations

import math
from typing import Any


def _num(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    value = float(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def table(result: dict[str, Any]) -> str:
    m = result["machine"]
    head = (
        f"reviewqueue bench: {result['backend']} ({result['database']}, {result['channel_layer']} layer, "
        f"{result['servers']} daphne process{'es' if result['servers'] > 1 else ''}), {result['started_at']}, "
        f"{result['duration_s']} s\nmachine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Python {m['python']}; "
        f"load {m['load_at_start'][0]:.2f} at start, {m['load_at_end'][0]:.2f} at end"
        + (f"; scale {result['scale']}" if result.get("scale", 1) != 1 else "")
        + (f"; measures {', '.join(map(str, result['only']))} only" if result.get("only") else "")
    )
    rows = [("measure", "value", "unit", "baseline", "ratio", "target", "result")]
    for metric in result["metrics"]:
        passed = metric["passed"]
        rows.append(
            (
                metric["name"],
                _num(metric["value"]),
                metric["unit"],
                _num(metric["baseline"]) + (f" ({metric['baseline_name']})" if metric["baseline_name"] else ""),
                "-" if metric["ratio"] is None else f"{metric['ratio']:.2f}",
                metric["target_text"],
                "info" if passed is None else ("PASS" if passed else "MISS"),
            )
        )
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = [head, ""]
    for n, row in enumerate(rows):
        cells = [
            str(c).ljust(w) if i in (0, 2, 3, 5) else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=False))
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"
