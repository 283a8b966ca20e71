"""The fleet page and the per-table page, rendered on the server from maintenance history rows.

Plain HTML with inline CSS and the SVG charts of :mod:`.charts`: no script, no external
asset, nothing fetched by the browser but the page itself, so it works inside Airflow's
sandboxed iframe, behind a proxy and on a closed network. Every value that comes from the
history (table URIs, reasons, error messages) is escaped. Links are relative, so the pages
work under any URL prefix.
"""

from __future__ import annotations

import datetime as dt
import html
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import quote

import pyarrow as pa

from deltalog.journal import TableOverview, fleet_overview
from deltalog_provider.fleet_view.charts import Series, line_chart

#: The operations shown in the "last run" columns, in maintenance order.
SHOWN_OPERATIONS = ("compaction", "purge", "checkpoint", "vacuum", "log_cleanup", "manifest")

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:16px 20px;color:#1a1a1a;font-size:14px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:22px 0 8px}
.sub{color:#555;margin:0 0 14px}.tiles{display:flex;gap:10px;flex-wrap:wrap;margin:8px 0 14px}
.tile{border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:92px}
.tile b{display:block;font-size:20px}.tile span{color:#555;font-size:12px}
table{border-collapse:collapse;font-size:13px;width:100%}
th,td{border-bottom:1px solid #e3e3e3;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#f5f5f5;font-weight:600;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.st{border-radius:10px;padding:1px 7px;font-size:12px;white-space:nowrap}
.st-done{background:#e3f4e3}.st-nothing_due{background:#eee}.st-deferred{background:#fff1c9}
.st-refused{background:#fde2e2}.st-failed{background:#f8c9c9}.due{background:#fff1c9}
.why{color:#444;font-size:12px;max-width:420px}.muted{color:#777}
.charts{display:flex;flex-wrap:wrap;gap:14px}.chart{border:1px solid #e3e3e3;border-radius:6px;background:#fff}
.chart-title{font-size:13px;font-weight:600}.tick,.legend{font-size:11px;fill:#444}
.chart-empty{font-size:12px;fill:#777}.grid{stroke:#eee}
a{color:#0b5cad;text-decoration:none}a:hover{text-decoration:underline}
.empty{border:1px dashed #bbb;border-radius:6px;padding:14px;color:#444;max-width:760px}
code{background:#f3f3f3;padding:1px 4px;border-radius:3px}
"""

esc = html.escape


def human_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def human_seconds(s: float) -> str:
    return f"{s:.3g} s" if s < 120 else f"{s / 60:.1f} min"


def ago(when: dt.datetime | None, now: dt.datetime) -> str:
    if when is None:
        return "-"
    seconds = max(0.0, (now - when).total_seconds())
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"


def short_name(uri: str) -> str:
    return uri.rstrip("/").rsplit("/", 1)[-1] or uri


def table_link(uri: str) -> str:
    return f'<a href="table?uri={quote(uri, safe="")}" data-table="{esc(uri)}">{esc(short_name(uri))}</a>'


def status_badge(row: dict[str, Any] | None, now: dt.datetime) -> str:
    if row is None:
        return '<span class="muted">never</span>'
    title = esc(row.get("reason") or row.get("summary") or "")
    return (
        f'<span class="st st-{esc(row["status"])}" title="{title}">{esc(row["status"].replace("_", " "))}</span> '
        f'<span class="muted">{esc(ago(row["started_at"], now))}</span>'
    )


def page(title: str, body: str) -> str:
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>{body}</body></html>"
    )


def not_configured_page(reason: str) -> str:
    return page(
        "Delta tables: maintenance",
        "<h1>Delta tables: maintenance</h1>"
        f'<div class="empty" id="not-configured"><p>{esc(reason)}</p>'
        "<p>Point the page at the maintenance history table (docs/history.md) in the Airflow "
        "configuration: <code>[deltalog] history_uri</code> (environment "
        "<code>AIRFLOW__DELTALOG__HISTORY_URI</code>), and <code>[deltalog] history_conn_id</code> "
        "for a <code>deltalog</code> connection whose storage options reach it.</p></div>",
    )


def _tiles(items: Iterable[tuple[str, str, str]]) -> str:
    return (
        '<div class="tiles">'
        + "".join(
            f'<div class="tile" id="tile-{i}"><b>{esc(v)}</b><span>{esc(label)}</span></div>' for i, v, label in items
        )
        + "</div>"
    )


def _fleet_series(rows: pa.Table) -> tuple[Series, Series]:
    """Bytes reclaimed and maintenance seconds per UTC day, over the whole fleet."""
    reclaimed: dict[dt.date, float] = {}
    seconds: dict[dt.date, float] = {}
    for r in rows.to_pylist():
        if r["operation"] == "measure":
            continue
        day = r["run_date"]
        reclaimed[day] = reclaimed.get(day, 0.0) + (r["bytes_reclaimed"] or 0)
        seconds[day] = seconds.get(day, 0.0) + (r["duration_s"] or 0.0)

    def points(by_day: dict[dt.date, float]) -> list[tuple[dt.datetime, float]]:
        return [(dt.datetime.combine(d, dt.time(), dt.UTC), v) for d, v in sorted(by_day.items())]

    return Series("bytes reclaimed", points(reclaimed)), Series("maintenance seconds", points(seconds))


def fleet_page(rows: pa.Table, *, source: str, days: int, now: dt.datetime) -> str:
    """The fleet at a glance: per table its health, what is due and why, the last run per operation."""
    overview = fleet_overview(rows)
    due = [o for o in overview if o.due]
    deferred = [r for o in overview for r in o.deferred]
    refused = [r for o in overview for r in o.refused]
    failed = [r for o in overview for r in o.failed]
    shown_ops = [op for op in SHOWN_OPERATIONS if any(op in o.last for o in overview)]
    head = "".join(
        f"<th>{esc(h)}</th>"
        for h in (
            "table",
            "version",
            "live files",
            "small files",
            "size",
            "versions since checkpoint",
            "DV share",
            "due",
            "why",
            *[f"last {op.replace('_', ' ')}" for op in shown_ops],
            "measured",
        )
    )
    body_rows = []
    for o in overview:
        m = o.latest or o.measured or {}
        is_refused = o.measured is not None and o.measured["status"] == "refused"
        due_cell = ", ".join(o.due) if o.due else ("refused" if is_refused else "nothing")
        cells = [
            f"<td>{table_link(o.table_uri)}</td>",
            f'<td class="num">{esc(str(m.get("version_after", "-")))}</td>',
            f'<td class="num">{esc(str(m.get("live_files_after", "-")))}</td>',
            f'<td class="num">{esc(str(m.get("small_files_after", "-")))}</td>',
            f'<td class="num">{esc(human_bytes(m.get("table_bytes_after")))}</td>',
            f'<td class="num">{esc(str(m.get("versions_since_checkpoint_after", "-")))}</td>',
            f'<td class="num">{esc(share(m.get("dv_share_after")))}</td>',
            f'<td class="{"due" if o.due else ""}">{esc(due_cell)}</td>',
            f'<td class="why">{"<br>".join(esc(line) for line in o.why)}</td>',
            *[f"<td>{status_badge(o.last.get(op), now)}</td>" for op in shown_ops],
            f'<td class="muted">{esc(ago(m.get("started_at"), now))}</td>',
        ]
        body_rows.append(f'<tr data-table="{esc(o.table_uri)}">{"".join(cells)}</tr>')
    reclaimed, seconds = _fleet_series(rows)

    def listing(items: Sequence[dict[str, Any]], list_id: str, empty: str) -> str:
        if not items:
            return f'<p class="muted" id="{list_id}">{esc(empty)}</p>'
        lis = "".join(
            f"<li>{table_link(r['table_uri'])} {esc(r['operation'].replace('_', ' '))}: "
            f"{status_badge(r, now)} <span class=why>{esc(r.get('reason') or '')}</span></li>"
            for r in items
        )
        return f'<ul id="{list_id}">{lis}</ul>'

    body = (
        "<h1>Delta tables: maintenance</h1>"
        f'<p class="sub">From the maintenance history <code>{esc(source)}</code>, last {days} days '
        f"({rows.num_rows} rows); rendered {esc(now.strftime('%Y-%m-%d %H:%M'))} UTC.</p>"
        + _tiles(
            [
                ("tables", str(len(overview)), "tables"),
                ("due", str(len(due)), "due now"),
                ("deferred", str(len(deferred)), "deferred"),
                ("refused", str(len(refused)), "refused"),
                ("failed", str(len(failed)), "failed"),
            ]
        )
        + (
            f'<table id="tables"><thead><tr>{head}</tr></thead><tbody>{"".join(body_rows)}</tbody></table>'
            if overview
            else '<p class="empty" id="tables-empty">No maintenance recorded in this window yet.</p>'
        )
        + "<h2>Deferred work</h2>"
        + listing(deferred, "deferred", "Nothing deferred: every due operation ran.")
        + "<h2>Refusals and failures</h2>"
        + listing(refused + failed, "refusals", "No refusal or failure.")
        + '<h2>The fleet over time</h2><div class="charts">'
        + line_chart("bytes reclaimed per day", [reclaimed], unit=human_bytes, chart_id="fleet-reclaimed")
        + line_chart("maintenance time per day", [seconds], unit=human_seconds, chart_id="fleet-seconds")
        + "</div>"
    )
    return page("Delta tables: maintenance", body)


def _count(v: float) -> str:
    return f"{v:g}"


#: The table page's charts: id, title, (series name, history column) pairs, value format, and
#: whether the column is summed per run (else each row's state after its operation is a point).
TABLE_CHARTS: tuple[tuple[str, str, tuple[tuple[str, str], ...], Callable[[float], str], bool], ...] = (
    (
        "files",
        "live files and small files",
        (("live files", "live_files_after"), ("small files", "small_files_after")),
        _count,
        False,
    ),
    ("bytes", "table size", (("bytes", "table_bytes_after"),), human_bytes, False),
    (
        "log",
        "log length",
        (("commit files", "log_files_after"), ("versions since checkpoint", "versions_since_checkpoint_after")),
        _count,
        False,
    ),
    ("reclaimed", "bytes reclaimed per run", (("bytes reclaimed", "bytes_reclaimed"),), human_bytes, True),
    ("seconds", "maintenance time per run", (("seconds", "duration_s"),), human_seconds, True),
)


def _state_points(rows: list[dict[str, Any]], column: str) -> list[tuple[dt.datetime, float]]:
    return [(r["ended_at"], float(r[column])) for r in rows if r[column] is not None]


def _per_run(rows: list[dict[str, Any]], column: str) -> list[tuple[dt.datetime, float]]:
    """``column`` summed over each run's operations (measurements left out), at the run's first start."""
    runs: dict[str, tuple[dt.datetime, float]] = {}
    for r in rows:
        if r["operation"] == "measure":
            continue
        start, total = runs.get(r["run_id"], (r["started_at"], 0.0))
        runs[r["run_id"]] = (min(start, r["started_at"]), total + float(r[column] or 0))
    return sorted(runs.values())


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)


def settings_section(mine: list[dict[str, Any]], now: dt.datetime) -> str:
    """The table's maintenance settings as the newest fleet row recorded them: each value and its source."""
    recorded = [r for r in mine if r.get("policy")]
    if not recorded:
        return (
            '<p class="muted" id="settings-empty">No fleet run has recorded this table\'s settings yet '
            "(<code>deltalog policy TABLE</code> shows them).</p>"
        )
    newest = max(recorded, key=lambda r: r["started_at"])
    try:
        settings = json.loads(newest["policy"])
    except ValueError:
        return '<p class="muted" id="settings-empty">The recorded settings are not readable.</p>'
    rows = "".join(
        f'<tr data-setting="{esc(name)}"><td>{esc(name)}</td><td>{esc(_value(v.get("value")))}</td>'
        f"<td>{esc(((v.get('source') or '') + ' ' + (v.get('detail') or '')).strip())}</td></tr>"
        for name, v in settings.items()
        if isinstance(v, dict)
    )
    return (
        f'<p class="sub">As the {esc(newest["operation"].replace("_", " "))} of '
        f"{esc(ago(newest['started_at'], now))} recorded them: each setting's value and the layer it came "
        "from (per-table override, the table's property, a path rule, the fleet defaults, the default).</p>"
        f'<table id="settings"><thead><tr><th>setting</th><th>value</th><th>from</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )


def table_page(rows: pa.Table, *, table_uri: str, source: str, days: int, now: dt.datetime) -> str:
    """One table: its latest state, charts over time, and its recent history rows."""
    mine = rows.to_pylist()
    title = f"{short_name(table_uri)}: maintenance"
    crumbs = '<p class="sub"><a href="./" id="back">&larr; all tables</a></p>'
    if not mine:
        return page(
            title,
            crumbs + f"<h1>{esc(short_name(table_uri))}</h1>"
            f'<p class="empty" id="table-empty">No history for <code>{esc(table_uri)}</code> in the last {days} days.</p>',
        )
    overview: TableOverview = fleet_overview(rows)[0]
    m = overview.latest or overview.measured or mine[-1]
    charts = [
        line_chart(
            title,
            [Series(name, (_per_run if per_run else _state_points)(mine, column)) for name, column in lines],
            unit=unit,
            chart_id=chart_id,
        )
        for chart_id, title, lines, unit, per_run in TABLE_CHARTS
    ]
    recent = list(reversed(mine))[:50]
    cols = (
        "when",
        "operation",
        "status",
        "versions",
        "files read / written / removed",
        "reclaimed",
        "seconds",
        "reason",
        "by",
    )
    trs = []
    for r in recent:
        by = (
            f"{r['airflow_dag_id']} / {r['airflow_task_id']} (try {r['airflow_try_number']})"
            if r["airflow_dag_id"]
            else f"run {r['run_id'][:12]}"
        )
        trs.append(
            "<tr>"
            f"<td>{esc(r['started_at'].strftime('%Y-%m-%d %H:%M:%S'))}</td>"
            f"<td>{esc(r['operation'].replace('_', ' '))}</td>"
            f'<td><span class="st st-{esc(r["status"])}">{esc(r["status"].replace("_", " "))}</span></td>'
            f"<td>{esc(str(r['version_before']))} &rarr; {esc(str(r['version_after']))}</td>"
            f'<td class="num">{r["files_read"]} / {r["files_written"]} / {r["files_removed"]}</td>'
            f'<td class="num">{esc(human_bytes(r["bytes_reclaimed"]))}</td>'
            f'<td class="num">{r["duration_s"]:.2f}</td>'
            f'<td class="why">{"<br>".join(esc(line) for line in (r["reason"] or "").splitlines())}</td>'
            f"<td>{esc(by)}</td></tr>"
        )
    body = (
        crumbs
        + f"<h1>{esc(short_name(table_uri))}</h1>"
        + f'<p class="sub"><code id="table-uri">{esc(table_uri)}</code> &middot; table id '
        f"<code>{esc(overview.table_id or '-')}</code> &middot; history <code>{esc(source)}</code>, last {days} days</p>"
        + _tiles(
            [
                ("version", str(m.get("version_after", "-")), "version"),
                ("files", str(m.get("live_files_after", "-")), "live files"),
                ("small", str(m.get("small_files_after", "-")), "small files"),
                ("size", human_bytes(m.get("table_bytes_after")), "size"),
                ("since-checkpoint", str(m.get("versions_since_checkpoint_after", "-")), "versions since checkpoint"),
                ("due", ", ".join(overview.due) or "nothing", "due"),
            ]
        )
        + (f'<p class="why" id="why">{"<br>".join(esc(line) for line in overview.why)}</p>' if overview.due else "")
        + '<h2>Over time</h2><div class="charts" id="charts">'
        + "".join(charts)
        + "</div><h2>Settings</h2>"
        + settings_section(mine, now)
        + "<h2>Recent operations</h2>"
        + f'<table id="rows"><thead><tr>{"".join(f"<th>{c}</th>" for c in cols)}</tr></thead><tbody>{"".join(trs)}</tbody></table>'
    )
    return page(title, body)


__all__ = ["fleet_page", "human_bytes", "not_configured_page", "table_page"]
