"""A storage inventory (S3 Inventory, Azure blob inventory, ...) instead of a listing.

Listing a table of millions of objects can take hours; cloud providers produce
a daily inventory of a bucket for a few cents. An inventory is a Parquet or CSV
file (or a directory of Parquet files) with one row per object: ``path``,
``size`` (or Delta Spark's ``length``), ``modificationTime`` (milliseconds since
the epoch, or a timestamp; a time no file of the table can have, such as seconds
read as milliseconds, is refused: :mod:`deltalog.vacuuming.times`) and optionally ``isDir``. Paths may be absolute
(``s3://bucket/table/part-0.parquet``) or relative to the table root; rows
outside the table are ignored.

An inventory is only ever a subset of the truth: a file written after it was
taken is simply not in it, so it is never deleted. A malformed inventory is
refused before anything is deleted.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from deltalog._arrow_utils import count_true
from deltalog.errors import InvalidArgumentError
from deltalog.storage.filesystem import Storage
from deltalog.vacuuming.listing import LISTING_SCHEMA, FileListing
from deltalog.vacuuming.paths import PathResolver
from deltalog.vacuuming.times import PlausibleTimes, describe_ms, first_implausible
from deltalog.write_checks.hidden_paths import HiddenRule

__all__ = ["InventoryScan", "newest_per_path", "read_inventory", "scan_inventory"]

REQUIRED = ("path", "size", "modificationTime")
#: Rows that are not plain relative paths: absolute (``/``, ``scheme://``, Hadoop's ``file:/``)
#: or with ``.``/``..`` segments.
_SPECIAL_ROW = r"^/|^[A-Za-z][A-Za-z0-9+.-]+:/|(^|/)\.{1,2}(/|$)"
#: What a root prefix may not be followed by for the prefix to be stripped as it is: URL
#: query/fragment/params (``urlparse`` would split them off), dot segments, doubled slashes
#: (also right after the root).
_NOT_LITERAL = r"^/|[?#;]|//|(^|/)\.{1,2}(/|$)"


#: Rows converted at a time: bounds the transient copies of the path column (an inventory of
#: ten million objects is read and made table-relative batch by batch).
BATCH_ROWS = 1 << 18


def _open(storage: Storage, source: str) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The inventory's schema and its batches (local path or URI; the table's storage options apply).

    Parquet (a file or a folder of files) is streamed; CSV is read whole.
    """
    lowered = source.lower()
    is_csv = lowered.endswith((".csv", ".csv.gz", ".csv.bz2"))
    kind = "CSV" if is_csv else "Parquet"

    def failed(exc: BaseException) -> InvalidArgumentError:
        if isinstance(exc, FileNotFoundError):
            return InvalidArgumentError(f"inventory {source!r} does not exist")
        return InvalidArgumentError(f"inventory {source!r} is not a readable {kind} file: {exc}")

    try:
        fs = None
        path = source
        if "://" in source:
            import fsspec

            fs, path = fsspec.core.url_to_fs(source, **storage.storage_options)
        if is_csv:
            if fs is not None:
                with fs.open(path, "rb", compression="infer") as fh:
                    table = pacsv.read_csv(fh)
            else:
                table = pacsv.read_csv(path)
            return table.schema, iter(table.to_batches(max_chunksize=BATCH_ROWS))
        if fs is not None:
            return _remote_parquet(fs, path, failed)
        import pyarrow.dataset as ds

        if not os.path.exists(path):
            raise FileNotFoundError(path)
        # A local inventory: Arrow's own filesystem (no Python callbacks from its I/O threads).
        dataset = ds.dataset(path, format="parquet")
        schema = dataset.schema
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise failed(exc) from None

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            # No read-ahead: a 10-million-row inventory would otherwise be decoded well ahead of its use.
            yield from dataset.to_batches(batch_size=BATCH_ROWS, batch_readahead=0, fragment_readahead=0)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise failed(exc) from None

    return schema, batches()


def _remote_parquet(
    fs: Any, path: str, failed: Callable[[BaseException], InvalidArgumentError]
) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """A Parquet inventory on an object store (a file, or a folder of files, ``_``/``.`` names skipped as a
    dataset would; each file's batches in the first file's schema), read file by file on this thread. Not a pyarrow dataset over the fsspec filesystem: its
    scan calls back into Python from Arrow's I/O threads, which can abort the process at its exit
    (apache/arrow#34314)."""
    import pyarrow.parquet as pq

    if fs.isdir(path):
        found = fs.find(path)
        files = sorted(
            f
            for f in found
            if not any(part.startswith(("_", ".")) for part in f[len(path.rstrip("/")) :].split("/") if part)
        )
        if not files:
            raise ValueError("the folder holds no Parquet file")
    else:
        files = [path]

    def first_schema() -> pa.Schema:
        with fs.open(files[0], "rb") as fh:
            return pq.ParquetFile(fh).schema_arrow

    schema = first_schema()

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            for name in files:
                with fs.open(name, "rb") as fh:
                    for batch in pq.ParquetFile(fh).iter_batches(batch_size=BATCH_ROWS, use_threads=False):
                        yield batch if batch.schema.equals(schema) else batch.cast(schema)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise failed(exc) from None

    return schema, batches()


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
    every = count_true(special) == len(path)  # the usual inventory: every row absolute, no copy needed
    sub = path if every else path.take(pc.indices_nonzero(special))
    out = pa.nulls(len(sub), pa.string())
    todo = pc.is_valid(sub)
    for prefix in resolver.literal_prefixes():
        hit = pc.and_(todo, pc.starts_with(sub, prefix))
        if not pc.any(hit).as_py():
            continue
        # The prefix matched whole, so cutting its bytes leaves valid UTF-8 (no decoding, unlike utf8_slice).
        rest = pc.binary_slice(sub.view(pa.binary()), len(prefix.encode()), (1 << 31) - 1).view(pa.string())
        plain = pc.and_(hit, pc.invert(pc.match_substring_regex(rest, _NOT_LITERAL)))
        plain = pc.and_(plain, pc.greater(pc.utf8_length(rest), 0))
        if count_true(plain) == len(sub):  # every row spells the root this way (the usual inventory): no copy
            return rest if every else pc.replace_with_mask(path, special, rest)
        out = pc.if_else(plain, rest, out)
        todo = pc.and_(todo, pc.invert(plain))
    slow = pc.indices_nonzero(todo)
    if len(slow):
        fixed = pa.array([resolver.relative_literal(p) for p in sub.take(slow).to_pylist()], pa.string())
        out = pc.replace_with_mask(out, todo, fixed)
    return out if every else pc.replace_with_mask(path, special, out)


def _check_times(part: pa.Table, window: PlausibleTimes, source: str) -> None:
    bad = first_implausible(
        part.column("path").combine_chunks(), part.column("modificationTime").combine_chunks(), window
    )
    if bad is not None:
        row_path, ms, why = bad
        raise InvalidArgumentError(
            f"inventory {source}: column 'modificationTime' holds {ms} for {row_path!r}; as milliseconds since "
            f"the epoch that is {describe_ms(ms)}, {why}, so no file can have been written then. "
            "Is the column in seconds, microseconds or nanoseconds? Give milliseconds or timestamps"
        )


@dataclass
class InventoryScan:
    """A validated inventory, read a batch at a time: :meth:`parts` yields the rows inside the table.

    The counters fill as the parts are read; :meth:`finish` (after the last part) refuses
    an inventory whose problems show only once every row was seen (empty values, no row,
    no row inside the table). Nothing may be deleted on a plan made from a scan that did
    not finish.
    """

    storage: Storage
    source: str
    schema: pa.Schema
    batches: Iterator[pa.RecordBatch]
    rule: HiddenRule
    window: PlausibleTimes | None = None
    #: Rows read, and the empty values per column among them (refused by :meth:`finish`).
    rows: int = 0
    nulls: dict[str, int] = field(default_factory=dict)
    #: Rows that are files (not ``isDir``), files outside the table root, hidden files.
    file_rows: int = 0
    outside: int = 0
    hidden: int = 0
    _resolver: PathResolver | None = field(default=None, repr=False)

    @property
    def size_name(self) -> str:
        names = set(self.schema.names)
        return "size" if "size" in names or "length" not in names else "length"

    def parts(self) -> Iterator[pa.Table]:
        """Table-relative, non-hidden rows (``LISTING_SCHEMA``), one table per batch, times checked."""
        for batch in self.batches:
            part = self.part(batch)
            if part is not None:
                yield part

    def part(self, batch: pa.RecordBatch) -> pa.Table | None:
        """One batch's rows inside the table (None once an empty value was seen: :meth:`finish` refuses).

        What :meth:`parts` does per batch; the Spark engine calls it on its own batches.
        """
        names = set(self.schema.names)
        size_name = self.size_name
        columns = ["path", size_name, "modificationTime"] + (["isDir"] if "isDir" in names else [])
        if not self.nulls:
            self.nulls = dict.fromkeys(columns, 0)
        if self._resolver is None:
            self._resolver = PathResolver(self.storage)
        batch = batch.select(columns)
        self.rows += batch.num_rows
        for c in columns:
            self.nulls[c] += batch.column(c).null_count
        if any(self.nulls.values()) or not batch.num_rows:
            return None  # refused by finish(), once every empty value is counted
        if "isDir" in names:
            batch = batch.filter(pc.invert(batch.column("isDir")))
        path = pc.cast(batch.column("path"), pa.string())
        mtime = _as_millis(batch.column("modificationTime"), self.source)
        # Plain relative rows are taken as they are; absolute ones must lie under the table root, and
        # relative ones with ``.``/``..`` segments are resolved like log paths (``../x`` is outside).
        special = pc.match_substring_regex(path, _SPECIAL_ROW)
        if pc.any(special).as_py():
            path = _relativise(path, special, self._resolver)
        inside = path.is_valid()
        self.file_rows += len(path)
        outside = len(path) - count_true(inside)
        self.outside += outside
        part = pa.Table.from_arrays([path, pc.cast(batch.column(size_name), pa.int64()), mtime], schema=LISTING_SCHEMA)
        if outside:
            part = part.filter(inside)
        hidden = self.rule.hidden_mask(part.column("path").combine_chunks())
        num_hidden = count_true(hidden)
        self.hidden += num_hidden
        if num_hidden:
            part = part.filter(pc.invert(hidden))
        if self.window is not None:
            _check_times(part, self.window, self.source)
        return part

    def finish(self) -> None:
        """Refuse what only the whole inventory shows (call after the last part)."""
        if self.rows == 0:
            raise InvalidArgumentError(f"inventory {self.source} has no rows")
        for c in ("isDir", "path", self.size_name, "modificationTime"):
            if self.nulls.get(c):
                raise InvalidArgumentError(f"inventory {self.source}: column {c!r} has {self.nulls[c]} empty value(s)")
        if self.file_rows and self.outside == self.file_rows:
            raise InvalidArgumentError(
                f"inventory {self.source}: none of its {self.file_rows} file rows lies inside the table at "
                f"{self.storage.uri}"
            )


def scan_inventory(
    storage: Storage, inventory: str | pa.Table, rule: HiddenRule, window: PlausibleTimes | None = None
) -> InventoryScan:
    """Open ``inventory`` and check its columns; its rows are read by :meth:`InventoryScan.parts`.

    ``window``: the modification times a file can have (in milliseconds); a row outside
    it means the column's unit is wrong (seconds read as milliseconds look like
    1970, so every file would look old), and the inventory is refused.
    """
    source = inventory if isinstance(inventory, str) else "<table>"
    if isinstance(inventory, str):
        schema, batches = _open(storage, inventory)
    elif isinstance(inventory, pa.Table):
        schema, batches = inventory.schema, iter(inventory.to_batches(max_chunksize=BATCH_ROWS))
    else:
        raise InvalidArgumentError("inventory must be a path to a Parquet/CSV file or a pyarrow.Table")
    names = set(schema.names)
    size_name = "size" if "size" in names or "length" not in names else "length"
    missing = [c for c in REQUIRED if (size_name if c == "size" else c) not in names]
    if missing:
        raise InvalidArgumentError(
            f"inventory {source} lacks column(s) {', '.join(missing)}: it needs path, size (or length) and "
            f"modificationTime, found {', '.join(sorted(names)) or 'none'}"
        )
    types = {"path": schema.field("path").type, "size": schema.field(size_name).type}
    if "isDir" in names and not pa.types.is_boolean(schema.field("isDir").type):
        raise InvalidArgumentError(
            f"inventory {source}: column 'isDir' must be boolean, not {schema.field('isDir').type}"
        )
    if not (pa.types.is_string(types["path"]) or pa.types.is_large_string(types["path"])):
        raise InvalidArgumentError(f"inventory {source}: column 'path' must be text, not {types['path']}")
    if not pa.types.is_integer(types["size"]):
        raise InvalidArgumentError(f"inventory {source}: column 'size' must be an integer, not {types['size']}")
    return InventoryScan(storage, source, schema, batches, rule, window)


def newest_per_path(files: pa.Table) -> pa.Table:
    """One row per path: the same object listed twice (inventories are merged from shards) keeps its newest row."""
    if not files.num_rows or pc.count_distinct(files.column("path")).as_py() == files.num_rows:
        return files
    newest = files.group_by("path").aggregate([("size", "max"), ("modificationTime", "max")])
    # By name: where the key column lands among the aggregates differs between pyarrow releases.
    return pa.Table.from_arrays(
        [newest.column("path"), newest.column("size_max"), newest.column("modificationTime_max")], schema=LISTING_SCHEMA
    )


def read_inventory(
    storage: Storage, inventory: str | pa.Table, rule: HiddenRule, window: PlausibleTimes | None = None
) -> FileListing:
    """The inventory's rows inside this table, as one :class:`FileListing` (hidden paths dropped).

    Holds every row at once; vacuum itself streams :func:`scan_inventory` instead.
    """
    scan = scan_inventory(storage, inventory, rule, window)
    parts = list(scan.parts())
    scan.finish()
    files = pa.concat_tables(parts) if parts else LISTING_SCHEMA.empty_table()
    del parts
    return FileListing(newest_per_path(files), {}, scan.hidden, scan.outside, source="inventory")
