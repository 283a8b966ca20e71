"""What the Spark vacuum job runs in its Python tasks: the local engine's rules, a batch of Arrow rows at a time.

Every rule that decides what vacuum keeps lives once, in the local engine's modules,
and runs here unchanged on the batches Spark hands over (``mapInArrow``): file keys
(:func:`deltalog.log.replay.file_keys`), deletion vector file names
(:func:`deltalog.vacuuming.paths.dv_file_path`), log paths made table-relative
(:class:`deltalog.vacuuming.paths.PathResolver`, strict for what is protected), the
inventory's rows (:meth:`deltalog.vacuuming.inventory.InventoryScan.part`: root
spellings, hidden paths, time units), the listing (:func:`deltalog.vacuuming.listing.scan_subtree`),
modification times (:func:`deltalog.vacuuming.listing.fill_stats`) and the verdict per file
(:func:`deltalog.vacuuming.plan.age_masks`, :func:`deltalog.vacuuming.plan.reasons`).

A deltalog error in a task (a path outside the table, an inventory time no file can
have) is not raised there: it is reported through the job's :class:`Counters`
accumulator, and the task stops producing rows; the job then refuses the plan with
that one sentence. Nothing here imports pyspark.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.errors import DeltaLogError
from deltalog.log.replay import file_keys
from deltalog.storage.filesystem import Storage
from deltalog.vacuuming.inventory import InventoryScan
from deltalog.vacuuming.listing import LISTING_SCHEMA, fill_stats, scan_subtree
from deltalog.vacuuming.paths import PathResolver, dv_file_path
from deltalog.vacuuming.times import FLOOR_MS, PlausibleTimes
from deltalog.vacuuming.verdict import PLAN_SCHEMA, age_masks, reasons
from deltalog.write_checks.hidden_paths import HiddenRule

__all__ = [
    "CLASSIFIED_SCHEMA",
    "REFS_SCHEMA",
    "RAW_REFS_SCHEMA",
    "Counters",
    "checkpoint_refs",
    "checkpoint_refs_resolved",
    "classify",
    "fill_times",
    "inventory_rows",
    "list_directories",
    "merge_counters",
    "resolve_refs",
]

#: One row per checkpoint file action: its reconciliation key, kind, log path, deletion vector file
#: (log-style; null when inline or absent), modification time (adds) and deletion time (removes).
RAW_REFS_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("kind", pa.string()),
        ("path", pa.string()),
        ("dv_path", pa.string()),
        ("mtime", pa.int64()),
        ("deletion_ts", pa.int64()),
    ]
)
#: Table-relative paths: ``p`` protected (a retained version references it), ``e`` an expired tombstone's.
REFS_SCHEMA = pa.schema([("path", pa.string()), ("kind", pa.string())])
#: Unreferenced files with their verdict: ``delete`` (then ``reason``), ``too new``, ``no time``, ``implausible``.
CLASSIFIED_SCHEMA = pa.schema([*PLAN_SCHEMA, ("class", pa.string()), ("copies", pa.int64())])

DELETE, TOO_NEW, NO_TIME, IMPLAUSIBLE = "delete", "too new", "no time", "implausible"

#: Counters a task reports: sums, except ``error`` / ``error_kind`` (the first), ``oldest_live_ms``
#: (the smallest), ``links`` (the first few) and ``parents`` (a set: past ``MAX_PARENTS`` folders it is
#: dropped and ``parents_overflow`` says so).
_FIRST = ("error", "error_kind")
_MAX_LINKS = 20
MAX_PARENTS = 100_000


def merge_counters(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Merge two tasks' counters (the accumulator's addition)."""
    out = dict(a)
    for k, v in b.items():
        if k in _FIRST:
            out.setdefault(k, v)
        elif k == "oldest_live_ms":
            out[k] = v if out.get(k) is None else min(out[k], v)
        elif k == "links":
            out[k] = (list(out.get(k) or []) + list(v))[:_MAX_LINKS]
        elif k == "parents":
            if out.get("parents_overflow") or b.get("parents_overflow"):
                out.pop(k, None)
                out["parents_overflow"] = 1
                continue
            merged = set(out.get(k) or ()) | set(v)
            if len(merged) > MAX_PARENTS:
                out.pop(k, None)
                out["parents_overflow"] = 1
            else:
                out[k] = sorted(merged)
        elif k == "parents_overflow":
            out.pop("parents", None)
            out[k] = 1
        else:
            out[k] = out.get(k, 0) + v
    return out


class Counters:
    """A ``pyspark.AccumulatorParam`` for the counter dicts (duck-typed: nothing here imports pyspark)."""

    def zero(self, value: dict[str, Any]) -> dict[str, Any]:
        return {}

    def addInPlace(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:  # noqa: N802 - pyspark's name
        return merge_counters(a, b)


def _guarded(counters: Any, rows: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``rows``, stopping at a deltalog error, which goes to ``counters`` instead of failing the task."""
    try:
        yield from rows
    except DeltaLogError as exc:
        counters.add({"error": str(exc), "error_kind": type(exc).__name__})


def _batch(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    table = table.cast(schema) if table.schema != schema else table
    return table.combine_chunks().to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], schema)


# --- the checkpoint's file actions -----------------------------------------------------------


def _dv_paths(dv: pa.StructArray) -> pa.Array:
    """The log-style file path of each row's deletion vector (null when inline or absent)."""
    out: list[str | None] = [None] * len(dv)
    if dv.null_count == len(dv):
        return pa.array(out, pa.string())
    kinds, ids = dv.field("storageType"), dv.field("pathOrInlineDv")
    on_disk = pc.and_(dv.is_valid(), pc.fill_null(pc.not_equal(kinds, "i"), False))
    for i in pc.indices_nonzero(on_disk).to_pylist():
        out[i] = dv_file_path(kinds[i].as_py(), ids[i].as_py())
    return pa.array(out, pa.string())


def _raw_refs(batch: pa.RecordBatch) -> pa.Table:
    """One :data:`RAW_REFS_SCHEMA` row per file action of a batch of checkpoint rows (``add``/``remove`` structs)."""
    parts = []
    for kind in ("add", "remove"):
        column = batch.column(kind)
        valid = pc.and_(column.is_valid(), pc.is_valid(pc.struct_field(column, "path")))
        actions = column.filter(valid)
        if not len(actions):
            continue
        paths, dv = actions.field("path"), actions.field("deletionVector")
        n = len(actions)
        times = actions.field("modificationTime" if kind == "add" else "deletionTimestamp")
        parts.append(
            pa.table(
                {
                    "key": file_keys(paths, dv),
                    "kind": pa.repeat(pa.scalar(kind), n),
                    "path": paths,
                    "dv_path": _dv_paths(dv),
                    "mtime": times if kind == "add" else pa.nulls(n, pa.int64()),
                    "deletion_ts": times if kind == "remove" else pa.nulls(n, pa.int64()),
                },
                schema=RAW_REFS_SCHEMA,
            )
        )
    return pa.concat_tables(parts) if parts else RAW_REFS_SCHEMA.empty_table()


def checkpoint_refs(batches: Iterator[pa.RecordBatch], counters: Any) -> Iterator[pa.RecordBatch]:
    """Checkpoint rows (``add``/``remove`` structs) -> one :data:`RAW_REFS_SCHEMA` row per file action."""

    def rows() -> Iterator[pa.RecordBatch]:
        for batch in batches:
            raw = _raw_refs(batch)
            if raw.num_rows:
                yield _batch(raw, RAW_REFS_SCHEMA)

    return _guarded(counters, rows())


def checkpoint_refs_resolved(
    batches: Iterator[pa.RecordBatch], table_uri: str, cutoff_ms: int, decided: bytes | None, counters: Any
) -> Iterator[pa.RecordBatch]:
    """:func:`checkpoint_refs` and :func:`resolve_refs` in one pass, the superseded rows dropped here.

    ``decided``: the file keys the commits after the checkpoint decided, as Arrow IPC bytes (a
    few, compared exactly); the job joins in Spark instead when they are many.
    """

    def rows() -> Iterator[pa.RecordBatch]:
        resolver = PathResolver(Storage(table_uri))
        keys = pa.ipc.open_stream(decided).read_all().column(0).combine_chunks() if decided else None
        for batch in batches:
            raw = _raw_refs(batch)
            if keys is not None and raw.num_rows:
                raw = raw.filter(pc.invert(pc.fill_null(pc.is_in(raw.column("key"), value_set=keys), False)))
            if raw.num_rows:
                yield _resolved(raw, resolver, cutoff_ms, counters)

    return _guarded(counters, rows())


def _resolved(rows: pa.RecordBatch | pa.Table, resolver: PathResolver, cutoff_ms: int, counters: Any) -> pa.RecordBatch:
    """Raw references -> protected (``p``) and expired (``e``) table-relative paths; reports the oldest live file
    and the protected files' folders."""
    table = (pa.Table.from_batches([rows]) if isinstance(rows, pa.RecordBatch) else rows).combine_chunks()
    kind, deletion_ts = table.column("kind"), pc.fill_null(table.column("deletion_ts"), 0)
    live = pc.or_(pc.equal(kind, "add"), pc.greater_equal(deletion_ts, cutoff_ms))
    raw = pa.chunked_array([table.column("path").filter(live), table.column("dv_path").filter(live)], pa.string())
    protected = resolver.resolve(raw, strict=True)
    expired = resolver.resolve(table.column("path").filter(pc.invert(live)))
    mtimes = table.column("mtime").filter(pc.equal(kind, "add"))
    oldest = pc.min(mtimes.filter(pc.greater_equal(pc.fill_null(mtimes, 0), FLOOR_MS))).as_py()
    update: dict[str, Any] = {"parents": _parents(protected)}
    if oldest is not None:
        update["oldest_live_ms"] = int(oldest)
    counters.add(update)
    out = pa.table(
        {
            "path": pa.concat_arrays([protected, expired]),
            "kind": pa.concat_arrays(
                [pa.repeat(pa.scalar("p"), len(protected)), pa.repeat(pa.scalar("e"), len(expired))]
            ),
        }
    )
    return _batch(out, REFS_SCHEMA)


def _parents(paths: pa.Array) -> list[str]:
    """The folders holding ``paths`` (table-relative; "" is the root), once each: for the link census."""
    if not len(paths):
        return []
    parents = pc.replace_substring_regex(paths, "/[^/]*$|^[^/]*$", "")
    return pc.unique(parents).to_pylist()


def resolve_refs(
    batches: Iterator[pa.RecordBatch], table_uri: str, cutoff_ms: int, counters: Any
) -> Iterator[pa.RecordBatch]:
    """Live checkpoint rows (superseded ones already dropped) -> table-relative protected and expired paths.

    As :func:`deltalog.vacuuming.retained.retained_state` does for the local engine: an add and
    an unexpired tombstone protect their file and deletion vector (paths that cannot be placed
    inside the root stop the vacuum); an expired tombstone's path is only a reason. Also reports
    the oldest live file's time (the plausible window of an inventory) and the protected files'
    folders (``parents``: the link census of local tables).
    """

    def rows() -> Iterator[pa.RecordBatch]:
        resolver = PathResolver(Storage(table_uri))
        for batch in batches:
            yield _resolved(batch, resolver, cutoff_ms, counters)

    return _guarded(counters, rows())


# --- what is on storage ----------------------------------------------------------------------


def inventory_rows(
    batches: Iterator[pa.RecordBatch],
    table_uri: str,
    schema: pa.Schema,
    source: str,
    rule: HiddenRule,
    window: PlausibleTimes | None,
    counters: Any,
) -> Iterator[pa.RecordBatch]:
    """Inventory rows -> the table's files (``LISTING_SCHEMA``), by the local engine's per-batch rule."""
    scan = InventoryScan(Storage(table_uri), source, schema, iter(()), rule, window)

    listed = 0

    def rows() -> Iterator[pa.RecordBatch]:
        nonlocal listed
        try:
            for batch in batches:
                part = scan.part(batch)
                if part is not None and part.num_rows:
                    listed += part.num_rows
                    yield _batch(part, LISTING_SCHEMA)
        finally:
            counters.add(
                {
                    "listed": listed,
                    "inventory_rows": scan.rows,
                    "file_rows": scan.file_rows,
                    "rows_outside_table": scan.outside,
                    "hidden_entries_skipped": scan.hidden,
                    **{f"nulls:{c}": n for c, n in scan.nulls.items() if n},
                }
            )

    return _guarded(counters, rows())


def list_directories(
    batches: Iterator[pa.RecordBatch], table_uri: str, rule: HiddenRule, counters: Any
) -> Iterator[pa.RecordBatch]:
    """Rows of (``dir``, ``rel``) top-level directories -> every file under them (``LISTING_SCHEMA``)."""

    def rows() -> Iterator[pa.RecordBatch]:
        storage = Storage(table_uri)
        for batch in batches:
            for top, rel in zip(batch.column("dir").to_pylist(), batch.column("rel").to_pylist()):
                part = scan_subtree(storage, top, rel, rule)
                counters.add(
                    {
                        "listed": len(part.paths),
                        "hidden_entries_skipped": part.hidden,
                        "directories_listed": len(part.dirs),
                        "links": part.links,
                    }
                )
                if not part.paths:
                    continue
                n = len(part.paths)
                sizes = pa.array(part.sizes, pa.int64()) if part.sizes else pa.nulls(n, pa.int64())
                mtimes = pa.array(part.mtimes, pa.int64()) if part.mtimes else pa.nulls(n, pa.int64())
                table = pa.Table.from_arrays([pa.array(part.paths, pa.string()), sizes, mtimes], schema=LISTING_SCHEMA)
                yield _batch(table, LISTING_SCHEMA)

    return _guarded(counters, rows())


def fill_times(batches: Iterator[pa.RecordBatch], table_uri: str, counters: Any) -> Iterator[pa.RecordBatch]:
    """Unreferenced files of a local listing (names only) with their size and time; vanished ones dropped."""
    storage = Storage(table_uri)
    schema = pa.schema([*LISTING_SCHEMA, ("copies", pa.int64())])

    def rows() -> Iterator[pa.RecordBatch]:
        for batch in batches:
            files = fill_stats(storage, pa.Table.from_batches([batch]).select(LISTING_SCHEMA.names), max_workers=1)
            yield _batch(files.append_column("copies", pa.repeat(pa.scalar(1, pa.int64()), files.num_rows)), schema)

    return _guarded(counters, rows())


def classify(batches: Iterator[pa.RecordBatch], cutoff_ms: int) -> Iterator[pa.RecordBatch]:
    """Unreferenced files (with an ``expired`` flag) -> their verdict, and a reason for those deleted."""
    for batch in batches:
        mtime = pc.fill_null(batch.column("modificationTime"), 0)
        known, implausible, old = age_masks(mtime, cutoff_ms)
        verdict = pc.if_else(old, DELETE, pc.if_else(implausible, IMPLAUSIBLE, pc.if_else(known, TOO_NEW, NO_TIME)))
        paths = batch.column("path")
        why = pc.if_else(old, reasons(paths, batch.column("expired")), pa.nulls(len(paths), pa.string()))
        table = pa.table(
            {
                "path": paths,
                "size": batch.column("size"),
                "modificationTime": mtime,
                "reason": why,
                "class": verdict,
                "copies": batch.column("copies"),
            }
        )
        yield _batch(table, CLASSIFIED_SCHEMA)
