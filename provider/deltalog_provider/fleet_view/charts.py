"""Inline SVG charts over time: no script, no external asset, readable in any browser.

A chart is a few series of (time, value) points drawn as lines with a dot per point
(each dot carries a ``<title>``, the browser's tooltip), a time axis with dates, a value
axis with three ticks and a legend. The page embeds the SVG as is, so it also works in
Airflow's sandboxed iframe and in a mail or an archived file.
"""

from __future__ import annotations

import datetime as dt
import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

#: Colours of the series, in order (distinguishable, also for the common colour-vision deficiencies).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#17becf")

WIDTH, HEIGHT = 560, 200
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 28, 36


@dataclass(frozen=True)
class Series:
    """One line of a chart: a name for the legend and its points, oldest first."""

    name: str
    points: list[tuple[dt.datetime, float]] = field(default_factory=list)

    def summary_line(self) -> str:
        """One line: the series' name and how many points it has."""
        return f"{self.name}: {len(self.points)} points"

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "points": [(t.isoformat(), v) for t, v in self.points]}


def _nice_max(value: float) -> float:
    """The smallest of 1, 2, 2.5 or 5 times a power of ten at or above ``value`` (an axis top)."""
    if value <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(value))
    return next(step * magnitude for step in (1, 2, 2.5, 5, 10) if step * magnitude >= value)


def line_chart(
    title: str,
    series: Sequence[Series],
    *,
    unit: Callable[[float], str] = lambda v: f"{v:g}",
    chart_id: str = "",
) -> str:
    """An SVG line chart of ``series`` (an empty chart says "no data yet")."""
    points = [p for s in series for p in s.points]
    esc = html.escape
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{esc(chart_id)}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{esc(title)}">'
        f'<title>{esc(title)}</title><text x="{LEFT}" y="16" class="chart-title">{esc(title)}</text>'
    )
    if not points:
        return head + f'<text x="{LEFT}" y="{HEIGHT // 2}" class="chart-empty">no data yet</text></svg>'
    t0 = min(t for t, _ in points).timestamp()
    t1 = max(t for t, _ in points).timestamp()
    span = (t1 - t0) or 1.0
    top = _nice_max(max(v for _, v in points))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t: dt.datetime) -> float:
        return LEFT + (t.timestamp() - t0) / span * plot_w if t1 > t0 else LEFT + plot_w / 2

    def y(v: float) -> float:
        return TOP + plot_h - v / top * plot_h

    parts = [head]
    for frac in (0.0, 0.5, 1.0):  # value axis: three grid lines with labels
        yy = y(top * frac)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{yy:.1f}" y2="{yy:.1f}" class="grid"/>')
        parts.append(
            f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" text-anchor="end" class="tick">{esc(unit(top * frac))}</text>'
        )
    first, last = min(t for t, _ in points), max(t for t, _ in points)
    if all(t.time() == dt.time() for t, _ in points):
        stamp = "%Y-%m-%d"  # daily points
    else:
        stamp = "%Y-%m-%d %H:%M" if span >= 3600 else "%Y-%m-%d %H:%M:%S"
    for t, anchor in ((first, "start"), (last, "end")) if last > first else ((first, "middle"),):
        parts.append(
            f'<text x="{x(t):.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="{anchor}" class="tick">'
            f"{esc(t.strftime(stamp))}</text>"
        )
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        if len(s.points) > 1:
            path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in s.points)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for t, v in s.points:
            parts.append(
                f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" fill="{color}">'
                f"<title>{esc(s.name)} {esc(unit(v))} at {esc(t.strftime('%Y-%m-%d %H:%M:%S'))} UTC</title></circle>"
            )
        lx = LEFT + i * 150
        parts.append(f'<rect x="{lx}" y="{HEIGHT - 14}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{lx + 14}" y="{HEIGHT - 5}" class="legend">{esc(s.name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


__all__ = ["PALETTE", "Series", "line_chart"]
