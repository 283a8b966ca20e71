"""Rewriting one bin with pyarrow: streaming, conformed to the table's schema, deletion vectors applied.

Each bin is read file by file in record batches (``ParquetFile.iter_batches``)
and written with one ``ParquetWriter``; batches are buffered only up to one
output row group (``row_group_bytes`` / ``row_group_rows``, and the worker's share
of ``memory_budget``), so memory is bounded by the budget, never by the bin size.
When fewer bins than cores are left, a bin's reading moves to a thread of its own
that decodes the next batches while the writer encodes (``read_ahead``, a quarter of
the worker's share of the budget). Dictionaries are used only for columns whose
values repeat (``dictionary_columns``: a trial encode of the first row group, once per run).

Every batch is conformed to the table's physical schema (names, types,
nullability, field metadata and ids; columns missing from old files become
nulls; widened types are cast), deletion vectors are applied on the fly, and
the new file's stats come from the footer the writer just produced. The curve
rewrite (:mod:`deltalog.compaction.zorder_writer`) builds on :class:`BinWriter`;
:mod:`deltalog.compaction.local` schedules the bins.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltalog.compaction.engine_output import BinOutput
from deltalog.compaction.file_names import output_dir, output_file_name
from deltalog.compaction.options import LocalOptions
from deltalog.compaction.plan import Bin, CompactionPlan, PlanFile
from deltalog.errors import MissingDataFileError, OperationRefusedError
from deltalog.protocol import geoarrow
from deltalog.protocol.deletion_vectors import read_deletion_vector
from deltalog.protocol.file_stats import stats_from_parquet_metadata, stats_json
from deltalog.protocol.parquet_layout import (
    PARQUET_FIELD_ID,
    from_log_path,
    iceberg_data_schema,
    is_absolute,
    physical_data_schema,
    physical_data_schema_json,
    to_log_path,
)
from deltalog.protocol.partition_values import partition_value_array
from deltalog.protocol.schema import is_geospatial_type, parse_schema_string
from deltalog.storage.filesystem import Storage, is_remote

__all__ = ["BinWriter", "DictionaryChoice", "dictionary_columns", "open_parquet_writer"]

log = logging.getLogger(__name__)

#: A dictionary page larger than this share of a column chunk means the column barely repeats.
_DICT_SHARE = 0.5
#: Rows trial-encoded to choose the dictionary columns, and the fewest that give a verdict.
_DICT_SAMPLE_ROWS = 16 * 1024
_DICT_MIN_VALUES = 10_000


_END = object()


def read_ahead(items: Iterator[pa.RecordBatch], limit: int) -> Iterator[pa.RecordBatch]:
    """``items``, produced by a thread of their own while the caller works on earlier ones.

    Why: pyarrow releases the GIL while decoding and while encoding, so a bin's reader
    and writer then run on two cores at once (a single bin, or the last one, no longer
    leaves a core idle). At most ``limit`` bytes of batches wait in the queue (always at
    least one batch), so read-ahead memory stays within its share of the budget. An
    error in the reader is raised here; when the caller stops early, the reader stops
    and closes ``items`` (its files) in its own thread. ``limit`` 0 reads in turn.
    """
    if limit <= 0:
        yield from items
        return
    cond = threading.Condition()
    queued: list[Any] = []
    state = {"bytes": 0, "stop": False}

    def produce() -> None:
        try:
            for item in items:
                with cond:
                    while state["bytes"] and state["bytes"] + item.nbytes > limit and not state["stop"]:
                        cond.wait()
                    if state["stop"]:
                        return
                    queued.append(item)
                    state["bytes"] += item.nbytes
                    cond.notify_all()
            end: Any = _END
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            end = exc
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()
        with cond:
            queued.append(end)
            cond.notify_all()

    thread = threading.Thread(target=produce, name=f"{threading.current_thread().name}-read", daemon=True)
    thread.start()
    try:
        while True:
            with cond:
                while not queued:
                    cond.wait()
                item = queued.pop(0)
                if isinstance(item, pa.RecordBatch):
                    state["bytes"] -= item.nbytes
                    cond.notify_all()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        with cond:
            state["stop"] = True
            cond.notify_all()
        thread.join()


def storage_path(storage: Storage, log_path: str) -> str:
    """The filesystem path of a file named by an add/remove ``path``."""
    decoded = from_log_path(log_path)
    if is_absolute(log_path):
        return decoded[len("file://") :] if decoded.startswith("file://") else decoded
    return storage.join(*decoded.split("/"))


def dictionary_columns(sample: pa.Table) -> list[str] | bool:
    """The leaf columns worth a dictionary, judged by trial-encoding a bin's first rows.

    A column whose dictionary page would take most of its chunk holds (nearly) unique
    values: pyarrow would hash every value into a dictionary, overflow or barely use it,
    and write a bigger file for more CPU (on the wide benchmark table, dictionaries on
    the unique decimals and doubles cost 60% more encode time for a 5% bigger file).
    So the first ``_DICT_SAMPLE_ROWS`` rows are written uncompressed with a dictionary
    on every column, in memory, and each leaf (nested ones too) keeps its dictionary
    only if its dictionary page is at most ``_DICT_SHARE`` of its chunk. The trial
    costs about 1% of a bin's encode time; fewer rows than ``_DICT_MIN_VALUES`` give no
    verdict and keep pyarrow's default (a dictionary everywhere). Judging the data, not
    the input files' footers, works whatever wrote them (parquet-rs, for one, writes
    fixed-size decimals without dictionaries, which says nothing about their values).
    """
    sample = sample.slice(0, _DICT_SAMPLE_ROWS)
    if sample.num_rows < _DICT_MIN_VALUES:
        return True
    sink = pa.BufferOutputStream()
    pq.write_table(
        sample, sink, compression="none", use_dictionary=True, write_statistics=False, store_decimal_as_integer=True
    )
    group = pq.read_metadata(pa.BufferReader(sink.getvalue())).row_group(0)
    keep = []
    for i in range(group.num_columns):
        c = group.column(i)
        dict_off, data_off = c.dictionary_page_offset, c.data_page_offset
        near_unique = (
            c.has_dictionary_page
            and dict_off is not None
            and data_off is not None
            and data_off > dict_off
            and (data_off - dict_off) > _DICT_SHARE * c.total_compressed_size
        )
        if not near_unique:
            keep.append(c.path_in_schema)
    return True if len(keep) == group.num_columns else keep


def open_parquet_writer(sink: Any, schema: pa.Schema, codec: str, use_dictionary: list[str] | bool) -> pq.ParquetWriter:
    """A writer of compaction output: the table's codec, statistics everywhere, Spark's decimal layout.

    Decimals of precision up to 18 are stored as INT32/INT64 (``store_decimal_as_integer``),
    as Spark writes them (``spark.sql.parquet.writeLegacyFormat=false``): the files keep
    Delta Spark's physical layout, and encoding or decoding a machine integer is cheaper than
    a big-endian fixed-length byte array (on the wide benchmark table, 3% of the rewrite's
    CPU). Min/max statistics come out as the same decimals, so Delta stats are unchanged.
    """
    return pq.ParquetWriter(
        sink,
        schema,
        compression=codec,
        use_dictionary=use_dictionary,
        write_statistics=True,
        store_decimal_as_integer=True,
    )


class DictionaryChoice:
    """One dictionary verdict per run, made from the first row group any bin writes.

    The trial encode costs about 6% of the CPU when every bin makes its own (the
    200 MB wide benchmark: eight bins); the bins of one table share its columns and,
    nearly always, their kinds of values, and a verdict only trades size against speed,
    never correctness.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._verdict: list[str] | bool | None = None

    def __call__(self, sample: pa.Table) -> list[str] | bool:
        with self._lock:
            if self._verdict is None:
                self._verdict = dictionary_columns(sample)
            return self._verdict


class BinWriter:
    """Rewrites one bin into one new data file."""

    def __init__(
        self,
        storage: Storage,
        plan: CompactionPlan,
        options: LocalOptions,
        workers: int = 1,
        core_idle: Callable[[], bool] | None = None,
        dictionaries: DictionaryChoice | None = None,
    ) -> None:
        self.storage = storage
        self.plan = plan
        self.options = options
        self.row_group_bytes = options.worker_row_group_bytes(workers)
        self.read_ahead_bytes = options.worker_read_ahead_bytes(workers)
        #: Whether a core has no bin to work on (then this bin's reading moves to a thread of its own).
        self.core_idle = core_idle or (lambda: True)
        self.dictionaries = dictionaries or DictionaryChoice()
        #: Decoded bytes per row, learnt from the first batch: sizes later batches to the read-ahead.
        self._row_bytes = 0.0
        self.logical = parse_schema_string(plan.schema_string)
        self.id_mode = plan.column_mapping_mode == "id"
        #: Partition columns written into the file (physical name -> logical name): Iceberg compatibility,
        #: or the materializePartitionColumns feature / delta.writePartitionColumnsToParquet.
        self.materialized: dict[str, str] = {}
        self.consts: dict[str, str | None] = {}
        if plan.iceberg_compat or plan.materialize_partitions:
            for f in json.loads(plan.schema_string).get("fields", []):
                if f["name"] in plan.partition_columns:
                    physical = (f.get("metadata") or {}).get("delta.columnMapping.physicalName") or f["name"]
                    self.materialized[physical] = f["name"]
        if plan.iceberg_compat:
            self.target = iceberg_data_schema(plan.schema_string, plan.partition_columns)
        else:
            self.target = physical_data_schema(
                plan.schema_string,
                plan.partition_columns,
                plan.column_mapping_mode,
                materialize_partitions=plan.materialize_partitions,
            )
        #: Geometry/geography columns (physical name -> geoarrow.wkb type of their CRS and edges): read
        #: and written annotated, so the new file keeps the GEOMETRY/GEOGRAPHY logical type Delta Spark reads.
        self.geo = self._geospatial_types(plan)
        if self.geo:
            geoarrow.register()
            self.target = pa.schema(
                [f.with_type(self.geo[f.name]) if f.name in self.geo else f for f in self.target],
                metadata=self.target.metadata,
            )
        #: Row tracking enabled: every row's stable row ID and commit version go into these hidden columns.
        self.rt_columns: tuple[str, str] | None = None
        self.output = self.target
        if plan.row_tracking:
            self.rt_columns = (plan.row_tracking["row_id_column"], plan.row_tracking["row_commit_version_column"])
            self.output = self.target.append(pa.field(self.rt_columns[0], pa.int64())).append(
                pa.field(self.rt_columns[1], pa.int64())
            )

    def _geospatial_types(self, plan: CompactionPlan) -> dict[str, pa.DataType]:
        """The top-level geospatial columns of the files written, by physical name, with their Arrow types.

        Nested ones never get here: :func:`deltalog.protocol.table_protocol.refuse_geospatial_writes`
        refuses such a table before planning.
        """
        doc = physical_data_schema_json(
            plan.schema_string,
            plan.partition_columns,
            plan.column_mapping_mode,
            materialize_partitions=plan.materialize_partitions,
        )
        geo = {f["name"]: geoarrow.wkb_type(f["type"]) for f in doc["fields"] if is_geospatial_type(f["type"])}
        missing = sorted(set(geo) - set(self.target.names))
        if missing:
            raise OperationRefusedError(f"geospatial column {missing[0]!r} has no place in the files written")
        return geo

    # --- reading --------------------------------------------------------------------

    def _resolve(self, file_schema: pa.Schema) -> dict[str, str]:
        """Target column name -> column name in this file (by field id in id mode, else by name)."""
        names = set(file_schema.names)
        by_id: dict[bytes, str] = {}
        if self.id_mode:
            for f in file_schema:
                fid = (f.metadata or {}).get(PARQUET_FIELD_ID)
                if fid is not None:
                    by_id[fid] = f.name
        out: dict[str, str] = {}
        for f in self.target:
            fid = (f.metadata or {}).get(PARQUET_FIELD_ID)
            if self.id_mode and fid is not None and fid in by_id:
                out[f.name] = by_id[fid]
            elif f.name in names:
                out[f.name] = f.name
        return out

    def _conform(self, batch: pa.RecordBatch, mapping: dict[str, str], source: str) -> pa.RecordBatch:
        arrays = []
        n = batch.num_rows
        for f in self.target:
            src = mapping.get(f.name)
            if f.name in self.materialized:  # the bin's partition value, the same in every row
                # partitionValues are keyed by physical name under column mapping.
                value = self.consts.get(f.name, self.consts.get(self.materialized[f.name]))
                arr: pa.Array = partition_value_array(value, n, f.type)
            elif f.name in self.geo:  # WKB as read, annotated with the table's CRS (and edges)
                wkb = pa.nulls(n, pa.binary()) if src is None else geoarrow.wkb_storage(batch.column(src))
                arr = pa.ExtensionArray.from_storage(f.type, wkb)
            elif src is None:
                arr = pa.nulls(n, f.type)
            else:
                arr = batch.column(src)
                if not arr.type.equals(f.type):
                    try:
                        arr = arr.cast(f.type)
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                        raise OperationRefusedError(
                            f"{source}: column {f.name!r} of type {arr.type} cannot be converted to the table's "
                            f"{f.type} ({exc})"
                        ) from None
            if not f.nullable and arr.null_count:
                raise OperationRefusedError(
                    f"{source}: column {f.name!r} holds nulls but the table schema declares it NOT NULL"
                )
            arrays.append(arr)
        return pa.RecordBatch.from_arrays(arrays, schema=self.target)

    def _add_action(self, b: Bin, rel: str, full: str, metadata: Any) -> dict[str, Any]:
        """The add action of a new file of bin ``b`` (``dataChange`` false, stats from its footer)."""
        info = self.storage.info(full)
        stats = stats_from_parquet_metadata(
            metadata, self.logical, self.plan.partition_columns, configuration=self.plan.stats_configuration
        )
        return {
            "path": to_log_path(rel),
            "partitionValues": dict(b.partition_values),
            "size": info.size,
            "modificationTime": info.modification_time,
            "dataChange": False,
            "stats": stats_json(stats),
        }

    def _output(
        self, b: Bin, counters: dict[str, int], started: float, rows_out: int, written: list[tuple[dict[str, Any], str]]
    ) -> BinOutput:
        """The bin's outcome once its rewrite is over: the new files (add action, storage path), if any."""
        return BinOutput(
            bin_id=b.id,
            add=written[0][0] if written else None,
            rows_in=counters["rows_in"],
            rows_out=rows_out,
            bytes_in=b.size,
            deletion_vectors=counters["dvs"],
            deleted_rows=counters["deleted"],
            seconds=time.perf_counter() - started,
            storage_path=written[0][1] if written else None,
            more_adds=[a for a, _ in written[1:]],
            more_paths=[p for _, p in written[1:]],
        )

    def _open(self, f: PlanFile, counters: dict[str, int]) -> tuple[pq.ParquetFile, np.ndarray | None, Any]:
        """The input file, its deleted row positions (if it has a DV) and the handle to close."""
        path = storage_path(self.storage, f.path)
        deleted = None
        if f.deletion_vector:
            deleted = read_deletion_vector(self.storage, f.deletion_vector)
            counters["dvs"] += 1
            counters["deleted"] += len(deleted)
        if is_absolute(f.path) and is_remote(path):
            # A file outside the table (e.g. a shallow clone): same filesystem options as the table.
            source: Any = fsspec.open(path, "rb", **self.storage.storage_options).open()
        else:
            source = path if self.storage.is_local or is_absolute(f.path) else self.storage.open_input(path)
        try:
            # Geospatial columns read as geoarrow.wkb (their logical type kept), only when the table has some.
            extensions = {"arrow_extensions_enabled": True} if self.geo else {}
            pf = pq.ParquetFile(source, coerce_int96_timestamp_unit="us", pre_buffer=True, **extensions)
        except FileNotFoundError:
            raise MissingDataFileError(f"data file {f.path} does not exist; the table is missing a file") from None
        except (pa.ArrowInvalid, OSError) as exc:
            raise OperationRefusedError(f"data file {f.path} is not readable Parquet: {exc}") from None
        counters["rows_in"] += pf.metadata.num_rows
        return pf, deleted, source

    def _read(self, pf: pq.ParquetFile, f: PlanFile, deleted: np.ndarray | None) -> Iterator[pa.RecordBatch]:
        """The file's live rows, conformed to the table schema, batch by batch."""
        mapping = self._resolve(pf.schema_arrow)
        # With no column left to read (all dropped since the file was written) pyarrow still
        # yields the row counts, so the rows survive as nulls.
        columns = sorted(set(mapping.values()))
        if self.rt_columns is not None:
            self._check_row_tracking(f)
            columns += [c for c in self.rt_columns if c in pf.schema_arrow.names and c not in columns]
        offset = 0
        md = pf.metadata
        if not self._row_bytes and md.num_rows and md.num_row_groups:
            # A first guess until a decoded batch tells: the footer's uncompressed bytes per row.
            self._row_bytes = sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups)) / md.num_rows
            learnt = False
        else:
            learnt = bool(self._row_bytes)
        for batch in pf.iter_batches(batch_size=self._batch_rows(), columns=columns, use_threads=False):
            n = batch.num_rows
            if n and not learnt:
                self._row_bytes, learnt = batch.nbytes / n, True
            # Row IDs come from physical positions, so they are taken before deleted rows are dropped.
            tracked = self._stable_row_tracking(batch, f, offset) if self.rt_columns is not None else []
            if deleted is not None and len(deleted):
                lo, hi = np.searchsorted(deleted, [offset, offset + n])
                if hi > lo:
                    keep = np.ones(n, dtype=bool)
                    keep[(deleted[lo:hi] - np.uint64(offset)).astype(np.int64)] = False
                    mask = pa.array(keep)
                    batch = batch.filter(mask)
                    tracked = [a.filter(mask) for a in tracked]
            offset += n
            if batch.num_rows:
                out = self._conform(batch, mapping, f.path)
                if tracked:
                    out = pa.RecordBatch.from_arrays([*out.columns, *tracked], schema=self.output)
                yield out

    def _batch_rows(self) -> int:
        """Rows per decoded batch: ``batch_rows``, fewer once a batch would exceed half the read-ahead."""
        if not self.read_ahead_bytes or not self._row_bytes:
            return self.options.batch_rows
        return min(self.options.batch_rows, max(1024, int(self.read_ahead_bytes / 2 / self._row_bytes)))

    def _check_row_tracking(self, f: PlanFile) -> None:
        if f.base_row_id is None or f.default_row_commit_version is None:
            raise OperationRefusedError(
                f"{f.path}: row tracking is enabled but the file has no baseRowId/defaultRowCommitVersion; "
                "its rows' IDs cannot be preserved"
            )

    def _stable_row_tracking(self, batch: pa.RecordBatch, f: PlanFile, offset: int) -> list[pa.Array]:
        """Each row's stable row ID and row commit version (PROTOCOL.md "Reader Requirements for Row Tracking").

        The materialised value where the file has one, else the default: ``baseRowId`` plus
        the row's position in the file, and the file's ``defaultRowCommitVersion``.
        """
        assert self.rt_columns is not None and f.base_row_id is not None and f.default_row_commit_version is not None
        n = batch.num_rows
        fresh_ids = pa.array(np.arange(f.base_row_id + offset, f.base_row_id + offset + n, dtype=np.int64))
        fresh_versions = pa.array(np.full(n, f.default_row_commit_version, dtype=np.int64))
        out = []
        for name, fresh in zip(self.rt_columns, (fresh_ids, fresh_versions)):
            if name in batch.schema.names:
                out.append(pc.coalesce(batch.column(name).cast(pa.int64()), fresh))
            else:
                out.append(fresh)
        return out

    # --- writing --------------------------------------------------------------------

    def _bin_batches(self, b: Bin, counters: dict[str, int]) -> Iterator[pa.RecordBatch]:
        """Every live row of the bin's files, conformed, batch by batch (each file closed after it)."""
        for f in b.files:
            pf, deleted, source = self._open(f, counters)
            try:
                yield from self._read(pf, f, deleted)
            finally:
                if source is not pf and hasattr(source, "close"):
                    source.close()

    def _batches(self, b: Bin, counters: dict[str, int]) -> Iterator[pa.RecordBatch]:
        """The bin's batches: read in turn while every core has a bin, read ahead once one is idle.

        A reader thread only pays when a core would otherwise wait (one bin, or the last
        ones): while every core rewrites a bin of its own, it would add thread hand-offs
        and another thread's allocator caches (about 40 MB of resident memory on the wide
        benchmark) for no speed.
        """
        batches = self._bin_batches(b, counters)
        if not self.read_ahead_bytes:
            yield from batches
            return
        if not self.core_idle():
            for batch in batches:
                yield batch
                if self.core_idle():
                    break
            else:
                return
        yield from read_ahead(batches, self.read_ahead_bytes)

    def _open_writer(self, sink: Any, sample: pa.Table | None) -> pq.ParquetWriter:
        """The output file's writer: the table's codec, statistics everywhere, dictionaries where they pay."""
        return open_parquet_writer(
            sink, self.output, self.plan.codec, True if sample is None else self.dictionaries(sample)
        )

    def rewrite(self, b: Bin) -> BinOutput:
        started = time.perf_counter()
        self.consts = dict(b.partition_values)
        rel_dir = output_dir(b.files[0].path, b.partition_values)
        name = output_file_name(b.id, self.plan.codec)
        rel = f"{rel_dir}/{name}" if rel_dir else name
        full = self.storage.join(*rel.split("/"))
        counters = {"rows_in": 0, "dvs": 0, "deleted": 0}
        if self.storage.is_local:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            sink: Any = full
        else:
            sink = self.storage.fs.open(full, "wb")
        writer: pq.ParquetWriter | None = None
        rows_out = 0
        buf: list[pa.RecordBatch] = []
        buf_rows = buf_bytes = 0

        def flush() -> None:
            nonlocal writer, rows_out, buf, buf_rows, buf_bytes
            table = pa.Table.from_batches(buf, schema=self.output)
            if writer is None:  # the first row group's rows decide which columns get dictionaries
                writer = self._open_writer(sink, table)
            writer.write_table(table, row_group_size=buf_rows)
            rows_out += buf_rows
            buf, buf_rows, buf_bytes = [], 0, 0

        try:
            if not b.files:
                raise OperationRefusedError(f"bin {b.id} has no input files")
            for batch in self._batches(b, counters):
                buf.append(batch)
                buf_rows += batch.num_rows
                buf_bytes += batch.nbytes
                if buf_rows >= self.options.row_group_rows or buf_bytes >= self.row_group_bytes:
                    flush()
            if buf:
                flush()
            if writer is None:  # every row was deleted: an empty file, removed below
                writer = self._open_writer(sink, None)
            writer.close()
            metadata = writer.writer.metadata
        except BaseException:
            if writer is not None and writer.is_open:
                writer.close()
            if hasattr(sink, "close"):
                sink.close()
            self.storage.delete(full)
            raise
        if hasattr(sink, "close"):
            sink.close()
        written: list[tuple[dict[str, Any], str]] = []
        if rows_out == 0:  # every row was deleted: the inputs go, nothing replaces them
            self.storage.delete(full)
        else:
            written.append((self._add_action(b, rel, full, metadata), full))
        output = self._output(b, counters, started, rows_out, written)
        log.info(
            "bin %d: %d files, %d bytes -> %s (%d rows, %.2fs)",
            b.id,
            len(b.files),
            b.size,
            rel if rows_out else "nothing (all rows deleted)",
            rows_out,
            output.seconds,
        )
        return output
