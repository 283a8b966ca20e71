"""The fleet summary for people: a text table for logs and terminals, a self-contained HTML page.

The HTML report has no external assets (inline CSS and SVG), so it can be attached
to an alert, archived next to the run's results or opened from a bucket as is.
"""

from __future__ import annotations

import html
import time
from typing import Any

from deltalog.fleet.maintain import table_name

__all__ = ["format_summary", "render_html"]

COLUMNS = ("table", "status", "versions", "small files", "files", "reclaimed", "ran", "deferred / refused / error")


def _rows(result: dict[str, Any]) -> list[list[str]]:
    rows = []
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
            [table_name(t["uri"]), t["status"], versions, small, files, reclaimed, "; ".join(t.get("ran") or []), notes]
        )
    for uri in result.get("healthy", []):
        rows.append([table_name(uri), "healthy", "-", "-", "-", "-", "", "nothing due"])
    for u in result.get("unreadable", []):
        rows.append([table_name(u["uri"]), "unreadable", "-", "-", "-", "-", "", u.get("error", "")])
    return rows


def format_summary(result: dict[str, Any]) -> str:
    """A plain-text table of tables plus the counts line."""
    rows = [list(COLUMNS), *_rows(result)]
    widths = [min(90, max(len(r[i]) for r in rows)) for i in range(len(COLUMNS))]
    lines = ["  ".join(c[:90].ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
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


def render_html(result: dict[str, Any], title: str = "deltalog fleet maintenance") -> str:
    """The summary as one self-contained HTML page: counts, two charts, the table of tables."""
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
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in _rows(result))
    counts = ", ".join(f"{v} {html.escape(k)}" for k, v in sorted(result.get("counts", {}).items()) if v)
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(result.get("started_at") or time.time()))
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:left}}th{{background:#eee}}</style></head>
<body><h1>{html.escape(title)}</h1>
<p>run started {when}; {counts}; {result.get("seconds", 0):.1f} s
{f"(budget {result['time_budget_seconds']:g} s)" if result.get("time_budget_seconds") else ""}</p>
{_bar_chart("small files: before (grey) / after (blue)", small, "files")}
{_bar_chart("bytes reclaimed by vacuum", reclaimed, "B")}
<table><tr>{head}</tr>{body}</table>
</body></html>
"""
