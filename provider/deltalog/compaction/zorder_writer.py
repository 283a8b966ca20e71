"""The local engine's curve rewrite of one bin: a Z-order (:mod:`deltalog.compaction.zorder`) of a partition,
or a liquid clustering (:mod:`deltalog.compaction.liquid`) of a ZCube, whose new files are tagged as clustered."""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
import time
import uuid
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltalog.compaction.bin_writer import BinWriter, open_parquet_writer
from deltalog.compaction.engine_output import BinOutput
from deltalog.compaction.file_names import output_dir, output_file_name
from deltalog.compaction.liquid import PROVIDER, ZCUBE_ID, ZCUBE_ZORDER_BY
from deltalog.compaction.plan import Bin
from deltalog.compaction.zorder import MAX_BITS, hilbert, interleave, rank_scaled
from deltalog.errors import OperationRefusedError

__all__ = ["ZOrderWriter"]

log = logging.getLogger(__name__)

_ZCOL = "__deltalog_zvalue"


def _key_column(batch: pa.RecordBatch, path: list[str]) -> pa.Array:
    """A (possibly nested) column of a conformed batch, by physical path."""
    arr = batch.column(path[0])
    for part in path[1:]:
        arr = pc.struct_field(arr, part)
    return arr


class ZOrderWriter(BinWriter):
    """Rewrites one bin's files along a curve of the plan's columns into target-size files.

    Z-order (``plan.zorder_by``): the Z curve. Liquid clustering (``plan.clustering``): a
    Hilbert curve (one column: its rank), and every new file is tagged as Delta Spark
    tags a ZCube: ``clusteringProvider`` ``liquid``, one ``ZCUBE_ID`` per bin, the columns
    in ``ZCUBE_ZORDER_BY``.
    """

    def _key_paths(self) -> list[list[str]]:
        """The curve columns' physical paths (what the conformed batches call them)."""
        if self.plan.clustering is not None:
            return [list(p) for p in self.plan.clustering.paths]
        logical = {f.name: f for f in self.logical}
        out = []
        for c in self.plan.zorder_by:
            meta = logical[c].metadata or {}
            out.append([meta.get(b"delta.columnMapping.physicalName", c.encode()).decode()])
        return out

    def _curve(self, ranks: list[np.ndarray], bits: int) -> np.ndarray:
        if self.plan.clustering is not None and self.plan.clustering.curve == "hilbert":
            return hilbert(ranks, bits)
        return interleave(ranks, bits)

    def rewrite(self, b: Bin) -> BinOutput:
        started = time.perf_counter()
        self.consts = dict(b.partition_values)
        keys = self._key_paths()
        self.cube_id = str(uuid.uuid4())
        counters = {"rows_in": 0, "dvs": 0, "deleted": 0}
        columns: list[list[pa.Array]] = [[] for _ in keys]
        for f in b.files:
            pf, deleted, source = self._open(f, counters)
            try:
                for batch in self._read(pf, f, deleted):
                    for i, k in enumerate(keys):
                        columns[i].append(_key_column(batch, k))
            finally:
                if source is not pf and hasattr(source, "close"):
                    source.close()
        n = sum(len(a) for a in columns[0]) if columns else 0
        if n == 0:
            return self._output(b, counters, started, 0, [])
        bits = min(MAX_BITS, 63 // len(keys))
        ranks = [rank_scaled(pa.chunked_array(cols, type=cols[0].type), bits) for cols in columns]
        del columns
        z = self._curve(ranks, bits)
        del ranks
        order = np.argsort(z, kind="stable")
        runs = max(1, min(n, math.ceil(b.size / self.plan.target_size)))
        per_run = math.ceil(n / runs)
        run_of_row = np.empty(n, dtype=np.int32)
        run_of_row[order] = (np.arange(n) // per_run).astype(np.int32)
        runs = int(run_of_row.max()) + 1
        del order
        spill = tempfile.mkdtemp(prefix="deltalog-zorder-")
        try:
            self._route(b, run_of_row, z, spill, runs)
            del run_of_row, z
            written = [self._write_run(b, spill, i) for i in range(runs)]
        except BaseException:
            shutil.rmtree(spill, ignore_errors=True)
            raise
        shutil.rmtree(spill, ignore_errors=True)
        adds = [w for w in written if w is not None]
        output = self._output(b, counters, started, n, adds)
        log.info(
            "%s bin %d: %d files, %d rows -> %d files by %s (%.2fs)",
            "clustering" if self.plan.clustering else "Z-order",
            b.id,
            len(b.files),
            n,
            len(adds),
            self.plan.clustering.columns if self.plan.clustering else self.plan.zorder_by,
            output.seconds,
        )
        return output

    def _route(self, b: Bin, run_of_row: np.ndarray, z: np.ndarray, spill: str, runs: int) -> None:
        """Stream every input once more, appending each row (with its Z value) to its run's spill file."""
        schema = self.output.append(pa.field(_ZCOL, pa.uint64()))
        sinks = [pa.OSFile(os.path.join(spill, f"{i}.arrow"), "wb") for i in range(runs)]
        writers = [pa.ipc.new_file(s, schema) for s in sinks]
        counters = {"rows_in": 0, "dvs": 0, "deleted": 0}
        pos = 0
        try:
            for f in b.files:
                pf, deleted, source = self._open(f, counters)
                try:
                    for batch in self._read(pf, f, deleted):
                        m = batch.num_rows
                        ids = run_of_row[pos : pos + m]
                        zs = pa.array(z[pos : pos + m])
                        full = pa.RecordBatch.from_arrays([*batch.columns, zs], schema=schema)
                        pos += m
                        for run in np.unique(ids):
                            writers[int(run)].write_batch(full.filter(pa.array(ids == run)))
                finally:
                    if source is not pf and hasattr(source, "close"):
                        source.close()
        finally:
            for w in writers:
                w.close()
            for s in sinks:
                s.close()
        if pos != len(run_of_row):
            raise OperationRefusedError(f"bin {b.id}: the files changed while being Z-ordered ({pos} rows read again)")

    def _write_run(self, b: Bin, spill: str, i: int) -> tuple[dict[str, Any], str] | None:
        """One run's rows, in Z order, as one new data file: (add action, storage path)."""
        with pa.memory_map(os.path.join(spill, f"{i}.arrow")) as src:
            table = pa.ipc.open_file(src).read_all()
            if not table.num_rows:
                return None
            table = table.take(pc.sort_indices(table.column(_ZCOL))).drop_columns([_ZCOL])
            return self._write_file(b, i, table)

    def _write_file(self, b: Bin, i: int, table: pa.Table) -> tuple[dict[str, Any], str]:
        rel_dir = output_dir(b.files[0].path, b.partition_values)
        name = output_file_name(b.id, self.plan.codec)
        rel = f"{rel_dir}/{name}" if rel_dir else name
        full = self.storage.join(*rel.split("/"))
        if self.storage.is_local:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            sink: Any = full
        else:
            sink = self.storage.fs.open(full, "wb")
        try:
            with open_parquet_writer(sink, self.output, self.plan.codec, True) as writer:
                writer.write_table(table, row_group_size=self.options.row_group_rows)
            metadata = writer.writer.metadata
        except BaseException:
            if hasattr(sink, "close"):
                sink.close()
            self.storage.delete(full)
            raise
        if hasattr(sink, "close"):
            sink.close()
        add = self._add_action(b, rel, full, metadata)
        if self.plan.clustering is not None:
            add["tags"] = {ZCUBE_ID: self.cube_id, ZCUBE_ZORDER_BY: self.plan.clustering.zorder_by_tag}
            add["clusteringProvider"] = PROVIDER
        return add, full
