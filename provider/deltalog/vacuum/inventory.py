"""A storage inventory (S3 Inventory, Azure blob inventory, ...) instead of a listing.

Listing a table of millions of objects can take hours; cloud providers produce
a daily inventory of a bucket for a few cents. An inventory is a Parquet or CSV
file (or a directory of Parquet files) with one row per object: ``path``,
``size`` (or Delta Spark's ``length``), ``modificationTime`` (milliseconds since
the epoch, or a timestamp; a time no file of the table can have, such as seconds
read as milliseconds, is refused: :mod:`deltalog.vacuum.times`) and optionally ``isDir``. Paths may be absolute
(``s3://bucket/table/part-0.parquet``) or relative to the table root; rows
outside the table are ignored.

An inventory is only ever a subset of the truth: a file written after it was
taken is simply not in it, so it is never deleted. A malformed inventory is
refused before anything is deleted.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from deltalog.arrow_utils import count_true
from deltalog.errors import InvalidArgumentError
from deltalog.storage import Storage
from deltalog.vacuum.listing import LISTING_SCHEMA, FileListing
from deltalog.vacuum.paths import HiddenRule, PathResolver
from deltalog.vacuum.times import PlausibleTimes, describe_ms, first_implausible

REQUIRED = ("path", "size", "modificationTime")
#: Rows that are not plain relative paths: absolute (``/``, ``scheme://``, Hadoop's ``file:/``)
#: or with ``.``/``..`` segments.
_SPECIAL_ROW = r"^/|^[A-Za-z][A-Za-z0-9+.-]+:/|(^|/)\.{1,2}(/|$)"
#: What a root prefix may not be followed by for the prefix to be stripped as it is: URL
#: query/fragment/params (``urlparse`` would split them off), dot segments, doubled slashes
#: (also right after the root).
_NOT_LITERAL = r"^/|[?#;]|//|(^|/)\.{1,2}(/|$)"


def _read(storage: Storage, source: str) -> pa.Table:
    """Read the inventory file (local path or URI; the table's storage options apply)."""
    lowered = source.lower()
    is_csv = lowered.endswith((".csv", ".csv.gz", ".csv.bz2"))
    try:
        if "://" in source:
            import fsspec

            fs, path = fsspec.core.url_to_fs(source, **storage.storage_options)
            if is_csv:
                with fs.open(path, "rb", compression="infer") as fh:
                    return pacsv.read_csv(fh)
            return pq.read_table(path, filesystem=fs)
        if is_csv:
            return pacsv.read_csv(source)
        return pq.read_table(source)
    except FileNotFoundError:
        raise InvalidArgumentError(f"inventory {source!r} does not exist") from None
    except (pa.ArrowException, OSError, ValueError) as exc:
        kind = "CSV" if is_csv else "Parquet"
        raise InvalidArgumentError(f"inventory {source!r} is not a readable {kind} file: {exc}") from None


def _column(table: pa.Table, name: str, source: str) -> pa.Array:
    col = table.column(name)
    col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if col.null_count:
        raise InvalidArgumentError(f"inventory {source}: column {name!r} has {col.null_count} empty value(s)")
    return col


def _timestamp_millis(col: pa.Array) -> pa.Array:
    """Milliseconds of a timestamp column of any unit, rounded up: a file never looks older than it is."""
    if col.type.unit in ("us", "ns"):
        col = pc.ceil_temporal(col, unit="millisecond")
    return pc.cast(pc.cast(col, pa.timestamp("ms", tz=col.type.tz), safe=False), pa.int64())


def _as_millis(col: pa.Array, source: str) -> pa.Array:
    if pa.types.is_timestamp(col.type):
        return _timestamp_millis(col)
    if pa.types.is_integer(col.type):
        return pc.cast(col, pa.int64())
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        try:
            return _timestamp_millis(pc.cast(col, pa.timestamp("ns")))
        except pa.ArrowInvalid:
            pass
    raise InvalidArgumentError(
        f"inventory {source}: column 'modificationTime' must hold milliseconds since the epoch or timestamps, "
        f"not {col.type}"
    )


def _relativise(path: pa.Array, special: pa.Array, resolver: PathResolver) -> pa.Array:
    """``path`` with its ``special`` rows made table-relative (null: outside the table).

    An inventory of ten million objects spells the root the same way on every row, so
    each spelling of the root (:meth:`PathResolver.literal_prefixes`) is stripped with
    Arrow kernels; only rows no prefix explains plainly (dot segments, another spelling
    of a symlinked root, rows outside) go through :meth:`PathResolver.relative_literal`
    one by one.
    """
    idx = pc.indices_nonzero(special)
    sub = path.take(idx)
    out = pa.nulls(len(sub), pa.string())
    todo = pc.is_valid(sub)
    for prefix in resolver.literal_prefixes():
        hit = pc.and_(todo, pc.starts_with(sub, prefix))
        if not pc.any(hit).as_py():
            continue
        rest = pc.utf8_slice_codeunits(sub, len(prefix))
        plain = pc.and_(hit, pc.invert(pc.match_substring_regex(rest, _NOT_LITERAL)))
        plain = pc.and_(plain, pc.greater(pc.utf8_length(rest), 0))
        out = pc.if_else(plain, rest, out)
        todo = pc.and_(todo, pc.invert(plain))
    slow = pc.indices_nonzero(todo)
    if len(slow):
        fixed = pa.array([resolver.relative_literal(p) for p in sub.take(slow).to_pylist()], pa.string())
        out = pc.replace_with_mask(out, todo, fixed)
    return pc.replace_with_mask(path, special, out)


def read_inventory(
    storage: Storage, inventory: str | pa.Table, rule: HiddenRule, window: PlausibleTimes | None = None
) -> FileListing:
    """The inventory's rows inside this table, as a :class:`FileListing` (hidden paths dropped).

    ``window``: the modification times this table's files can have; a row outside
    it means the column's unit is wrong (seconds read as milliseconds look like
    1970, so every file would look old), and the inventory is refused.
    """
    source = inventory if isinstance(inventory, str) else "<table>"
    table = _read(storage, inventory) if isinstance(inventory, str) else inventory
    if not isinstance(table, pa.Table):
        raise InvalidArgumentError("inventory must be a path to a Parquet/CSV file or a pyarrow.Table")
    names = set(table.column_names)
    if "size" not in names and "length" in names:
        table = table.rename_columns(["size" if n == "length" else n for n in table.column_names])
        names = set(table.column_names)
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise InvalidArgumentError(
            f"inventory {source} lacks column(s) {', '.join(missing)}: it needs path, size (or length) and "
            f"modificationTime, found {', '.join(sorted(names)) or 'none'}"
        )
    if table.num_rows == 0:
        raise InvalidArgumentError(f"inventory {source} has no rows")
    if "isDir" in names:
        is_dir = _column(table, "isDir", source)
        if not pa.types.is_boolean(is_dir.type):
            raise InvalidArgumentError(f"inventory {source}: column 'isDir' must be boolean, not {is_dir.type}")
        table = table.filter(pc.invert(is_dir))
    path = _column(table, "path", source)
    if not (pa.types.is_string(path.type) or pa.types.is_large_string(path.type)):
        raise InvalidArgumentError(f"inventory {source}: column 'path' must be text, not {path.type}")
    size = _column(table, "size", source)
    if not pa.types.is_integer(size.type):
        raise InvalidArgumentError(f"inventory {source}: column 'size' must be an integer, not {size.type}")
    mtime = _as_millis(_column(table, "modificationTime", source), source)
    path = pc.cast(path, pa.string())

    # Plain relative rows are taken as they are; absolute ones must lie under the table root, and
    # relative ones with ``.``/``..`` segments are resolved like log paths (``../x`` is outside).
    special = pc.match_substring_regex(path, _SPECIAL_ROW)
    if pc.any(special).as_py():
        path = _relativise(path, special, PathResolver(storage))
    inside = path.is_valid()
    outside = len(path) - count_true(inside)
    if len(path) and outside == len(path):
        raise InvalidArgumentError(
            f"inventory {source}: none of its {len(path)} file rows lies inside the table at {storage.uri}"
        )
    files = pa.Table.from_arrays([path, pc.cast(size, pa.int64()), mtime], schema=LISTING_SCHEMA).filter(inside)
    hidden = rule.hidden_mask(files.column("path").combine_chunks())
    num_hidden = count_true(hidden)
    files = files.filter(pc.invert(hidden))
    if window is not None:
        bad = first_implausible(
            files.column("path").combine_chunks(), files.column("modificationTime").combine_chunks(), window
        )
        if bad is not None:
            row_path, ms, why = bad
            raise InvalidArgumentError(
                f"inventory {source}: column 'modificationTime' holds {ms} for {row_path!r}; as milliseconds since "
                f"the epoch that is {describe_ms(ms)}, {why}, so no file of this table can have been written then. "
                "Is the column in seconds, microseconds or nanoseconds? Give milliseconds or timestamps"
            )
    # The same object listed twice (inventories are merged from shards): keep the newest row.
    if files.num_rows and pc.count_distinct(files.column("path")).as_py() != files.num_rows:
        files = (
            files.group_by("path")
            .aggregate([("size", "max"), ("modificationTime", "max")])
            .rename_columns(["size", "modificationTime", "path"])
            .select(["path", "size", "modificationTime"])
        )
    return FileListing(files, {}, num_hidden, outside, source="inventory")
