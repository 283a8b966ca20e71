"""The fleet's listing: one row per table, its columns, filters, sort order, pages and prefix groups.

The listing is an Arrow table made once per history window (:func:`fleet_listing`, from
:func:`deltalog.journal.summary.table_summaries`), so that a request sorts, filters and
cuts a page of it with Arrow compute: a request's work grows with the number of tables,
never with the history's rows. What the page shows is declared here, once:

- :data:`COLUMNS`: each column's header, the listing column it sorts by (every column with
  one is a ``?sort=`` key), its cell and its JSON value. One more per-table column (an
  objective's compliance, say) is one entry, after its figure exists in
  ``deltalog.journal.summary.FIGURES``.
- :data:`FILTERS`: each filter's parameter, the check of its value and the rows it keeps.
  One more filter (by objective breach) is one entry.

Tables are shown by the shortest end of their path that tells them apart in the fleet
(``sales/raw/history`` and ``ml/raw/history`` where both exist, ``orders`` where only one
is called that) and grouped by the folder that holds them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.journal import COMPLIANCE_STATES, TABLE_STATUSES
from deltalog.maintenance import OBJECTIVES
from deltalog_provider.fleet_view.cost import Prices, with_costs
from deltalog_provider.fleet_view.html import (
    ago,
    as_utc,
    badge,
    count,
    esc,
    excerpt,
    human_bytes,
    human_seconds,
    number,
    row_href,
    share,
    table_href,
    text,
)
from deltalog_provider.fleet_view.query import (
    BadParameter,
    Filter,
    FleetQuery,
    check_choice,
    check_name,
    check_text,
)

#: The operations shown in the "last run" columns, in maintenance order.
SHOWN_OPERATIONS = ("compaction", "purge", "checkpoint", "vacuum", "log_cleanup", "manifest")


def display_paths(uris: Sequence[str]) -> tuple[list[str], list[str], str]:
    """(the shortest end of each URI's path that no other URI shares, each URI's folder, the folder
    all share): ``s3://lake/sales/raw/history`` is ``sales/raw/history`` beside ``s3://lake/ml/raw/history``."""
    parts = [u.rstrip("/").split("/") if u else [""] for u in uris]
    depth = [1] * len(parts)
    pending = set(range(len(parts)))
    while pending:
        seen: dict[str, list[int]] = {}
        for i in range(len(parts)):
            seen.setdefault("/".join(parts[i][-depth[i] :]), []).append(i)
        pending = set()
        for same in seen.values():
            if len(same) > 1:
                for i in same:
                    if depth[i] < len(parts[i]):
                        depth[i] += 1
                        pending.add(i)
    paths = ["/".join(p[-d:]) for p, d in zip(parts, depth, strict=True)]
    folders = ["/".join(p[:-1]) + "/" if len(p) > 1 else "" for p in parts]
    common = folders[0] if folders else ""
    for folder in folders[1:]:
        while common and not folder.startswith(common):
            common = common[: common.rstrip("/").rfind("/") + 1]
    return paths, folders, common


def fleet_listing(summaries: pa.Table, prices: Prices, days: int) -> pa.Table:
    """The listing: ``summaries`` (one row per table) with display path, folder, the last run of each
    shown operation as sortable columns, and the costs at ``prices``."""
    uris = [u or "" for u in summaries.column("table_uri").to_pylist()]
    paths, folders, common = display_paths(uris)
    out = summaries
    out = out.append_column("path", pa.array(paths, pa.string()))
    out = out.append_column("folder", pa.array(folders, pa.string()))
    out = out.append_column("group", pa.array([f[len(common) :] or f for f in folders], pa.string()))
    lasts = summaries.column("lasts").to_pylist()
    for op in SHOWN_OPERATIONS:
        mine = [next((x for x in (ls or []) if x and x.get("operation") == op), None) for ls in lasts]
        out = out.append_column(
            f"last_{op}_at", pa.array([as_utc(m.get("at")) if m else None for m in mine], pa.timestamp("us", tz="UTC"))
        )
    return with_costs(with_writer_conflicts(out), prices, days)


#: The largest count an int64 column holds: a sum of counts beyond it is shown as this.
_MAX_COUNT = 2**63 - 1


def _conflict_count(value: Any) -> int | None:
    """A count as the history should hold it (a whole number from 0 to :data:`_MAX_COUNT`), else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if 0 <= value <= _MAX_COUNT else None
    known = number(value)
    if known is None or known < 0 or known != int(known) or known >= 2.0**63:
        return None
    return int(known)


def with_writer_conflicts(listing: pa.Table) -> pa.Table:
    """The listing with ``writer_conflicts``: what the history shows of the conflicts deltalog caused its
    table's writers (the newest measurement's DELETE/UPDATE/MERGE commits that overlapped a deltalog
    rewrite, plus the bins compaction lost to their commits in the window); null for a table with no
    DML writer in sight and nothing lost or left to them, and null (unknown) where a figure it sums is
    there but no count (another writer's negative, fractional, infinite or out-of-range value). The
    sum of two counts is held at the int64 maximum."""
    n = listing.num_rows

    def column(name: str) -> list[Any]:
        return listing.column(name).to_pylist() if name in listing.column_names else [None] * n

    values: list[int | None] = []
    for w, lost, left in zip(column("writers"), column("bins_lost_to_writers"), column("files_deferred_for_writers")):
        w = w if isinstance(w, dict) else {}
        overlaps = w.get("dml_overlaps")
        seen = any((_conflict_count(v) or 0) > 0 for v in (w.get("dml_commits"), lost, left))
        terms = [_conflict_count(v) for v in (overlaps, lost)]
        unknown = any(t is None and v is not None for t, v in zip(terms, (overlaps, lost), strict=True))
        values.append(None if not seen or unknown else min(_MAX_COUNT, sum(t or 0 for t in terms)))
    return listing.append_column("writer_conflicts", pa.array(values, pa.int64()))


# --- filters ----------------------------------------------------------------------------------------


def _by_status(listing: pa.Table, value: str) -> pa.Array:
    status = listing.column("status")
    if value == "problem":
        return pc.is_in(status, pa.array(["failed", "refused", "deferred"]))
    return pc.equal(status, value)


def _by_due(listing: pa.Table, value: str) -> pa.Array:
    if value == "any":
        return pc.greater(listing.column("due_count"), 0)
    due = listing.column("due").combine_chunks()
    hits = pc.filter(pc.list_parent_indices(due), pc.equal(pc.list_flatten(due), value))
    return pc.is_in(pa.array(range(listing.num_rows), pa.int64()), value_set=pc.cast(hits, pa.int64()))


def _by_prefix(listing: pa.Table, value: str) -> pa.Array:
    uri = listing.column("table_uri")
    return pc.or_(
        pc.starts_with(uri, value),
        pc.starts_with(pc.binary_join_element_wise(listing.column("group"), listing.column("path"), ""), value),
    )


def _by_name(listing: pa.Table, value: str) -> pa.Array:
    return pc.match_substring(listing.column("table_uri"), value, ignore_case=True)


def _by_compliance(listing: pa.Table, value: str) -> pa.Array:
    """A compliance state (breached, at_risk, met, none), or an objective's name: the tables breaching it."""
    if value in COMPLIANCE_STATES:
        return pc.equal(listing.column("compliance"), value)
    breached = listing.column("breached_objectives").combine_chunks()
    hits = pc.filter(pc.list_parent_indices(breached), pc.equal(pc.list_flatten(breached), value))
    return pc.is_in(pa.array(range(listing.num_rows), pa.int64()), value_set=pc.cast(hits, pa.int64()))


#: How the page names a compliance state.
COMPLIANCE_LABELS = {"breached": "breached", "at_risk": "at risk", "met": "met", "none": "no objectives"}
_SPECS = {o.name: o for o in OBJECTIVES}


FILTERS: tuple[Filter, ...] = (
    Filter(
        "status",
        "status",
        check_choice("status", ("problem", *TABLE_STATUSES)),
        _by_status,
        (
            ("", "any"),
            ("problem", "failed, refused or deferred"),
            *((s, s) for s in TABLE_STATUSES),
        ),
    ),
    Filter(
        "due",
        "due",
        check_name("due"),
        _by_due,
        (("", "any or none"), ("any", "something due"), *((op, op.replace("_", " ")) for op in SHOWN_OPERATIONS)),
    ),
    Filter(
        "objectives",
        "objectives",
        check_choice("objectives", (*COMPLIANCE_STATES, *_SPECS)),
        _by_compliance,
        (
            ("", "any or none"),
            *((state, COMPLIANCE_LABELS[state]) for state in COMPLIANCE_STATES),
            *((name, f"breached: {name.replace('_', ' ')}") for name in _SPECS),
        ),
    ),
    Filter("prefix", "path prefix", check_text("prefix"), _by_prefix),
    Filter("q", "name contains", check_text("q"), _by_name),
)


# --- columns ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    """What a cell needs besides its row: the time, the prices, the query (for links)."""

    now: dt.datetime
    prices: Prices
    query: FleetQuery
    #: The operations some table of the fleet ran (a "last" column each).
    operations: frozenset[str] = frozenset(SHOWN_OPERATIONS)
    #: Some table of the fleet sets service-level objectives (the compliance column is shown).
    objectives: bool = False
    #: Some table of the fleet has writer figures in its history (the writer-conflicts column is shown).
    writers: bool = False


@dataclass(frozen=True)
class Column:
    """One column of the fleet's listing."""

    key: str
    header: str
    #: The listing column this one sorts by (None: not sortable), and the first order offered.
    sort_by: str | None
    cell: Callable[[dict[str, Any], Context], str]
    numeric: bool = False
    first_order: str = "desc"
    #: Shown only when ``shown(context)`` (the money columns need prices).
    shown: Callable[[Context], bool] = lambda ctx: True

    def summary_line(self) -> str:
        """One line: the column and what it sorts by."""
        return f"{self.key}: {self.header} (sort by {self.sort_by or '-'})"

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "header": self.header, "sort_by": self.sort_by}


def _table_cell(row: dict[str, Any], ctx: Context) -> str:
    uri = row.get("table_uri") or ""
    return (
        f'<a href="{esc(table_href(uri, days=ctx.query.days if ctx.query.days != 30 else None))}" '
        f'data-table="{esc(uri)}" title="{esc(uri[:500])}" class="path">{esc((row.get("path") or uri or "-")[:300])}</a>'
    )


def _status_cell(row: dict[str, Any], ctx: Context) -> str:
    problems = [
        f"{text(op).replace('_', ' ')} {status}"
        for status in ("failed", "refused", "deferred")
        for op in row.get(f"open_{status}") or []
    ]
    detail = f' <span class="why">{esc(", ".join(problems))}</span>' if problems else ""
    return badge(row.get("status")) + detail


def _due_cell(row: dict[str, Any], ctx: Context) -> str:
    if row.get("measured_status") in ("failed", "refused"):
        label = "unreadable" if row.get("measured_status") == "failed" else "refused"
        return badge(row.get("measured_status"), label)
    due = row.get("due") or []
    if not due:
        return "nothing" if row.get("measured_at") else '<span class="muted">not measured</span>'
    return esc(", ".join(text(d).replace("_", " ") for d in due))


def _why_cell(row: dict[str, Any], ctx: Context) -> str:
    why = "\n".join(text(line) for line in row.get("why") or [])
    if not why:
        return ""
    return excerpt(why, href=row_href(row.get("measured_day"), row.get("measured_id")))


def objective_text(name: Any, value: Any) -> str:
    """An objective's value or target as messages show it (``12``, ``10.2 days``, ``5.00%``); "-" unknown."""
    spec = _SPECS.get(str(name))
    known = number(value)
    if spec is None or known is None:
        return "-"
    return spec.shown(known)


def utc_time(value: Any) -> str:
    """A moment as the pages write it: ``2026-11-25 06:00 UTC`` ("-" when there is none)."""
    stamp = as_utc(value)
    return stamp.strftime("%Y-%m-%d %H:%M UTC") if stamp else "-"


def objective_line(o: dict[str, Any]) -> str:
    """``max_small_files 12 > 5`` (breached), ``<= 5`` (met), ``unknown`` (value unknown): one objective, plain text."""
    name = text(o.get("name"))
    value, target = objective_text(name, o.get("value")), objective_text(name, o.get("target"))
    if o.get("met") is False:
        return f"{name} {value} > {target}"
    if o.get("met") is True:
        risk = ", at risk" if o.get("at_risk") else ""
        return f"{name} {value} <= {target}{risk}"
    return f"{name} unknown (target {target})"


def compliance_label(row: dict[str, Any]) -> str:
    """The compliance column's words: ``met``, ``breached since 2026-11-25 06:00 UTC``, ``at risk``, ``-``."""
    state = row.get("compliance")
    if state == "breached":
        since = row.get("breached_since")
        return f"breached since {utc_time(since)}" if since else "breached"
    return {"at_risk": "at risk", "met": "met"}.get(str(state), "-")


def _compliance_cell(row: dict[str, Any], ctx: Context) -> str:
    state = row.get("compliance")
    if state not in ("breached", "at_risk", "met"):
        return '<span class="muted">-</span>'
    objectives = [o for o in row.get("objectives") or [] if o]
    # What makes the state (the breached objectives, those at risk); the rest is in the tooltip.
    shown = [o for o in objectives if o.get("met") is False or (state == "at_risk" and o.get("at_risk"))]
    detail = "; ".join(objective_line(o) for o in shown)
    title = "\n".join(f"{objective_line(o)} [{text(o.get('source'))[:200]}]" for o in objectives)
    href = row_href(row.get("judged_day"), row.get("judged_id"))
    label = badge(state, compliance_label(row))
    inner = f'<a href="{esc(href)}" title="{esc(title)}">{label}</a>' if href else label
    if row.get("measured_status") in ("failed", "refused"):  # the newest measurement judged nothing
        inner += f' <span class="muted">as of {esc(ago(as_utc(row.get("judged_at")), ctx.now))}</span>'
    return inner + (f' <span class="why">{esc(detail[:300])}</span>' if detail else "")


def _last_cell(op: str) -> Callable[[dict[str, Any], Context], str]:
    def cell(row: dict[str, Any], ctx: Context) -> str:
        last = next((x for x in row.get("lasts") or [] if x and x.get("operation") == op), None)
        if last is None:
            return '<span class="muted">never</span>'
        href = row_href(last.get("day"), last.get("id"))
        title = esc(text(last.get("reason"))[:300]) if last.get("reason") else ""
        when = esc(ago(as_utc(last.get("at")), ctx.now))
        inner = f'{badge(last.get("status"))} <span class="muted">{when}</span>'
        return f'<a href="{esc(href)}" title="{title}">{inner}</a>' if href else inner

    return cell


def _writers_cell(row: dict[str, Any], ctx: Context) -> str:
    """``2 DML overlaps · 1 bin lost · 14 files left``: the conflicts deltalog's commits met, and what it left the writers."""
    if row.get("writer_conflicts") is None:
        return '<span class="muted">-</span>'
    w = row.get("writers") or {}
    overlaps, lost = number(w.get("dml_overlaps")), number(row.get("bins_lost_to_writers"))
    left = number(row.get("files_deferred_for_writers"))
    parts = []
    if overlaps is not None:
        parts.append(f"{count(overlaps)} DML overlap{'s' if overlaps != 1 else ''}")
    if lost:
        parts.append(f"{count(lost)} bin{'s' if lost != 1 else ''} lost")
    if left:
        parts.append(f"{count(left)} files left")
    title = (
        "DML overlaps: DELETE/UPDATE/MERGE commits in the table's recent log (newest measurement) that landed "
        "after a deltalog rewrite they had not read: each passed Delta's conflict check against it; an attempt "
        "that failed leaves no commit and is not counted. Bins lost: compaction bins a writer's commit took "
        "inputs of first. Files left: small files compaction left to the writers (each run counted)."
    )
    return f'<span title="{esc(title)}">{esc(" · ".join(parts))}</span>'


def _ran(op: str) -> Callable[[Context], bool]:
    return lambda ctx: op in ctx.operations


def _figure(column: str, fmt: Callable[[Any], str]) -> Callable[[dict[str, Any], Context], str]:
    return lambda row, ctx: esc(fmt(row.get(column)))


def _money(column: str) -> Callable[[dict[str, Any], Context], str]:
    return lambda row, ctx: esc(ctx.prices.money(row.get(column)))


def _version(value: Any) -> str:
    return text(value) if isinstance(value, int) else "-"


COLUMNS: tuple[Column, ...] = (
    Column("table", "table", "path", _table_cell, first_order="asc"),
    Column("status", "status", "status_rank", _status_cell, first_order="asc"),
    Column(
        "compliance",
        "objectives",
        "compliance_order",
        _compliance_cell,
        first_order="asc",
        shown=lambda ctx: ctx.objectives,
    ),
    Column("due", "due", "due_count", _due_cell),
    Column("why", "why", None, _why_cell),
    Column("version", "version", "version", _figure("version", _version), numeric=True),
    Column("live_files", "live files", "live_files_after", _figure("live_files_after", count), numeric=True),
    Column("small_files", "small files", "small_files_after", _figure("small_files_after", count), numeric=True),
    Column("size", "size", "table_bytes_after", _figure("table_bytes_after", human_bytes), numeric=True),
    Column(
        "versions_since_checkpoint",
        "versions since checkpoint",
        "versions_since_checkpoint_after",
        _figure("versions_since_checkpoint_after", count),
        numeric=True,
    ),
    Column("dv_share", "DV share", "dv_share_after", _figure("dv_share_after", share), numeric=True),
    Column(
        "writer_conflicts",
        "writer conflicts",
        "writer_conflicts",
        _writers_cell,
        numeric=True,
        shown=lambda ctx: ctx.writers,
    ),
    *(
        Column(
            f"last_{op}",
            f"last {op.replace('_', ' ')}",
            f"last_{op}_at",
            _last_cell(op),
            shown=_ran(op),
        )
        for op in SHOWN_OPERATIONS
    ),
    Column("failures", "failed runs", "failures", _figure("failures", count), numeric=True),
    Column("cpu", "CPU time", "cpu_s", _figure("cpu_s", human_seconds), numeric=True),
    Column("compacted", "compacted", "bytes_compacted", _figure("bytes_compacted", human_bytes), numeric=True),
    Column("written", "written", "bytes_written", _figure("bytes_written", human_bytes), numeric=True),
    Column("reclaimed", "reclaimed", "bytes_reclaimed", _figure("bytes_reclaimed", human_bytes), numeric=True),
    Column("cost", "cost", "cost", _money("cost"), numeric=True, shown=lambda ctx: ctx.prices.any),
    Column(
        "storage_month",
        "storage / month",
        "storage_cost_month",
        _money("storage_cost_month"),
        numeric=True,
        shown=lambda ctx: ctx.prices.gb_month is not None,
    ),
    Column("measured", "measured", "measured_at", lambda row, ctx: esc(ago(as_utc(row.get("measured_at")), ctx.now))),
)

SORT_KEYS = tuple(c.key for c in COLUMNS if c.sort_by)


def sets_objectives(listing: pa.Table) -> bool:
    """Whether some table of ``listing`` set a service-level objective at its newest judgement."""
    return bool(listing.num_rows) and pc.any(pc.not_equal(listing.column("compliance"), "none")).as_py() is True


def shows_writers(listing: pa.Table) -> bool:
    """Whether some table of ``listing`` has writer figures (schema version 3 rows) in the window."""
    return (
        "writer_conflicts" in listing.column_names and listing.column("writer_conflicts").null_count < listing.num_rows
    )


def operations_run(listing: pa.Table) -> frozenset[str]:
    """The shown operations some table of ``listing`` has a row of."""
    return frozenset(op for op in SHOWN_OPERATIONS if listing.column(f"last_{op}_at").null_count < listing.num_rows)


def select(listing: pa.Table, query: FleetQuery) -> pa.Table:
    """The tables the query's filters keep, in its order (missing values last, then by URI)."""
    mask = None
    for f in FILTERS:
        value = query.filters.get(f.param)
        if value is None:
            continue
        keep = pc.fill_null(f.keep(listing, value), False)
        mask = keep if mask is None else pc.and_(mask, keep)
    kept = listing if mask is None else listing.filter(mask)
    column = next(c for c in COLUMNS if c.key == query.sort)
    if column.sort_by is None:
        raise BadParameter(f"the {column.key} column cannot be sorted by")
    order = "ascending" if query.order == "asc" else "descending"
    key = kept.column(column.sort_by)
    keys = pa.table({"missing": pc.is_null(key), "k": key, "u": kept.column("table_uri")})
    indices = pc.sort_indices(keys, sort_keys=[("missing", "ascending"), ("k", order), ("u", "ascending")])
    return kept.take(indices)


def sort_link(column: Column, query: FleetQuery) -> str:
    """The header of ``column``: a link sorting by it (the other way when it is the current sort)."""
    if column.sort_by is None:
        return esc(column.header)
    if query.sort == column.key:
        order = "desc" if query.order == "asc" else "asc"
        arrow = " &#9650;" if query.order == "asc" else " &#9660;"
    else:
        order, arrow = column.first_order, ""
    href = "./?" + urlencode(query.params(sort=column.key, order=order, page=1))
    return f'<a href="{esc(href)}" data-sort="{esc(column.key)}">{esc(column.header)}</a>{arrow}'


def groups(listing: pa.Table, prices: Prices) -> list[dict[str, Any]]:
    """Per folder of tables: how many, how many failing, refused, deferred, due, and their cost."""
    if not listing.num_rows:
        return []
    status = listing.column("status")
    data = pa.table(
        {
            "group": listing.column("group"),
            "folder": listing.column("folder"),
            "tables": pa.array([1] * listing.num_rows, pa.int64()),
            "failed": pc.cast(pc.equal(status, "failed"), pa.int64()),
            "refused": pc.cast(pc.equal(status, "refused"), pa.int64()),
            "deferred": pc.cast(pc.equal(status, "deferred"), pa.int64()),
            "due": pc.cast(pc.equal(status, "due"), pa.int64()),
            "cost": listing.column("cost"),
            "bytes": listing.column("table_bytes_after"),
        }
    )
    grouped = data.group_by(["group", "folder"]).aggregate(
        [
            ("tables", "sum"),
            ("failed", "sum"),
            ("refused", "sum"),
            ("deferred", "sum"),
            ("due", "sum"),
            ("cost", "sum"),
            ("bytes", "sum"),
        ]
    )
    return grouped.sort_by([("group", "ascending")]).to_pylist()


def table_json(row: dict[str, Any], prices: Prices) -> dict[str, Any]:
    """A table of the listing as JSON (snake_case keys; times ISO 8601; texts as excerpts)."""

    def when(value: Any) -> str | None:
        stamp = as_utc(value)
        return stamp.isoformat() if stamp else None

    last = {}
    for x in row.get("lasts") or []:
        if not x:
            continue
        last[text(x.get("operation"))] = {
            "status": x.get("status"),
            "at": when(x.get("at")),
            "reason": x.get("reason"),
            "reason_chars": x.get("reason_chars"),
            "row": row_href(x.get("day"), x.get("id")),
        }
    out: dict[str, Any] = {
        "table_uri": row.get("table_uri"),
        "path": row.get("path"),
        "group": row.get("group"),
        "table_id": row.get("table_id"),
        "status": row.get("status"),
        "due": row.get("due") or [],
        "why": row.get("why") or [],
        "measured_at": when(row.get("measured_at")),
        "measured_status": row.get("measured_status"),
        "open": {s: row.get(f"open_{s}") or [] for s in ("failed", "refused", "deferred")},
        "state": {
            "at": when(row.get("state_at")),
            "version": row.get("version"),
            "live_files": row.get("live_files_after"),
            "small_files": row.get("small_files_after"),
            "table_bytes": row.get("table_bytes_after"),
            "versions_since_checkpoint": row.get("versions_since_checkpoint_after"),
            "dv_share": row.get("dv_share_after"),
            "log_files": row.get("log_files_after"),
        },
        "last": last,
        "work": {
            k: row.get(k)
            for k in (
                "rows",
                "failures",
                "refusals",
                "deferrals",
                "duration_s",
                "cpu_s",
                "files_compacted",
                "bytes_compacted",
                "files_written",
                "bytes_written",
                "files_vacuumed",
                "bytes_reclaimed",
                "log_files_removed",
                "bytes_compaction_saved",
            )
        },
    }
    out["compliance"] = compliance_json(row)
    w = row.get("writers") or {}
    out["writers"] = {
        "writer_conflicts": row.get("writer_conflicts"),
        "dml_commits": w.get("dml_commits"),
        "overlaps": w.get("overlaps"),
        "dml_overlaps": w.get("dml_overlaps"),
        "measured_at": when(w.get("at")),
        "bins_lost_to_writers": row.get("bins_lost_to_writers"),
        "bins_deferred_for_writers": row.get("bins_deferred_for_writers"),
        "files_deferred_for_writers": row.get("files_deferred_for_writers"),
        "writer_wait_s": row.get("writer_wait_s"),
    }
    if prices.any:
        out["cost"] = {k: row.get(k) for k in ("cost", "compute_cost", "storage_cost_month", "saved_month")}
    return out


def _objective_number(name: str, value: Any) -> int | float | None:
    """A target or value as ``deltalog objectives --json`` gives it: a count as an integer, the rest as numbers."""
    known = number(value)
    if known is None:
        return None
    spec = _SPECS.get(name)
    if spec is not None and spec.kind == "count" and known == int(known) and abs(known) < 2**63:
        return int(known)
    return known


def compliance_json(row: dict[str, Any]) -> dict[str, Any]:
    """A table's compliance as JSON: its state at its newest judgement (``breached``, ``at_risk``, ``met``,
    ``none``), since when it is breached, and each objective as ``deltalog objectives --json`` names it."""

    def when(value: Any) -> str | None:
        stamp = as_utc(value)
        return stamp.isoformat() if stamp else None

    state = row.get("compliance")
    return {
        "state": state if state in COMPLIANCE_STATES else "none",
        "breached_since": when(row.get("breached_since")),
        "measured_at": when(row.get("judged_at")),
        "row": row_href(row.get("judged_day"), row.get("judged_id")),
        "objectives": [
            {
                "name": o.get("name"),
                "target": _objective_number(str(o.get("name")), o.get("target")),
                "value": _objective_number(str(o.get("name")), o.get("value")),
                "met": o.get("met"),
                "at_risk": bool(o.get("at_risk")),
                "breached_since": when(o.get("breached_since")),
                "source": o.get("source"),
            }
            for o in row.get("objectives") or []
            if o
        ],
    }


__all__ = [
    "COLUMNS",
    "COMPLIANCE_LABELS",
    "FILTERS",
    "SHOWN_OPERATIONS",
    "SORT_KEYS",
    "Column",
    "Context",
    "compliance_json",
    "compliance_label",
    "display_paths",
    "fleet_listing",
    "groups",
    "objective_line",
    "objective_text",
    "operations_run",
    "select",
    "sets_objectives",
    "shows_writers",
    "sort_link",
    "table_json",
    "utc_time",
    "with_writer_conflicts",
]
