"""Bar charts drawn on the server as SVG geometry for templates/moderation/_chart.html.

No charting library and no script: the page keeps its CSP (no inline script or style;
colours come from classes in app.css), and the numbers are in the page and its CSV anyway.
Each chart names its series in a legend (colour is never the only key), and is drawn
1 user unit to about 1 CSS pixel at full width (app.css: at least 75% on a phone, where it
scrolls sideways in its own box), so its 16-unit labels are read at 12 px or more.
"""

from __future__ import annotations

from dataclasses import dataclass

WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 960, 240, 64, 34, 12
LABELS_MAX = 8  # date labels under a chart of many days: every nth, so they never overlap


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    css: str
    title: str


@dataclass(frozen=True)
class Chart:
    title: str
    bars: list[Bar]
    ticks: list[tuple[float, str]]  # (y, label) of the value axis
    labels: list[tuple[float, str]]  # (x, label) under the bars
    legend: list[tuple[str, str]]  # (series name, css class)
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT


def bar_chart(
    *,
    title: str,
    labels: list[str],
    series: list[tuple[str, str, list[float | None]]],
    unit=str,
    every_label: bool = False,
) -> Chart:
    """Grouped bars: ``series`` is (name, css class, one value per label; None draws nothing); ``unit`` formats values.

    ``every_label``: name every bar group (moderators), not every nth (days).
    """
    top = max((v for _, _, values in series for v in values if v), default=0) or 1
    plot_h, plot_w = HEIGHT - BOTTOM - TOP, WIDTH - LEFT - 4
    slot = plot_w / max(1, len(labels))
    width = max(1.0, slot * 0.8 / max(1, len(series)))
    bars = []
    for i, label in enumerate(labels):
        for s, (name, css, values) in enumerate(series):
            value = values[i]
            if not value:
                continue
            h = plot_h * value / top
            bars.append(
                Bar(
                    x=round(LEFT + i * slot + slot * 0.1 + s * width, 1),
                    y=round(HEIGHT - BOTTOM - h, 1),
                    width=round(width, 1),
                    height=round(h, 1),
                    css=css,
                    title=f"{label}: {name} {unit(value)}",
                )
            )
    ticks = [(round(HEIGHT - BOTTOM - plot_h * f, 1), unit(top * f)) for f in (0, 0.5, 1)]
    every = 1 if every_label else -(-len(labels) // LABELS_MAX)
    shown = [(round(LEFT + i * slot + slot / 2, 1), label) for i, label in enumerate(labels) if i % every == 0]
    return Chart(title=title, bars=bars, ticks=ticks, labels=shown, legend=[(name, css) for name, css, _ in series])


def duration_words(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    for size, word in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds / size:.1f} {word}"
    return f"{seconds:.0f} s"
