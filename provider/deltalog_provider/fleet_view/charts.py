"""Inline SVG charts over time: no script, no external asset, readable in any browser.

A chart is a few series of (time, value) points drawn as lines, each optionally with a
band (a low and a high per point: the range a state took within a day), a time axis with
dates, a value axis and a legend. What it draws is bounded whatever the history holds:
at most :data:`MAX_POINTS` points a series (more are merged into buckets, keeping their
lowest and highest), a dot with a tooltip per point only while a series has at most
:data:`DOTS_UP_TO` of them, and non-finite values left out. An all-zero chart says so
instead of labelling its axis "0 B / 0 B / 1 B". The page embeds the SVG as is, so it
works in Airflow's sandboxed iframe and in a mail or an archived file.
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
#: A series draws at most this many points (about one per two pixels of the plot).
MAX_POINTS = 240
#: Dots (with a tooltip each) while a series has at most this many points; a line alone beyond.
DOTS_UP_TO = 62

Point = tuple[dt.datetime, float]
Band = tuple[dt.datetime, float, float]


@dataclass(frozen=True)
class Series:
    """One line of a chart: a name for the legend, its points oldest first, and an optional band."""

    name: str
    points: list[Point] = field(default_factory=list)
    band: list[Band] = field(default_factory=list)
    #: Drawn dashed (a target to stay under, not a measurement).
    dashed: bool = False

    def summary_line(self) -> str:
        """One line: the series' name and how many points it has."""
        return f"{self.name}: {len(self.points)} points"

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "points": [(t.isoformat(), v) for t, v in self.points],
            "band": [(t.isoformat(), lo, hi) for t, lo, hi in self.band],
            "dashed": self.dashed,
        }


def _finite(v: float) -> bool:
    try:
        return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    except OverflowError:  # an integer beyond any double
        return False


def _nice(value: float) -> float:
    """The smallest of 1, 2, 2.5 or 5 times a power of ten at or above ``value`` (an axis end)."""
    if value <= 0:
        return 0.0
    magnitude = 10.0 ** math.floor(math.log10(value))
    nice = next((step * magnitude for step in (1, 2, 2.5, 5, 10) if step * magnitude >= value), value)
    return nice if math.isfinite(nice) else value  # at the ends of the doubles: the value itself


def _nice_max(value: float) -> float:
    return _nice(value) or 1.0


def downsample(points: Sequence[Point], limit: int = MAX_POINTS) -> tuple[list[Point], list[Band]]:
    """At most ``limit`` points: consecutive points merged into buckets (the bucket's last value at
    its last time, its range as a band); the points as they are when there are few enough."""
    pts = [(t, float(v)) for t, v in points if _finite(v)]
    if len(pts) <= limit:
        return pts, []
    size = math.ceil(len(pts) / limit)
    out, band = [], []
    for i in range(0, len(pts), size):
        chunk = pts[i : i + size]
        values = [v for _, v in chunk]
        out.append(chunk[-1])
        band.append((chunk[-1][0], min(values), max(values)))
    return out, band


def _ticks(lo: float, hi: float, unit: Callable[[float], str]) -> list[float]:
    """Three ticks, fewer when their labels would repeat (a small integer range)."""
    ticks = [lo, (lo + hi) / 2, hi] if lo < 0 < hi else [lo, lo + (hi - lo) / 2, hi]
    labels = [unit(t) for t in ticks]
    if len(set(labels)) < len(labels):
        ticks = [lo, hi]
    return ticks


def line_chart(
    title: str,
    series: Sequence[Series],
    *,
    unit: Callable[[float], str] = lambda v: f"{v:g}",
    chart_id: str = "",
) -> str:
    """An SVG line chart of ``series`` (an empty chart says "no data yet", an all-zero one "all zero")."""
    esc = html.escape
    drawn = []
    dashed = {s.name for s in series if s.dashed}
    for s in series:
        pts, band = downsample(s.points)
        given = [(t, lo, hi) for t, lo, hi in s.band if _finite(lo) and _finite(hi)]
        drawn.append((s.name, pts, band or (given if len(given) <= MAX_POINTS else downsample_band(given))))
    values = [v for _, pts, _ in drawn for _, v in pts] + [x for _, _, b in drawn for _, lo, hi in b for x in (lo, hi)]
    times = [t for _, pts, _ in drawn for t, _ in pts] + [t for _, _, b in drawn for t, _, _ in b]
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{esc(chart_id)}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{esc(title)}">'
        f'<title>{esc(title)}</title><text x="{LEFT}" y="16" class="chart-title">{esc(title)}</text>'
    )
    if not values:
        return head + f'<text x="{LEFT}" y="{HEIGHT // 2}" class="chart-empty">no data yet</text></svg>'
    t0, t1 = min(times).timestamp(), max(times).timestamp()
    span = (t1 - t0) or 1.0
    all_zero = all(v == 0 for v in values)
    hi = _nice_max(max(values)) if max(values) > 0 else (0.0 if min(values) < 0 else 1.0)
    lo = -_nice(-min(values)) if min(values) < 0 else 0.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t: dt.datetime) -> float:
        return LEFT + (t.timestamp() - t0) / span * plot_w if t1 > t0 else LEFT + plot_w / 2

    def y(v: float) -> float:
        # Halved first: the difference of two doubles near the largest one would overflow.
        span_v = hi / 2 - lo / 2
        return TOP + plot_h - ((v / 2 - lo / 2) / span_v if span_v else 0.0) * plot_h

    parts = [head]
    for tick in [lo] if all_zero else _ticks(lo, hi, unit):
        yy = y(tick)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{yy:.1f}" y2="{yy:.1f}" class="grid"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" text-anchor="end" class="tick">{esc(unit(tick))}</text>')
    if all_zero:
        parts.append(f'<text x="{LEFT + 8}" y="{TOP + 14}" class="chart-empty">all zero</text>')
    first, last = min(times), max(times)
    if all(t.time() == dt.time() for t in times):
        stamp = "%Y-%m-%d"  # daily points
    else:
        stamp = "%Y-%m-%d %H:%M" if span >= 3600 else "%Y-%m-%d %H:%M:%S"
    for t, anchor in ((first, "start"), (last, "end")) if last > first else ((first, "middle"),):
        parts.append(
            f'<text x="{x(t):.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="{anchor}" class="tick">'
            f"{esc(t.strftime(stamp))}</text>"
        )
    for i, (name, pts, band) in enumerate(drawn):
        color = PALETTE[i % len(PALETTE)]
        if len(band) > 1:
            outline = [(x(t), y(h)) for t, _, h in band] + [(x(t), y(lo_)) for t, lo_, _ in reversed(band)]
            path = " ".join(f"{a:.1f},{b:.1f}" for a, b in outline)
            parts.append(f'<polygon points="{path}" fill="{color}" fill-opacity="0.15" stroke="none" class="band"/>')
        if len(pts) > 1:
            path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
            dash = ' stroke-dasharray="6 4"' if name in dashed else ""
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        if len(pts) <= DOTS_UP_TO:
            for t, v in pts:
                parts.append(
                    f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" fill="{color}">'
                    f"<title>{esc(name)} {esc(unit(v))} at {esc(t.strftime(stamp))} UTC</title></circle>"
                )
        lx = LEFT + i * 150
        parts.append(f'<rect x="{lx}" y="{HEIGHT - 14}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{lx + 14}" y="{HEIGHT - 5}" class="legend">{esc(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def downsample_band(band: Sequence[Band], limit: int = MAX_POINTS) -> list[Band]:
    """A band of at most ``limit`` entries (consecutive entries merged: lowest low, highest high)."""
    size = math.ceil(len(band) / limit)
    return [
        (
            band[min(i + size, len(band)) - 1][0],
            min(b[1] for b in band[i : i + size]),
            max(b[2] for b in band[i : i + size]),
        )
        for i in range(0, len(band), size)
    ]


__all__ = ["DOTS_UP_TO", "MAX_POINTS", "PALETTE", "Series", "downsample", "downsample_band", "line_chart"]
