"""The pages' shared parts: layout and style, and how any value from the history becomes safe text.

Every value that reaches a page went through :func:`esc` (or a helper built on it): table
URIs, reasons, settings, run ids, whatever their shape. A text longer than a cell can show
is cut to an excerpt, with the rest one click away (:func:`excerpt`: a ``<details>``
element holding up to :data:`DETAILS_CHARS`, and a link to the row's own page holding all
of it up to its bound). A missing or non-finite number is "-", never "None" or "nan".
"""

from __future__ import annotations

import datetime as dt
import html
import math
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote, urlencode

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:16px 20px;color:#1a1a1a;font-size:14px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:22px 0 8px}
.sub{color:#555;margin:0 0 14px}.tiles{display:flex;gap:10px;flex-wrap:wrap;margin:8px 0 14px}
.tile{border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:92px;color:inherit;display:block}
a.tile:hover{border-color:#0b5cad;text-decoration:none}
.tile b{display:block;font-size:20px}.tile span{color:#555;font-size:12px}
table{border-collapse:collapse;font-size:13px;width:100%}
th,td{border-bottom:1px solid #e3e3e3;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#f5f5f5;font-weight:600;position:sticky;top:0}th a{color:inherit}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.st{border-radius:10px;padding:1px 7px;font-size:12px;white-space:nowrap}
.st-done,.st-ok{background:#e3f4e3}.st-nothing_due{background:#eee}.st-deferred,.st-due{background:#fff1c9}
.st-refused{background:#fde2e2}.st-failed{background:#f8c9c9}.due{background:#fff1c9}
.st-met{background:#e3f4e3}.st-at_risk{background:#fff1c9}.st-breached,.st-missed{background:#f8c9c9;font-weight:600}
.st-unknown{background:#eee}
.why{color:#444;font-size:12px;max-width:420px;overflow-wrap:anywhere}.muted{color:#777}
.path{overflow-wrap:anywhere}#tables td:first-child{min-width:190px}#tables td:nth-child(2){min-width:120px}
#tables td:nth-child(4){min-width:220px}#tables td{white-space:normal}
details summary{cursor:pointer;color:#0b5cad;font-size:12px}details pre{white-space:pre-wrap;max-height:300px;overflow:auto}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f7f7f7;padding:8px;border-radius:4px}
.charts{display:flex;flex-wrap:wrap;gap:14px}.chart{border:1px solid #e3e3e3;border-radius:6px;background:#fff}
.chart-title{font-size:13px;font-weight:600}.tick,.legend{font-size:11px;fill:#444}
.chart-empty{font-size:12px;fill:#777}.grid{stroke:#eee}
a{color:#0b5cad;text-decoration:none}a:hover{text-decoration:underline}
.empty{border:1px dashed #bbb;border-radius:6px;padding:14px;color:#444;max-width:760px}
.notice{border:1px solid #e0b252;background:#fff8e6;border-radius:6px;padding:8px 12px;margin:8px 0}
code{background:#f3f3f3;padding:1px 4px;border-radius:3px;overflow-wrap:anywhere}
form.filters{display:flex;flex-wrap:wrap;gap:8px;align-items:end;margin:8px 0 12px}
form.filters label{display:flex;flex-direction:column;font-size:12px;color:#555}
.pager{margin:8px 0;color:#555}#row th{width:220px}#row pre{max-height:600px;overflow:auto;margin:0}.pager a,.pager b{margin-right:8px}
"""

#: Characters of a text shown in a cell; the rest is behind a click.
CELL_CHARS = 160
#: Characters a ``<details>`` element holds (the row's page holds more).
DETAILS_CHARS = 4000


def esc(value: Any) -> str:
    """Any value as escaped text (quotes included: safe in attributes too)."""
    return html.escape(value if isinstance(value, str) else text(value), quote=True)


def text(value: Any) -> str:
    """Any value as plain text: "-" for missing or non-finite numbers, lists joined, the rest ``str``."""
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return "-"
    if isinstance(value, list | tuple):
        return ", ".join(text(v) for v in value) or "-"
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


def number(value: Any) -> float | None:
    """A finite number, or None (missing, not a number, NaN or infinite)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        as_float = float(value)
    except OverflowError:  # an integer beyond any double
        return None
    return as_float if math.isfinite(as_float) else None


def as_utc(value: Any) -> dt.datetime | None:
    """A timestamp as an aware UTC datetime (DuckDB hands rollup times back in the server's zone)."""
    if not isinstance(value, dt.datetime):
        return None
    return value.astimezone(dt.UTC) if value.tzinfo else value.replace(tzinfo=dt.UTC)


def human_bytes(n: Any) -> str:
    value = number(n)
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} PiB"


def count(n: Any) -> str:
    value = number(n)
    if value is None:
        return "-"
    return f"{value:,.0f}" if value == int(value) else f"{value:,.2f}"


def share(n: Any) -> str:
    value = number(n)
    return "-" if value is None else f"{value:.1%}"


def human_seconds(n: Any) -> str:
    s = number(n)
    if s is None:
        return "-"
    if abs(s) < 120:
        return f"{s:.3g} s"
    if abs(s) < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def ago(when: Any, now: dt.datetime) -> str:
    if not isinstance(when, dt.datetime):
        return "-"
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    try:
        seconds = max(0.0, (now - when).total_seconds())
    except OverflowError:
        return "-"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"


def row_href(day: Any, row_id: Any) -> str | None:
    """The link to one history row's page (None without a day or id to find it by)."""
    if not isinstance(day, dt.date) or not isinstance(row_id, str) or not row_id:
        return None
    return "row?" + urlencode({"day": day.isoformat(), "id": row_id})


def excerpt(value: Any, full_chars: Any = None, *, href: str | None = None, chars: int = CELL_CHARS) -> str:
    """A text cut to ``chars`` characters (and three lines); the rest in a ``<details>`` of up to
    :data:`DETAILS_CHARS`, and a link to the row's page when the history holds more than that
    (``full_chars``: the text's length in the history, when what is given is already an excerpt)."""
    body = "" if value is None else (value if isinstance(value, str) else text(value))
    total = full_chars if isinstance(full_chars, int) and not isinstance(full_chars, bool) else len(body)
    lines = body.splitlines()
    short = len(body) <= chars and len(lines) <= 3
    more = ""
    if total > min(len(body), DETAILS_CHARS):
        more = (
            f'<a href="{esc(href)}" class="full">all {total:,} characters</a>'
            if href
            else f'<span class="muted">({total:,} characters in all)</span>'
        )
    if short:
        whole = "<br>".join(esc(line) for line in lines)
        return f"{whole} {more}" if more else whole
    head = " ".join(lines)[:chars]
    return f"{esc(head)}&hellip; <details><summary>more</summary><pre>{esc(body[:DETAILS_CHARS])}</pre>{more}</details>"


def badge(status: Any, label: str | None = None) -> str:
    name = text(status)
    css = name if name.replace("_", "").isalpha() else "other"
    return f'<span class="st st-{esc(css)}">{esc(label or name.replace("_", " "))}</span>'


def pager(
    label: str,
    *,
    page: int,
    limit: int,
    total: int,
    shown: int,
    href: Callable[[int], str],
    words: tuple[str, str] = ("previous", "next"),
    suffix: str = "",
) -> str:
    """ "<label> 1-100 of 1,000 · next →": where a page is among ``total`` items and links to its neighbours
    (ids ``prev``/``next`` + ``suffix``, so that a page may show its pager twice)."""
    first = (page - 1) * limit
    pages = max(1, -(-total // limit))
    parts = [f"{label} {first + 1 if shown else 0}&ndash;{first + shown} of {total:,}"]
    if page > 1:
        parts.append(f'<a href="{esc(href(page - 1))}" id="prev{suffix}">&larr; {esc(words[0])}</a>')
    parts.append(f"page {page} of {pages}")
    if page < pages:
        parts.append(f'<a href="{esc(href(page + 1))}" id="next{suffix}">{esc(words[1])} &rarr;</a>')
    return '<p class="pager">' + " &middot; ".join(parts) + "</p>"


def page(title: str, body: str) -> str:
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>{body}</body></html>"
    )


def tiles(items: Iterable[tuple[str, str, str, str | None]]) -> str:
    """Tiles of (id, value, label, link or None): a linked tile is a filter one click away."""
    out = []
    for tile_id, value, label, href in items:
        inner = f"<b>{esc(value)}</b><span>{esc(label)}</span>"
        if href is None:
            out.append(f'<div class="tile" id="tile-{esc(tile_id)}">{inner}</div>')
        else:
            out.append(f'<a class="tile" id="tile-{esc(tile_id)}" href="{esc(href)}">{inner}</a>')
    return '<div class="tiles">' + "".join(out) + "</div>"


def table_href(uri: str, **params: Any) -> str:
    extra = "".join(f"&{k}={quote(str(v), safe='')}" for k, v in params.items() if v is not None)
    return f"table?uri={quote(uri, safe='')}{extra}"


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


def error_page(code: int, title: str, message: str, element_id: str = "error") -> str:
    return page(title, f"<h1>{esc(title)}</h1><p id={element_id}>{esc(message)}</p>")


__all__ = [
    "CELL_CHARS",
    "DETAILS_CHARS",
    "STYLE",
    "ago",
    "as_utc",
    "badge",
    "count",
    "error_page",
    "esc",
    "excerpt",
    "human_bytes",
    "human_seconds",
    "not_configured_page",
    "number",
    "page",
    "pager",
    "row_href",
    "share",
    "table_href",
    "text",
    "tiles",
]
