"""The fleet summary for people: a text table for logs and terminals, a self-contained HTML page.

The HTML report has no external assets (inline CSS and SVG), so it can be attached
to an alert, archived next to the run's results or opened from a bucket as is. Each
table links to its history: its page in the fleet view (Airflow's "Delta tables" page)
when the view's address is given, else the query that reads its rows from the
maintenance history the run recorded into.
"""

from __future__ import annotations

import html
import time
from typing import Any
from urllib.parse import quote

from deltalog.fleet.maintain import table_name
from deltalog.storage.filesystem import canonical_uri

__all__ = ["format_summary", "history_link", "history_query", "render_html", "service_lines"]

COLUMNS = ("table", "status", "versions", "small files", "files", "reclaimed", "ran", "deferred / refused / error")


def _rows(result: dict[str, Any]) -> list[list[str]]:
    return [cells for _, cells in _table_rows(result)]


def _table_rows(result: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(table URI, the summary's cells) per table."""
    rows: list[tuple[str, list[str]]] = []
    for t in result.get("tables", []):
        versions = f"{t.get('version_before')} -> {t.get('version_after')}" if t.get("version_after") else "-"
        small = (
            f"{t.get('small_files_before')} -> {t.get('small_files_after')}"
            if t.get("small_files_after") is not None
            else "-"
        )
        files = f"{t.get('files_before')} -> {t.get('files_after')}" if t.get("files_after") is not None else "-"
        reclaimed = f"{t.get('bytes_reclaimed', 0)} B, {t.get('log_files_deleted', 0)} log"
        notes = "; ".join(t.get("deferred") or []) or (t.get("error") or "")
        rows.append(
            (
                t["uri"],
                [
                    table_name(t["uri"]),
                    t["status"],
                    versions,
                    small,
                    files,
                    reclaimed,
                    "; ".join(t.get("ran") or []),
                    notes,
                ],
            )
        )
    for uri in result.get("healthy", []):
        rows.append((uri, [table_name(uri), "healthy", "-", "-", "-", "-", "", "nothing due"]))
    for u in result.get("unreadable", []):
        rows.append((u["uri"], [table_name(u["uri"]), "unreadable", "-", "-", "-", "-", "", u.get("error", "")]))
    return rows


def history_query(history: str, uri: str) -> str:
    """The SQL (Spark SQL; DuckDB's ``delta_scan`` reads the same) that lists a table's history rows."""
    quoted = canonical_uri(uri).replace("'", "''")
    return f"SELECT * FROM delta.`{history}` WHERE table_uri = '{quoted}' ORDER BY started_at"


def history_link(uri: str, view_url: str) -> str:
    """The table's page in the fleet view at ``view_url`` (the plugin's ``/deltalog/`` address)."""
    return f"{view_url.rstrip('/')}/table?uri={quote(canonical_uri(uri), safe='')}"


def _name_cell(uri: str, name: str, result: dict[str, Any], view_url: str | None) -> str:
    if view_url:
        return f'<a href="{html.escape(history_link(uri, view_url))}">{html.escape(name)}</a>'
    if result.get("history"):
        query = history_query(str(result["history"]), uri)
        return f"{html.escape(name)}<details><summary>history</summary><code>{html.escape(query)}</code></details>"
    return html.escape(name)


def service_lines(result: dict[str, Any]) -> list[str]:
    """What the service levels did to the run: which objective put a table first, which breached tables
    stay breached (their work was deferred or failed) and whether the run met its ``finish_by``."""
    lines = []
    for t in result.get("tables", []):
        if t.get("first_because"):
            lines.append(f"first: {table_name(t['uri'])}: {t['first_because']}")
    for t in result.get("tables", []):
        if t.get("stays_breached"):
            why = "; ".join(t.get("deferred") or []) or t.get("error") or t.get("status", "")
            lines.append(f"stays breached: {table_name(t['uri'])}: {', '.join(t['stays_breached'])} ({why})")
    finish = result.get("finish_by")
    if isinstance(finish, dict):
        state = "met" if finish.get("met") else "MISSED"
        lines.append(
            f"finish_by {finish.get('objective')}: {state} (deadline {finish.get('deadline')}, ended {finish.get('ended_at')})"
        )
    return lines


def format_summary(result: dict[str, Any]) -> str:
    """A plain-text table of tables, what the service levels did, and the counts line."""
    rows = [list(COLUMNS), *_rows(result)]
    widths = [min(90, max(len(r[i]) for r in rows)) for i in range(len(COLUMNS))]
    lines = ["  ".join(c[:90].ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += service_lines(result)
    counts = ", ".join(f"{v} {k}" for k, v in sorted(result.get("counts", {}).items()) if v)
    budget = result.get("time_budget_seconds")
    lines.append(
        f"fleet run: {counts} in {result.get('seconds', 0):.1f} s"
        + (f" (budget {budget:g} s)" if budget else "")
        + f"; compaction throughput {result.get('throughput_bytes_per_second', 0) / 1e6:.1f} MB/s"
    )
    return "\n".join(lines)


def _bar_chart(title: str, bars: list[tuple[str, float, float]], unit: str) -> str:
    """A small inline SVG: per table, a grey bar (before) and a blue bar (after)."""
    if not bars:
        return ""
    top = max(max(b, a) for _, b, a in bars) or 1.0
    row_h, width, label_w = 22, 520, 150
    height = row_h * len(bars) + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + label_w + 60}" height="{height}" role="img">']
    parts.append(f'<text x="0" y="14" font-size="13" font-weight="bold">{html.escape(title)}</text>')
    for i, (label, before, after) in enumerate(bars):
        y = 24 + i * row_h
        wb, wa = width * before / top, width * after / top
        parts.append(f'<text x="0" y="{y + 13}" font-size="12">{html.escape(label[:22])}</text>')
        parts.append(f'<rect x="{label_w}" y="{y}" width="{wb:.1f}" height="8" fill="#bbb"/>')
        parts.append(f'<rect x="{label_w}" y="{y + 9}" width="{wa:.1f}" height="8" fill="#2b7bb9"/>')
        parts.append(
            f'<text x="{label_w + max(wb, wa) + 4:.1f}" y="{y + 14}" font-size="11">{before:g} -> {after:g} {unit}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def render_html(
    result: dict[str, Any], title: str = "deltalog fleet maintenance", *, view_url: str | None = None
) -> str:
    """The summary as one self-contained HTML page: counts, two charts, the table of tables, each table
    linked to its history (its page at ``view_url``, else the query of the run's history)."""
    tables = result.get("tables", [])
    small = [
        (table_name(t["uri"]), float(t["small_files_before"] or 0), float(t["small_files_after"] or 0))
        for t in tables
        if t.get("small_files_before") is not None and t.get("small_files_after") is not None
    ]
    reclaimed = [
        (table_name(t["uri"]), float(t.get("bytes_reclaimed") or 0), 0.0) for t in tables if t.get("bytes_reclaimed")
    ]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join(
        "<tr>"
        + f"<td>{_name_cell(uri, row[0], result, view_url)}</td>"
        + "".join(f"<td>{html.escape(c)}</td>" for c in row[1:])
        + "</tr>"
        for uri, row in _table_rows(result)
    )
    history = (
        f"<p>maintenance history: <code>{html.escape(str(result['history']))}</code>"
        + (f' (<a href="{html.escape(view_url)}">fleet view</a>)' if view_url else "")
        + "</p>"
        if result.get("history")
        else ""
    )
    warning = (
        f"<p><strong>history not fully written:</strong> {html.escape(str(result['history_error']))}</p>"
        if result.get("history_error")
        else ""
    )
    counts = ", ".join(f"{v} {html.escape(k)}" for k, v in sorted(result.get("counts", {}).items()) if v)
    service = "".join(f"<p>{html.escape(line)}</p>" for line in service_lines(result))
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(result.get("started_at") or time.time()))
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:left}}th{{background:#eee}}</style></head>
<body><h1>{html.escape(title)}</h1>
<p>run started {when}; {counts}; {result.get("seconds", 0):.1f} s
{f"(budget {result['time_budget_seconds']:g} s)" if result.get("time_budget_seconds") else ""}</p>
{history}{warning}{service}
{_bar_chart("small files: before (grey) / after (blue)", small, "files")}
{_bar_chart("bytes reclaimed by vacuum", reclaimed, "B")}
<table><tr>{head}</tr>{body}</table>
</body></html>
"""
