"""A table's page and a history row's page, rendered on the server.

A table's page draws from the table's per-day figures (a point and a band per day, never
a point per row), shows the newest row of each operation, the settings of its newest
fleet row (read alone, by its day and id), and its history rows a page at a time (only
the days holding that page are read). A row's page shows one row whole, each text up to
:data:`ROW_TEXT_CHARS`. Any value of any shape renders: a ``policy`` that is not the
JSON object a fleet run writes is shown as unreadable, with its text; a missing figure
is "-".
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any
from urllib.parse import urlencode

import pyarrow as pa

from deltalog_provider.fleet_view import html
from deltalog_provider.fleet_view.cost import Prices
from deltalog_provider.fleet_view.listing import compliance_label, objective_text, utc_time
from deltalog_provider.fleet_view.query import DEFAULT_DAYS, TableQuery
from deltalog_provider.fleet_view.timeseries import charts, table_charts

#: Characters of each text a row's page shows (and the row JSON returns).
ROW_TEXT_CHARS = 1 << 20
#: Characters of each text in a table's list of rows (the row's page has the rest).
LIST_TEXT_CHARS = 2000
#: The settings (``policy``) are read up to this length; longer ones are not shown.
POLICY_CHARS = 256 << 10
#: Settings shown at most.
MAX_SETTINGS = 200


def title_path(uri: str) -> str:
    """The last three segments of a table's path: its page's title."""
    parts = [p for p in (uri or "").rstrip("/").split("/") if p]
    return "/".join(parts[-3:]) or uri or "-"


def settings_rows(policy: Any) -> tuple[list[tuple[str, str, str]], str | None]:
    """(setting, value, source) rows of a ``policy`` text, and why it is unreadable when it is not the
    JSON object of settings a fleet run writes (rows whose entry is not an object are shown as they are)."""
    if not isinstance(policy, str):
        return [], "the recorded settings are not text"
    try:
        settings = json.loads(policy)
    except (ValueError, RecursionError):
        return [], "the recorded settings are not readable: not JSON"
    if not isinstance(settings, dict):
        kind = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}.get(
            type(settings), "null" if settings is None else type(settings).__name__
        )
        return [], f"the recorded settings are not readable: {kind}, not an object of settings"
    out = []
    odd = 0
    for name, entry in list(settings.items())[:MAX_SETTINGS]:
        if isinstance(entry, dict):
            source = " ".join(html.text(entry.get(k)) for k in ("source", "detail") if entry.get(k) not in (None, ""))
            out.append((str(name), _setting_value(entry.get("value")), source or "-"))
        else:
            odd += 1
            out.append((str(name), _setting_value(entry), "unreadable: not a setting with its source"))
    problem = f"{odd} of the recorded settings are not readable" if odd else None
    if len(settings) > MAX_SETTINGS:
        problem = (problem + "; " if problem else "") + f"{len(settings) - MAX_SETTINGS} more settings not shown"
    return out, problem


def _setting_value(value: Any) -> str:
    if isinstance(value, dict | list):
        try:
            return json.dumps(value)[:500]
        except (ValueError, RecursionError):
            return "unreadable"
    return html.text(value)[:500]


def settings_section(policy_row: dict[str, Any] | None, too_long: int | None, now: dt.datetime) -> str:
    if too_long:
        return f'<p class="muted" id="settings-empty">The recorded settings are {too_long:,} characters long: too long to show.</p>'
    if policy_row is None:
        return (
            '<p class="muted" id="settings-empty">No fleet run has recorded this table\'s settings yet '
            "(<code>deltalog policy TABLE</code> shows them).</p>"
        )
    rows, problem = settings_rows(policy_row.get("policy"))
    href = html.row_href(policy_row.get("run_date"), policy_row.get("row_id"))
    link = f' <a href="{html.esc(href)}">the row</a>' if href else ""
    if not rows:
        return (
            f'<p class="muted" id="settings-unreadable">{html.esc(problem or "no settings recorded")}:{link}</p>'
            f"<pre>{html.esc(html.text(policy_row.get('policy'))[:2000])}</pre>"
        )
    body = "".join(
        f'<tr data-setting="{html.esc(name)}"><td>{html.esc(name)}</td><td>{html.esc(value)}</td><td>{html.esc(source)}</td></tr>'
        for name, value, source in rows
    )
    note = f'<p class="notice">{html.esc(problem)}</p>' if problem else ""
    return (
        f'<p class="sub">As the {html.esc(html.text(policy_row.get("operation")).replace("_", " "))} of '
        f"{html.esc(html.ago(html.as_utc(policy_row.get('started_at')), now))} recorded them{link}: each setting's value and the "
        "layer it came from (per-table override, the table's property, a path rule, the fleet defaults, the default).</p>"
        + note
        + '<table id="settings"><thead><tr><th>setting</th><th>value</th><th>from</th></tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


def _pager(query: TableQuery, total: int, shown: int, suffix: str = "") -> str:
    def href(p: int) -> str:
        return html.table_href(query.uri, days=query.days if query.days != DEFAULT_DAYS else None, page=p) + "#rows"

    return html.pager(
        "rows, newest first:",
        page=query.page,
        limit=query.limit,
        total=total,
        shown=shown,
        href=href,
        words=("newer", "older"),
        suffix=suffix,
    )


def _by(r: dict[str, Any]) -> str:
    if r.get("airflow_dag_id"):
        return f"{html.text(r.get('airflow_dag_id'))} / {html.text(r.get('airflow_task_id'))} (try {html.text(r.get('airflow_try_number'))})"
    return f"run {html.text(r.get('run_id'))[:24]}"


def _rows_table(rows: list[dict[str, Any]]) -> str:
    cols = (
        "when",
        "operation",
        "status",
        "versions",
        "files read / written / removed",
        "reclaimed",
        "seconds",
        "CPU",
        "reason",
        "by",
    )
    trs = []
    for r in rows:
        href = html.row_href(r.get("run_date"), r.get("row_id"))
        when = html.esc(html.text(html.as_utc(r.get("started_at"))))
        trs.append(
            "<tr>"
            + (f'<td><a href="{html.esc(href)}">{when}</a></td>' if href else f"<td>{when}</td>")
            + f"<td>{html.esc(html.text(r.get('operation')).replace('_', ' '))}</td>"
            f"<td>{html.badge(r.get('status'))}</td>"
            f"<td>{html.esc(html.text(r.get('version_before')))} &rarr; {html.esc(html.text(r.get('version_after')))}</td>"
            f'<td class="num">{html.count(r.get("files_read"))} / {html.count(r.get("files_written"))} / {html.count(r.get("files_removed"))}</td>'
            f'<td class="num">{html.esc(html.human_bytes(r.get("bytes_reclaimed")))}</td>'
            f'<td class="num">{html.esc(html.human_seconds(r.get("duration_s")))}</td>'
            f'<td class="num">{html.esc(html.human_seconds(r.get("cpu_s")))}</td>'
            f'<td class="why">{html.excerpt(r.get("reason"), r.get("reason_chars"), href=href)}</td>'
            f'<td class="why">{html.esc(_by(r)[:200])}</td></tr>'
        )
    return (
        f'<table id="rows"><thead><tr>{"".join(f"<th>{c}</th>" for c in cols)}</tr></thead>'
        f"<tbody>{''.join(trs)}</tbody></table>"
    )


def _lasts_table(summary: dict[str, Any], now: dt.datetime) -> str:
    lasts = [x for x in summary.get("lasts") or [] if x]
    if not lasts:
        return ""
    trs = []
    for x in lasts:
        href = html.row_href(x.get("day"), x.get("id"))
        trs.append(
            f'<tr data-operation="{html.esc(x.get("operation"))}"><td>{html.esc(html.text(x.get("operation")).replace("_", " "))}</td>'
            f"<td>{html.badge(x.get('status'))}</td><td>{html.esc(html.ago(html.as_utc(x.get('at')), now))}</td>"
            f'<td class="why">{html.excerpt(x.get("reason"), x.get("reason_chars"), href=href)}</td></tr>'
        )
    return (
        '<table id="lasts"><thead><tr><th>operation</th><th>newest row</th><th>when</th><th>reason</th></tr></thead>'
        f"<tbody>{''.join(trs)}</tbody></table>"
    )


def objectives_section(summary: dict[str, Any], now: dt.datetime) -> str:
    """Each objective the table set at its newest judgement: target, value, state (breached since), source."""
    objectives = [o for o in summary.get("objectives") or [] if o]
    if not objectives:
        return ""
    href = html.row_href(summary.get("judged_day"), summary.get("judged_id"))
    when = html.esc(html.ago(html.as_utc(summary.get("judged_at")), now))
    link = f'<a href="{html.esc(href)}">{when}</a>' if href else when
    rows = []
    for o in objectives:
        name = html.text(o.get("name"))
        met = o.get("met")
        if met is False:
            state = html.badge("breached")
        elif met is True:
            state = html.badge("at_risk", "met, at risk") if o.get("at_risk") else html.badge("met")
        else:
            state = html.badge("unknown")
        since = utc_time(o.get("breached_since")) if met is False else ""
        rows.append(
            f'<tr data-objective="{html.esc(name)}"><td>{html.esc(name)}</td>'
            f'<td class="num">{html.esc(objective_text(name, o.get("target")))}</td>'
            f'<td class="num">{html.esc(objective_text(name, o.get("value")))}</td>'
            f"<td>{state}</td><td>{html.esc(since)}</td>"
            f'<td class="why">{html.excerpt(o.get("source"), chars=200)}</td></tr>'
        )
    return (
        f'<h2>Objectives</h2><p class="sub" id="compliance">{html.badge(summary.get("compliance"), compliance_label(summary))} '
        f"at the newest measurement ({link}); a breach's start is the history's "
        "(the last 90 days or the window, whichever is longer).</p>"
        '<table id="objectives"><thead><tr><th>objective</th><th>target</th><th>value</th><th>state</th>'
        f"<th>breached since</th><th>target from</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def table_page(
    summary: dict[str, Any] | None,
    days_table: pa.Table,
    rows: list[dict[str, Any]],
    total_rows: int,
    *,
    query: TableQuery,
    source: str,
    since: dt.date,
    until: dt.date,
    now: dt.datetime,
    prices: Prices,
    settings: str,
    notices: list[str],
) -> str:
    """One table: its latest state, what is due and why, charts per day, settings, a page of its rows."""
    uri = query.uri
    name = title_path(uri)
    back = "./" + (f"?{urlencode({'days': query.days})}" if query.days != DEFAULT_DAYS else "")
    crumbs = f'<p class="sub"><a href="{html.esc(back)}" id="back">&larr; all tables</a></p>'
    head = (
        crumbs
        + f'<h1 class="path">{html.esc(name)}</h1>'
        + f'<p class="sub"><code id="table-uri">{html.esc(uri)}</code> &middot; table id '
        f"<code>{html.esc(html.text((summary or {}).get('table_id')))}</code> &middot; history <code>{html.esc(source)}</code>, "
        f"{html.esc(since.isoformat())} to {html.esc(until.isoformat())}</p>"
        + "".join(f'<p class="notice">{html.esc(n)}</p>' for n in notices)
    )
    if summary is None:
        return html.page(
            f"{name}: maintenance",
            head
            + f'<p class="empty" id="table-empty">No history for <code>{html.esc(uri)}</code> in the last {query.days} days.</p>',
        )
    measured = summary.get("measured_status")
    due = summary.get("due") or []
    due_tile = (
        "unreadable"
        if measured == "failed"
        else "refused"
        if measured == "refused"
        else ", ".join(html.text(d) for d in due) or ("nothing" if summary.get("measured_at") else "not measured")
    )
    version = summary.get("version")
    items: list[tuple[str, str, str, str | None]] = [
        ("status", html.text(summary.get("status")), "status", None),
        ("version", html.text(version) if isinstance(version, int) else "-", "version", None),
        ("files", html.count(summary.get("live_files_after")), "live files", None),
        ("small", html.count(summary.get("small_files_after")), "small files", None),
        ("size", html.human_bytes(summary.get("table_bytes_after")), "size", None),
        (
            "since-checkpoint",
            html.count(summary.get("versions_since_checkpoint_after")),
            "versions since checkpoint",
            None,
        ),
        ("dv", html.share(summary.get("dv_share_after")), "DV share", None),
        ("due", due_tile, "due", None),
        *(
            [("objectives", compliance_label(summary), "objectives", "#objectives")]
            if summary.get("compliance") not in (None, "none")
            else []
        ),
        ("cpu", html.human_seconds(summary.get("cpu_s")), f"CPU in {query.days} d", None),
        ("reclaimed", html.human_bytes(summary.get("bytes_reclaimed")), f"reclaimed in {query.days} d", None),
    ]
    if prices.any:
        items.append(("cost", prices.money(summary.get("cost")), f"cost of {query.days} d", None))
    if prices.gb_month is not None:
        items.append(("storage", prices.money(summary.get("storage_cost_month")), "storage per month", None))
        items.append(("saved", prices.money(summary.get("saved_month")), "saved per month by vacuum", None))
    why = "\n".join(html.text(line) for line in summary.get("why") or [])
    measure_href = html.row_href(summary.get("measured_day"), summary.get("measured_id"))
    why_html = f'<p class="why" id="why">{html.excerpt(why, href=measure_href, chars=600)}</p>' if why else ""
    if measured in ("failed", "refused"):
        last_measure: dict[str, Any] = next(
            (x for x in summary.get("lasts") or [] if x and x.get("operation") == "measure"), {}
        )
        why_html = (
            f'<p class="why" id="why">{html.badge(measured, "unreadable" if measured == "failed" else "refused")} '
            f"{html.excerpt(last_measure.get('reason'), last_measure.get('reason_chars'), href=measure_href, chars=600)}</p>"
        )
    body = (
        head
        + html.tiles(items)
        + why_html
        + objectives_section(summary, now)
        + "<h2>Newest row of each operation</h2>"
        + _lasts_table(summary, now)
        + '<h2>Over time</h2><div class="charts" id="charts">'
        + charts(table_charts(days_table), days_table, prices)
        + "</div><h2>Settings</h2>"
        + settings
        + '<h2 id="rows-title">History rows</h2>'
        + _pager(query, total_rows, len(rows))
        + _rows_table(rows)
        + _pager(query, total_rows, len(rows), "-bottom")
    )
    return html.page(f"{name}: maintenance", body)


def row_page(rows: list[dict[str, Any]], *, day: dt.date, row_id: str, source: str) -> str:
    """One history row, every column, each text up to :data:`ROW_TEXT_CHARS` characters."""
    title = f"history row {row_id[:40]}"
    if not rows:
        return html.page(
            title,
            f'<p class="sub"><a href="./" id="back">&larr; all tables</a></p><h1>{html.esc(title)}</h1>'
            f'<p class="empty" id="row-empty">No row {html.esc(row_id)} on {html.esc(day.isoformat())} in <code>{html.esc(source)}</code>.</p>',
        )
    row = rows[0]
    uri = row.get("table_uri")
    back = (
        f'<a href="{html.esc(html.table_href(str(uri)))}" id="back">&larr; {html.esc(title_path(str(uri)))}</a>'
        if isinstance(uri, str)
        else ""
    )
    trs = []
    for name, value in row.items():
        if name.endswith("_chars") or name.endswith("_count"):
            continue
        chars = row.get(f"{name}_chars")
        shown = html.text(html.as_utc(value)) if isinstance(value, dt.datetime) else html.text(value)
        note = ""
        if isinstance(chars, int) and isinstance(value, str) and chars > len(value):
            note = f'<p class="muted">the first {len(value):,} of {chars:,} characters</p>'
        items = row.get(f"{name}_count")
        if isinstance(items, int) and isinstance(value, list) and items > len(value):
            note = f'<p class="muted">the first {len(value):,} of {items:,} items</p>'
        cell = (
            f"<pre>{html.esc(shown)}</pre>"
            if isinstance(value, str) and ("\n" in value or len(value) > 120)
            else html.esc(shown)
        )
        trs.append(f'<tr data-column="{html.esc(name)}"><th>{html.esc(name)}</th><td>{cell}{note}</td></tr>')
    if "policy" in row and row.get("policy") is not None:
        settings, problem = settings_rows(row.get("policy"))
        verdict = problem or f"{len(settings)} settings, readable"
        trs.append(f'<tr data-column="policy-verdict"><th>policy, read</th><td>{html.esc(verdict)}</td></tr>')
    extra = (
        f'<p class="notice">{len(rows)} rows of this day share this id; the first is shown.</p>'
        if len(rows) > 1
        else ""
    )
    return html.page(
        title,
        f'<p class="sub">{back}</p><h1>{html.esc(title)}</h1><p class="sub">{html.esc(day.isoformat())}, history <code>{html.esc(source)}</code></p>'
        + extra
        + f'<table id="row"><tbody>{"".join(trs)}</tbody></table>',
    )


def jsonable(value: Any) -> Any:
    """A value of a row or figure as JSON can hold it: times ISO 8601, non-finite numbers null."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        stamp = html.as_utc(value)
        return stamp.isoformat() if stamp else None
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float):
        return value if html.number(value) is not None else None
    if isinstance(value, bytes):
        return None
    return value


__all__ = [
    "LIST_TEXT_CHARS",
    "POLICY_CHARS",
    "ROW_TEXT_CHARS",
    "jsonable",
    "objectives_section",
    "row_page",
    "settings_rows",
    "settings_section",
    "table_page",
    "title_path",
]
