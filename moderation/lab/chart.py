"""The lab's chart: lost decisions per strategy and mode, and what a slow reviewer costs others."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHART_FORMATS = (".png", ".svg")
_MODE_COLOURS = {"threads": "#2c5cc5", "processes": "#b3261e"}


def chart_render(*, report: dict[str, Any], path: Path) -> None:
    """Write a two-panel bar chart of ``report`` to ``path`` (.png or .svg)."""
    if path.suffix.lower() not in CHART_FORMATS:
        raise ValueError(f"chart path must end in .png or .svg, not {path.name!r}")
    # Imported here: matplotlib costs ~1 s to import, and every process that loads the
    # URLs (management commands run system checks) would pay it without drawing a chart.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # A Figure with its own Agg canvas: no pyplot global state, safe outside the main thread.
    figure = Figure(figsize=(11, 4.2), layout="constrained")
    FigureCanvasAgg(figure)
    lost_axes, wait_axes = figure.subplots(1, 2, width_ratios=[3, 2])
    _lost_panel(lost_axes, report)
    _wait_panel(wait_axes, report)
    config = report["config"]
    figure.suptitle(
        f"racelab on {report['database']}: {config['trials']} trials × {config['reviewers']} reviewers, "
        f"{config['delay_ms']:g} ms check-to-act window"
    )
    figure.savefig(path, format=path.suffix.lower().lstrip("."), dpi=110)


def _lost_panel(axes, report: dict[str, Any]) -> None:
    strategies = list(dict.fromkeys(r["strategy"] for r in report["results"]))
    modes = list(dict.fromkeys(r["mode"] for r in report["results"]))
    width = 0.8 / max(1, len(modes))
    for offset, mode in enumerate(modes):
        rows = {r["strategy"]: r for r in report["results"] if r["mode"] == mode}
        xs = [i + (offset - (len(modes) - 1) / 2) * width for i in range(len(strategies))]
        heights = [rows[s]["lost_decisions"] if s in rows else 0 for s in strategies]
        bars = axes.bar(xs, heights, width, label=mode, color=_MODE_COLOURS.get(mode))
        axes.bar_label(bars, labels=[str(h) if s in rows else "" for h, s in zip(heights, strategies, strict=False)], fontsize=8)
    axes.set_xticks(range(len(strategies)), strategies)
    axes.set_ylabel("lost decisions (told success, not the final decision)")
    axes.set_title("Lost decisions per strategy")
    axes.legend(title="mode")


def _wait_panel(axes, report: dict[str, Any]) -> None:
    rows = report["slow_reviewer"]
    strategies = [r["strategy"] for r in rows]
    waits = [r["waited_ms"] for r in rows]
    bars = axes.bar(range(len(rows)), waits, 0.6, color="#8a5a00")
    axes.bar_label(bars, labels=[f"{w:.0f}" for w in waits], fontsize=8)
    if rows:
        hold_ms = rows[0]["hold_s"] * 1000
        axes.axhline(hold_ms, color="#687083", linestyle="--", linewidth=1)
        axes.text(len(rows) - 0.5, hold_ms, f"hold {hold_ms:g} ms", ha="right", va="bottom", fontsize=8)
    axes.set_xticks(range(len(rows)), strategies)
    if report["database"] == "sqlite" and "row-lock" in strategies:
        axes.set_xlabel("on SQLite the row lock is the database's single write lock", fontsize=8)
    axes.set_ylabel("ms other reviewers waited")
    axes.set_title("One reviewer holds item X: others' wait")
