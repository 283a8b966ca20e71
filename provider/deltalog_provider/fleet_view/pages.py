"""The fleet page, rendered on the server from the window's listing and per-day figures.

Plain HTML with inline CSS and the SVG charts of :mod:`.charts`: no script, no external
asset, nothing fetched by the browser but the page itself, so it works inside Airflow's
sandboxed iframe, behind a proxy and on a closed network. Filters are a plain form (GET),
sorting is a link per column header, and every figure tile is a link to the tables it
counts: the failing, refused or most expensive tables are two clicks away (the tile, then
the table). A page shows at most :data:`~.query.FLEET_PAGE_TABLES` tables, whatever the
fleet's size. Every value from the history is escaped (:mod:`.html`).
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlencode

import pyarrow as pa
import pyarrow.compute as pc

from deltalog_provider.fleet_view import html
from deltalog_provider.fleet_view.cost import Prices
from deltalog_provider.fleet_view.listing import (
    COLUMNS,
    FILTERS,
    Context,
    groups,
    operations_run,
    sets_objectives,
    shows_writers,
    sort_link,
    utc_time,
)
from deltalog_provider.fleet_view.query import FleetQuery
from deltalog_provider.fleet_view.timeseries import FLEET_CHARTS, charts

#: Open problems listed by name on the fleet page (the rest: one click, the status filter).
LISTED_PROBLEMS = 20
#: Folders listed in the "by folder" section.
LISTED_GROUPS = 200
WINDOWS = (7, 30, 90, 366)


def _href(query: FleetQuery, **changes: Any) -> str:
    params = query.params(**changes)
    return "./" + (f"?{urlencode(params)}" if params else "")


def _sum(table: pa.Table, column: str) -> float | None:
    values = [v for v in table.column(column).to_pylist() if isinstance(v, int | float)]
    return sum(values) if values else None


def _count_status(listing: pa.Table, status: str, column: str = "status") -> int:
    return sum(1 for s in listing.column(column).to_pylist() if s == status)


#: Missed finishing times listed on the fleet page (the newest per day; the chart counts them all).
LISTED_MISSES = 20


def missed_finish_by(days_table: pa.Table) -> list[dict[str, Any]]:
    """The window's missed ``finish_by``, newest first: per day the newest miss and how many there were."""
    out = []
    for row in days_table.to_pylist():
        missed = row.get("missed")
        if isinstance(missed, dict) and missed.get("at") is not None:
            out.append({**missed, "count": row.get("finish_by_missed") or 1})
    out.sort(key=lambda m: str(html.as_utc(m.get("at")) or ""), reverse=True)
    return out


def _misses_section(days_table: pa.Table, now: dt.datetime) -> str:
    misses = missed_finish_by(days_table)
    if not misses:
        return ""
    items = []
    for m in misses[:LISTED_MISSES]:
        href = html.row_href(m.get("day"), m.get("id"))
        late = ""
        ended, deadline = html.as_utc(m.get("ended_at")), html.as_utc(m.get("deadline"))
        if ended and deadline:
            try:
                late = f", {html.human_seconds((ended - deadline).total_seconds())} late"
            except OverflowError:
                late = ""
        what = (
            f"{html.esc(html.text(m.get('finish_by'))[:120])}: ended {html.esc(utc_time(ended))}, "
            f"deadline {html.esc(utc_time(deadline))}{html.esc(late)}"
        )
        more = f' <span class="muted">({int(m["count"]):,} that day)</span>' if m.get("count", 1) > 1 else ""
        link = f'<a href="{html.esc(href)}">{what}</a>' if href else what
        items.append(
            f'<li>{html.badge("missed")} {link} <span class="muted path">{html.esc(html.text(m.get("fleet"))[:200])}</span>{more}</li>'
        )
    rest = f'<p class="muted">and {len(misses) - LISTED_MISSES:,} more days</p>' if len(misses) > LISTED_MISSES else ""
    return f'<h2>Missed finishing times</h2><ul id="missed-finish-by">{"".join(items)}</ul>{rest}'


def _filters_form(query: FleetQuery) -> str:
    fields = []
    for f in FILTERS:
        value = query.filters.get(f.param, "")
        if f.options:
            options = "".join(
                f'<option value="{html.esc(v)}"{" selected" if v == value else ""}>{html.esc(label)}</option>'
                for v, label in f.options
            )
            if value and value not in {v for v, _ in f.options}:
                options += f'<option value="{html.esc(value)}" selected>{html.esc(value)}</option>'
            fields.append(f'<label>{html.esc(f.label)}<select name="{html.esc(f.param)}">{options}</select></label>')
        else:
            fields.append(
                f'<label>{html.esc(f.label)}<input name="{html.esc(f.param)}" value="{html.esc(value)}" size="24" maxlength="2048">'
                "</label>"
            )
    hidden = "".join(
        f'<input type="hidden" name="{k}" value="{html.esc(v)}">'
        for k, v in query.params(page=1).items()
        if k in ("days", "sort", "order")
    )
    clear = f' <a href="{html.esc(_href(FleetQuery(days=query.days)))}" id="clear">clear</a>' if query.filters else ""
    return f'<form class="filters" id="filters" method="get" action="./">{"".join(fields)}{hidden}<button type="submit">show</button>{clear}</form>'


def _pager(query: FleetQuery, matching: int, shown: int, suffix: str = "") -> str:
    return html.pager(
        "tables",
        page=query.page,
        limit=query.limit,
        total=matching,
        shown=shown,
        href=lambda p: _href(query, page=p),
        suffix=suffix,
    )


def _problems(listing: pa.Table, status: str, list_id: str, empty: str, query: FleetQuery, now: dt.datetime) -> str:
    """The newest open problems of one kind, by table (at most :data:`LISTED_PROBLEMS`; all by the filter)."""
    wanted = status.split("|")
    open_lists = [pc.greater(pc.list_value_length(listing.column(f"open_{s}")), 0) for s in wanted]
    mask = open_lists[0] if len(open_lists) == 1 else pc.or_(*open_lists)
    items = []
    for row in listing.filter(pc.fill_null(mask, False)).select(["table_uri", "path", "lasts"]).to_pylist():
        for last in row.get("lasts") or []:
            if last and last.get("status") in wanted:
                items.append((row, last))
    if not items:
        return f'<p class="muted" id="{list_id}">{html.esc(empty)}</p>'
    items.sort(key=lambda x: str(x[1].get("at") or ""), reverse=True)
    lis = []
    for row, last in items[:LISTED_PROBLEMS]:
        link = f'<a href="table?uri={html.esc(_quote(row["table_uri"]))}" data-table="{html.esc(row["table_uri"])}">{html.esc(row.get("path"))}</a>'
        why = html.excerpt(
            last.get("reason"), last.get("reason_chars"), href=html.row_href(last.get("day"), last.get("id"))
        )
        lis.append(
            f"<li>{link} {html.esc(html.text(last.get('operation')).replace('_', ' '))}: {html.badge(last.get('status'))} "
            f'<span class="muted">{html.esc(html.ago(last.get("at"), now))}</span> <span class="why">{why}</span></li>'
        )
    more = ""
    if len(items) > LISTED_PROBLEMS:
        kind = "problem" if "|" in status else status
        more = f'<p><a href="{html.esc(_href(query, page=1, filters={**query.filters, "status": kind}))}">{len(items):,} in all: their tables &rarr;</a></p>'
    return f'<ul id="{list_id}">{"".join(lis)}</ul>{more}'


def _quote(uri: Any) -> str:
    from urllib.parse import quote

    return quote(str(uri or ""), safe="")


def _groups_section(listing: pa.Table, prices: Prices, query: FleetQuery) -> str:
    rows = groups(listing, prices)
    if not rows:
        return ""
    head = "<tr><th>folder</th><th>tables</th><th>failed</th><th>refused</th><th>deferred</th><th>due</th><th>size</th>"
    head += "<th>cost</th></tr>" if prices.any else "</tr>"
    body = []
    for g in rows[:LISTED_GROUPS]:
        href = _href(FleetQuery(days=query.days, sort=query.sort, order=query.order, filters={"prefix": g["folder"]}))
        cells = [
            f'<td><a href="{html.esc(href)}" data-prefix="{html.esc(g["folder"])}" class="path">{html.esc(g["group"] or g["folder"] or "-")}</a></td>',
            *(
                f'<td class="num">{html.count(g[f"{k}_sum"])}</td>'
                for k in ("tables", "failed", "refused", "deferred", "due")
            ),
            f'<td class="num">{html.esc(html.human_bytes(g["bytes_sum"]))}</td>',
        ]
        if prices.any:
            cells.append(f'<td class="num">{html.esc(prices.money(g["cost_sum"]))}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    more = f'<p class="muted">and {len(rows) - LISTED_GROUPS:,} more folders</p>' if len(rows) > LISTED_GROUPS else ""
    return (
        f'<details id="groups"{" open" if len(rows) <= 12 else ""}><summary>by folder ({len(rows):,})</summary>'
        f'<table id="group-table"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>{more}</details>'
    )


def fleet_page(
    listing: pa.Table,
    chosen: pa.Table,
    shown: pa.Table,
    days_table: pa.Table,
    *,
    query: FleetQuery,
    source: str,
    since: dt.date,
    until: dt.date,
    now: dt.datetime,
    prices: Prices,
    notices: list[str],
) -> str:
    """The fleet at a glance: tiles that filter (of the whole ``listing``), the page ``shown`` of the tables the
    filters keep (``chosen``), their open problems, the folders, the charts."""
    matching = chosen.num_rows
    ctx = Context(now, prices, query, operations_run(listing), sets_objectives(listing), shows_writers(listing))
    columns = [c for c in COLUMNS if c.shown(ctx)]
    rows_total = _sum(listing, "rows") or 0
    windows = " ".join(
        f"<b>{d} days</b>" if d == query.days else f'<a href="{html.esc(_href(query, days=d, page=1))}">{d} days</a>'
        for d in WINDOWS
    )
    base = FleetQuery(days=query.days)
    tile_items: list[tuple[str, str, str, str | None]] = [
        ("tables", f"{listing.num_rows:,}", "tables", _href(base)),
        ("failed", f"{_count_status(listing, 'failed'):,}", "failing", _href(base, filters={"status": "failed"})),
        ("refused", f"{_count_status(listing, 'refused'):,}", "refused", _href(base, filters={"status": "refused"})),
        (
            "deferred",
            f"{_count_status(listing, 'deferred'):,}",
            "deferred",
            _href(base, filters={"status": "deferred"}),
        ),
        ("due", f"{_count_status(listing, 'due'):,}", "due now", _href(base, filters={"status": "due"})),
    ]
    if ctx.objectives:  # the breached tables: the tile, then the table (oldest breach first)
        for state, label in (("breached", "breach an objective"), ("at_risk", "at risk of a breach")):
            tile_items.append(
                (
                    state.replace("_", "-"),
                    f"{_count_status(listing, state, 'compliance'):,}",
                    label,
                    _href(base, filters={"objectives": state}, sort="compliance", order="asc"),
                )
            )
    tile_items += [
        (
            "reclaimed",
            html.human_bytes(_sum(listing, "bytes_reclaimed")),
            f"reclaimed in {query.days} d",
            _href(base, sort="reclaimed", order="desc"),
        ),
        (
            "cpu",
            html.human_seconds(_sum(listing, "cpu_s")),
            f"CPU in {query.days} d",
            _href(base, sort="cpu", order="desc"),
        ),
    ]
    if prices.any:
        tile_items.append(
            (
                "cost",
                prices.money(_sum(listing, "cost")),
                f"cost of {query.days} d: most expensive first",
                _href(base, sort="cost", order="desc"),
            )
        )
    if prices.gb_month is not None:
        tile_items.append(("saved", prices.money(_sum(listing, "saved_month")), "saved per month by vacuum", None))
    head = "".join(
        f'<th data-column="{html.esc(c.key)}"{" class=num" if c.numeric else ""}>{sort_link(c, query)}</th>'
        for c in columns
    )
    body_rows = []
    for row in shown.to_pylist():
        cells = "".join(f"<td{' class=num' if c.numeric else ''}>{c.cell(row, ctx)}</td>" for c in columns)
        body_rows.append(f'<tr data-table="{html.esc(row.get("table_uri"))}">{cells}</tr>')
    if shown.num_rows:
        table_html = (
            _pager(query, matching, shown.num_rows)
            + f'<div style="overflow-x:auto"><table id="tables"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body_rows)}</tbody></table></div>" + _pager(query, matching, shown.num_rows)
        )
    elif listing.num_rows:
        table_html = '<p class="empty" id="tables-empty">No table matches these filters.</p>'
    else:
        table_html = '<p class="empty" id="tables-empty">No maintenance recorded in this window yet.</p>'
    body = (
        "<h1>Delta tables: maintenance</h1>"
        f'<p class="sub">From the maintenance history <code>{html.esc(source)}</code>, {html.esc(since.isoformat())} to '
        f"{html.esc(until.isoformat())} ({int(rows_total):,} rows); rendered {html.esc(now.strftime('%Y-%m-%d %H:%M'))} UTC. "
        f"Window: {windows}</p>"
        + "".join(f'<p class="notice">{html.esc(n)}</p>' for n in notices)
        + html.tiles(tile_items)
        + _filters_form(query)
        + table_html
        + _groups_section(listing, prices, query)
        + "<h2>Deferred work</h2>"
        + _problems(chosen, "deferred", "deferred", "Nothing deferred: every due operation ran.", query, now)
        + "<h2>Refusals and failures</h2>"
        + _problems(chosen, "refused|failed", "refusals", "No refusal or failure.", query, now)
        + _misses_section(days_table, now)
        + '<h2>The fleet over time</h2><div class="charts" id="fleet-charts">'
        + charts(FLEET_CHARTS, days_table, prices)
        + "</div>"
    )
    return html.page("Delta tables: maintenance", body)


__all__ = ["LISTED_MISSES", "LISTED_PROBLEMS", "fleet_page", "missed_finish_by"]
