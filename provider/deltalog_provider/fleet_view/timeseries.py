"""The charts over time, declared once: which per-day figures each draws, for the fleet and for a table.

Every chart reads one row per day (``deltalog.journal.summary.day_figures``: the fleet's days
or one table's), so a chart has at most a point per day of the window whatever the history
holds, and a state chart draws each day's range as a band around the day's last value.
One more per-day series (the fleet's objective compliance, say) is one entry in
:data:`FLEET_CHARTS` or :data:`TABLE_CHARTS` over a figure of ``FIGURES``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from deltalog.maintenance import OBJECTIVES
from deltalog_provider.fleet_view.charts import Series, line_chart
from deltalog_provider.fleet_view.cost import Prices
from deltalog_provider.fleet_view.html import count, human_bytes, human_seconds, share


@dataclass(frozen=True)
class Line:
    """A series: its legend, the per-day figure it draws, and (state) the figures of its band."""

    name: str
    figure: str
    band: tuple[str, str] | None = None
    #: The figure turned into money at the prices (compute cost per day): shown only with prices.
    money: str | None = None
    #: Drawn dashed: a target, not a measurement.
    dashed: bool = False

    def summary_line(self) -> str:
        """One line: the series and its figure."""
        return f"{self.name}: {self.figure}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "figure": self.figure, "band": list(self.band) if self.band else None}


@dataclass(frozen=True)
class Chart:
    chart_id: str
    title: str
    lines: tuple[Line, ...]
    unit: Callable[[float], str]
    #: Drawn only with prices (the money charts).
    needs_prices: bool = False
    #: Drawn only when the window holds a value other than zero for it (the objectives' charts: a fleet
    #: that sets none sees no empty chart).
    only_with_data: bool = False

    def summary_line(self) -> str:
        """One line: the chart's id and title."""
        return f"{self.chart_id}: {self.title}"

    def to_dict(self) -> dict[str, Any]:
        return {"chart_id": self.chart_id, "title": self.title, "lines": [line.to_dict() for line in self.lines]}


def _state(name: str, column: str) -> Line:
    return Line(name, f"state.{column}", (f"{column}_min", f"{column}_max"))


PROBLEMS = Chart(
    "problems",
    "failures, refusals and deferrals per day",
    (Line("failed", "failures"), Line("refused", "refusals"), Line("deferred", "deferrals")),
    count,
)
FILES = Chart(
    "files",
    "files compacted, written and vacuumed per day",
    (Line("compacted", "files_compacted"), Line("written", "files_written"), Line("vacuumed", "files_vacuumed")),
    count,
)
BYTES = Chart(
    "bytes",
    "bytes compacted, written and reclaimed per day",
    (Line("compacted", "bytes_compacted"), Line("written", "bytes_written"), Line("reclaimed", "bytes_reclaimed")),
    human_bytes,
)
TIME = Chart(
    "seconds",
    "maintenance time and CPU per day",
    (Line("wall clock", "duration_s"), Line("CPU", "cpu_s")),
    human_seconds,
)
COST = Chart("cost", "compute cost per day", (Line("compute", "cpu_s", money="cpu_hour"),), str, needs_prices=True)
#: The fleet's compliance per day: tables by their day's newest judgement (tables, not rows).
OBJECTIVES_CHART = Chart(
    "objectives",
    "tables breached, at risk and meeting their objectives per day",
    (Line("breached", "tables_breached"), Line("at risk", "tables_at_risk"), Line("met", "tables_met")),
    count,
    only_with_data=True,
)
FINISH_BY_CHART = Chart(
    "finish_by",
    "fleet runs that missed or met their finish_by per day",
    (Line("missed", "finish_by_missed"), Line("met", "finish_by_kept")),
    count,
    only_with_data=True,
)

FLEET_CHARTS: tuple[Chart, ...] = (OBJECTIVES_CHART, FINISH_BY_CHART, PROBLEMS, FILES, BYTES, TIME, COST)
TABLE_CHARTS: tuple[Chart, ...] = (
    Chart(
        "live",
        "live files and small files",
        (_state("live files", "live_files_after"), _state("small files", "small_files_after")),
        count,
    ),
    Chart("size", "table size", (_state("bytes", "table_bytes_after"),), human_bytes),
    Chart(
        "log",
        "log length and versions since checkpoint",
        (
            _state("commit files", "log_files_after"),
            _state("versions since checkpoint", "versions_since_checkpoint_after"),
        ),
        count,
    ),
    PROBLEMS,
    FILES,
    BYTES,
    TIME,
    COST,
)


def _days(value: float) -> str:
    return f"{value:.1f} d"


_UNITS: dict[str, Callable[[float], str]] = {"count": count, "days": _days, "share": share}


def objective_chart(name: str, kind: str) -> Chart:
    """One objective of a table over time: the day's last value with the day's range as a band, and the target."""
    return Chart(
        f"objective_{name}",
        f"{name}: value against its target",
        (
            Line("value", f"judged.{name}_value", (f"objective_{name}_min", f"objective_{name}_max")),
            Line("target", f"judged.{name}_target", dashed=True),
        ),
        _UNITS[kind],
    )


#: Each objective's chart on a table's page (drawn for the objectives the table set in the window).
OBJECTIVE_CHARTS: tuple[Chart, ...] = tuple(objective_chart(o.name, o.kind) for o in OBJECTIVES)


def table_charts(days: pa.Table) -> tuple[Chart, ...]:
    """A table's charts: its state, each objective it set in the window (value and target), its work."""
    judged = [r.get("judged") or {} for r in days.to_pylist()] if "judged" in days.column_names else []
    objectives = tuple(
        c
        for c, o in zip(OBJECTIVE_CHARTS, OBJECTIVES, strict=True)
        if any(j.get(f"{o.name}_set") is True for j in judged)
    )
    return (*TABLE_CHARTS[:3], *objectives, *TABLE_CHARTS[3:])


def _value(row: dict[str, Any], figure: str) -> Any:
    if "." in figure:
        outer, inner = figure.split(".", 1)
        return (row.get(outer) or {}).get(inner)
    return row.get(figure)


def _factor(line: Line, prices: Prices) -> float:
    return (prices.cpu_hour or 0.0) / 3600 if line.money == "cpu_hour" else 1.0


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def series(chart: Chart, days: pa.Table, prices: Prices) -> list[Series]:
    """The chart's series from ``days`` (one row per day), a point per day with a value."""
    rows = [r for r in days.to_pylist() if isinstance(r.get("run_date"), dt.date)]
    out = []
    for line in chart.lines:
        factor = _factor(line, prices)
        points, band = [], []
        for row in rows:
            at = dt.datetime.combine(row["run_date"], dt.time(), dt.UTC)
            value = _number(_value(row, line.figure))
            if value is not None:
                points.append((at, value * factor))
            if line.band:
                lo, hi = _number(row.get(line.band[0])), _number(row.get(line.band[1]))
                if lo is not None and hi is not None:
                    band.append((at, lo, hi))
        out.append(Series(line.name, points, band, dashed=line.dashed))
    return out


def _has_data(chart: Chart, rows: list[dict[str, Any]]) -> bool:
    return any(_number(_value(row, line.figure)) not in (None, 0.0) for row in rows for line in chart.lines)


def _shown(specs: tuple[Chart, ...], prices: Prices, days: pa.Table) -> list[Chart]:
    rows = days.to_pylist() if any(c.only_with_data for c in specs) else []
    return [
        c
        for c in specs
        if not (c.needs_prices and prices.cpu_hour is None) and (not c.only_with_data or _has_data(c, rows))
    ]


def charts(specs: tuple[Chart, ...], days: pa.Table, prices: Prices) -> str:
    """The SVG of each chart of ``specs`` (money charts only with an hourly price, the objectives' only
    with data in the window)."""
    return "".join(
        line_chart(
            chart.title,
            series(chart, days, prices),
            unit=prices.money if chart.needs_prices else chart.unit,
            chart_id=chart.chart_id,
        )
        for chart in _shown(specs, prices, days)
    )


def series_json(specs: tuple[Chart, ...], days: pa.Table, prices: Prices) -> dict[str, Any]:
    """The charts' data as JSON: the days, and per chart and series a value per day (null: none)."""
    rows = [r for r in days.to_pylist() if isinstance(r.get("run_date"), dt.date)]
    out: dict[str, Any] = {"days": [r["run_date"].isoformat() for r in rows]}
    for chart in _shown(specs, prices, days):
        out[chart.chart_id] = {
            line.name.replace(" ", "_"): [
                None if (v := _number(_value(r, line.figure))) is None else v * _factor(line, prices) for r in rows
            ]
            for line in chart.lines
        }
    return out


__all__ = [
    "FINISH_BY_CHART",
    "FLEET_CHARTS",
    "OBJECTIVES_CHART",
    "OBJECTIVE_CHARTS",
    "TABLE_CHARTS",
    "Chart",
    "Line",
    "charts",
    "objective_chart",
    "series",
    "series_json",
    "table_charts",
]
