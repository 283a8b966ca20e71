"""Synthetic Delta tables of ten million live files (issue 19 §2), made with vectorised Arrow.

No engine writes these tables and there are no data files: the log and the checkpoint
are generated directly, so a ten-million-file table takes about a minute to make
instead of hours. Every table is valid per PROTOCOL.md and consistent from version 0:

- ``00000000000000000000.json``: commitInfo, protocol, metaData (partitioned by ``part``,
  ``--partitions`` values).
- versions ``1 .. C`` (``C = files / adds_per_commit``): ``adds_per_commit`` adds each,
  file ``k`` at ``part=p{k % partitions}/part-{k:09d}-...-{k:012d}.c000.snappy.parquet``
  with a ~80-byte stats JSON (numRecords, min/max/nullCount of ``id``). No removes.
- a checkpoint at version ``C`` holding the ``files`` adds:
  ``classic``: multi-part (``{C}.checkpoint.{i}.{n}.parquet``, ``--part-rows`` adds per
  part, one 1 Mi-row row group each, snappy, as Delta Spark writes them);
  ``v2``: protocol 3/7 with ``v2Checkpoint``, a UUID-named JSON top-level checkpoint
  (checkpointMetadata, protocol, metaData, one ``sidecar`` per file) and the adds in
  Parquet sidecars under ``_delta_log/_sidecars`` (``--part-rows`` each).
- ``--tail N`` (the "200,000 JSON commits" table): N more single-file commits after the
  checkpoint; every fifth also removes the oldest live file (a file of the checkpoint).
- ``_last_checkpoint`` pointing at version ``C``.

Timestamps start on 2023-01-01 (one second per version), and every log file's
modification time is its commit's timestamp, so log cleanup finds versions ``0 .. C-1``
expired (``delta.logRetentionDuration`` defaults to 30 days) and vacuum's default
retention (7 days) lets every unreferenced file go.

**Inventory** (for a full vacuum without listing ten million objects): beside the table,
``inventory.parquet`` with one row per data file the table would hold on storage —
every live file plus ``--orphans`` unreferenced ones (``part=p*/orphan-*.parquet``,
dated 2023) — with Delta Spark's inventory schema: ``path`` (absolute ``file:`` URI),
``length``, ``isDir``, ``modificationTime`` (ms).

Cached under ``~/.cache/deltalog/bench-10m-v{GENERATOR_VERSION}-{kind}-{files}[-tail{N}]``
(``DELTALOG_BENCH_10M_CACHE`` overrides the parent); a ``.complete`` marker with the
parameters tells a finished table from an interrupted one. Bump ``GENERATOR_VERSION``
whenever the output changes. The table itself is the ``table`` folder inside.

Run alone: ``python benchmarks/tenmillion_table.py --kind classic --files 10000000``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

log = logging.getLogger("benchmarks.tenmillion_table")

GENERATOR_VERSION = 1
CACHE_ROOT = Path(os.environ.get("DELTALOG_BENCH_10M_CACHE", Path.home() / ".cache" / "deltalog"))
START_MS = 1_672_531_200_000  # 2023-01-01T00:00:00Z
TABLE_ID = str(uuid.UUID(int=0x10_000_000))
SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "value", "type": "string", "nullable": True, "metadata": {}},
        {"name": "part", "type": "string", "nullable": True, "metadata": {}},
    ],
}
#: Rows generated (and written) per Arrow batch: bounds the generator's memory.
CHUNK = 1 << 20


def table_dir(kind: str, files: int, tail: int = 0) -> Path:
    """The cache folder of one table shape (the Delta table is its ``table`` subfolder)."""
    suffix = f"-tail{tail}" if tail else ""
    return CACHE_ROOT / f"bench-10m-v{GENERATOR_VERSION}-{kind}-{files}{suffix}"


def ts_of(version: int) -> int:
    return START_MS + version * 1000


# --- the actions, as Arrow ---------------------------------------------------------------


def _types() -> dict[str, Any]:
    import pyarrow as pa

    smap = pa.map_(pa.string(), pa.string())
    dv = pa.struct(
        [
            ("storageType", pa.string()),
            ("pathOrInlineDv", pa.string()),
            ("offset", pa.int32()),
            ("sizeInBytes", pa.int32()),
            ("cardinality", pa.int64()),
        ]
    )
    add = pa.struct(
        [
            ("path", pa.string()),
            ("partitionValues", smap),
            ("size", pa.int64()),
            ("modificationTime", pa.int64()),
            ("dataChange", pa.bool_()),
            ("stats", pa.string()),
            ("tags", smap),
            ("deletionVector", dv),
        ]
    )
    remove = pa.struct(
        [
            ("path", pa.string()),
            ("deletionTimestamp", pa.int64()),
            ("dataChange", pa.bool_()),
            ("extendedFileMetadata", pa.bool_()),
            ("partitionValues", smap),
            ("size", pa.int64()),
            ("deletionVector", dv),
        ]
    )
    protocol = pa.struct(
        [
            ("minReaderVersion", pa.int32()),
            ("minWriterVersion", pa.int32()),
            ("readerFeatures", pa.list_(pa.string())),
            ("writerFeatures", pa.list_(pa.string())),
        ]
    )
    metadata = pa.struct(
        [
            ("id", pa.string()),
            ("name", pa.string()),
            ("description", pa.string()),
            ("format", pa.struct([("provider", pa.string()), ("options", smap)])),
            ("schemaString", pa.string()),
            ("partitionColumns", pa.list_(pa.string())),
            ("createdTime", pa.int64()),
            ("configuration", smap),
        ]
    )
    txn = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])
    return {"add": add, "remove": remove, "protocol": protocol, "metaData": metadata, "txn": txn, "map": smap}


def protocol_action(kind: str) -> dict[str, Any]:
    if kind == "v2":
        return {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["v2Checkpoint"],
            "writerFeatures": ["v2Checkpoint"],
        }
    return {"minReaderVersion": 1, "minWriterVersion": 2}


def metadata_action(partitions: int) -> dict[str, Any]:
    return {
        "id": TABLE_ID,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(SCHEMA),
        "partitionColumns": ["part"],
        "configuration": {},
        "createdTime": ts_of(0),
    }


class FileColumns:
    """The columns of files ``start .. stop-1``.

    File ``k`` is added by version ``base_version + (k - base_k) // adds_per_commit`` and
    its modification time is that commit's timestamp.
    """

    def __init__(
        self, start: int, stop: int, partitions: int, adds_per_commit: int, base_version: int = 1, base_k: int = 0
    ) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        k = np.arange(start, stop, dtype=np.int64)
        ks = pc.cast(pa.array(k), pa.string())
        self.n = stop - start
        self.part = pc.binary_join_element_wise(
            "p", pc.utf8_lpad(pc.cast(pa.array(k % partitions), pa.string()), 3, "0"), ""
        )
        self.path = pc.binary_join_element_wise(
            "part=",
            self.part,
            "/part-",
            pc.utf8_lpad(ks, 9, "0"),
            "-5f3e-4c1a-9b2d-",
            pc.utf8_lpad(ks, 12, "0"),
            ".c000.snappy.parquet",
            "",
        )
        self.size = pa.array(1024 + k % 4096, pa.int64())
        self.mtime = pa.array(START_MS + (base_version + (k - base_k) // adds_per_commit) * 1000, pa.int64())
        self.stats = pc.binary_join_element_wise(
            '{"numRecords":100,"minValues":{"id":',
            ks,
            '},"maxValues":{"id":',
            pc.cast(pa.array(k + 99), pa.string()),
            '},"nullCount":{"id":0}}',
            "",
        )

    def partition_values(self) -> Any:
        import numpy as np
        import pyarrow as pa

        offsets = pa.array(np.arange(self.n + 1, dtype=np.int32))
        keys = pa.array(np.full(self.n, "part", dtype=object), pa.string())
        return pa.MapArray.from_arrays(offsets, keys, self.part)

    def add_struct(self, types: dict[str, Any]) -> Any:
        import pyarrow as pa

        add = types["add"]
        children = {
            "path": self.path,
            "partitionValues": self.partition_values(),
            "size": self.size,
            "modificationTime": self.mtime,
            "dataChange": pa.nulls(self.n, pa.bool_()).fill_null(False),
            "stats": self.stats,
        }
        arrays = [children.get(f.name, pa.nulls(self.n, f.type)) for f in add]
        return pa.StructArray.from_arrays(arrays, fields=list(add))

    def json_lines(self) -> Any:
        """``{"add":{...}}\\n`` per file, as one Arrow string array (its data buffer is the commit bytes)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        return pc.binary_join_element_wise(
            '{"add":{"path":"',
            self.path,
            '","partitionValues":{"part":"',
            self.part,
            '"},"size":',
            pc.cast(self.size, pa.string()),
            ',"modificationTime":',
            pc.cast(self.mtime, pa.string()),
            ',"dataChange":true,"stats":"',
            pc.replace_substring(self.stats, '"', '\\"'),
            '"}}\n',
            "",
        )


def _line(action: str, body: dict[str, Any]) -> str:
    return json.dumps({action: body}, separators=(",", ":")) + "\n"


def _commit_info(version: int, operation: str = "WRITE") -> str:
    return _line(
        "commitInfo",
        {"timestamp": ts_of(version), "operation": operation, "operationParameters": {"mode": "Append"}},
    )


def _write(path: Path, chunks: list[Any], version: int) -> None:
    """Write a log file from str/bytes/buffer pieces and date it at its commit's timestamp."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for c in chunks:
            os.write(fd, c.encode() if isinstance(c, str) else c)
    finally:
        os.close(fd)
    os.utime(path, (ts_of(version) / 1000, ts_of(version) / 1000))


def _buffer_slices(lines: Any) -> tuple[Any, Any]:
    """(offsets as numpy, data buffer) of a fresh string array, for zero-copy commit bodies."""
    import numpy as np

    assert lines.offset == 0
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + 1)
    return offsets, memoryview(lines.buffers()[2])


# --- the log ---------------------------------------------------------------------------


def write_commits(log_dir: Path, kind: str, files: int, partitions: int, adds_per_commit: int) -> int:
    """Versions 0 .. C (C = files / adds_per_commit): protocol + metadata, then the adds. Returns C."""
    commits = files // adds_per_commit
    _write(
        log_dir / f"{0:020d}.json",
        [
            _commit_info(0, "CREATE TABLE"),
            _line("protocol", protocol_action(kind)),
            _line("metaData", metadata_action(partitions)),
        ],
        0,
    )
    per_chunk = max(1, CHUNK // adds_per_commit) * adds_per_commit
    for start in range(0, files, per_chunk):
        stop = min(files, start + per_chunk)
        lines = FileColumns(start, stop, partitions, adds_per_commit).json_lines()
        offsets, data = _buffer_slices(lines)
        for first in range(start, stop, adds_per_commit):
            version = 1 + first // adds_per_commit
            a, b = first - start, min(stop, first + adds_per_commit) - start
            _write(log_dir / f"{version:020d}.json", [_commit_info(version), data[offsets[a] : offsets[b]]], version)
        log.info("commits up to version %d written", 1 + (stop - 1) // adds_per_commit)
    return commits


def write_tail(log_dir: Path, first_version: int, files: int, tail: int, partitions: int) -> int:
    """``tail`` single-add commits after the checkpoint; every fifth also removes the oldest live file.

    New files are numbered from ``files`` on; removed ones from 0 on (files of the
    checkpoint). Returns the number of removes.
    """
    new = FileColumns(files, files + tail, partitions, 1, base_version=first_version, base_k=files)
    lines = new.json_lines()
    offsets, data = _buffer_slices(lines)
    removes = 0
    old = FileColumns(0, tail // 5 + 1, partitions, 1)
    old_paths = old.path.to_pylist()
    old_parts = old.part.to_pylist()
    old_sizes = old.size.to_pylist()
    for j in range(tail):
        version = first_version + j
        pieces: list[Any] = [_commit_info(version), data[offsets[j] : offsets[j + 1]]]
        if j % 5 == 4:
            pieces.append(
                _line(
                    "remove",
                    {
                        "path": old_paths[removes],
                        "deletionTimestamp": ts_of(version),
                        "dataChange": True,
                        "extendedFileMetadata": True,
                        "partitionValues": {"part": old_parts[removes]},
                        "size": old_sizes[removes],
                    },
                )
            )
            removes += 1
        _write(log_dir / f"{version:020d}.json", pieces, version)
        if (j + 1) % 50_000 == 0:
            log.info("tail: %d of %d commits written", j + 1, tail)
    return removes


def _small_actions_batch(schema: Any, types: dict[str, Any], kind: str, partitions: int) -> Any:
    """Two rows: the protocol and the metaData action (everything else null)."""
    import pyarrow as pa

    proto = pa.array([protocol_action(kind), None], types["protocol"])
    meta = metadata_action(partitions)
    meta = dict(meta, format={"provider": "parquet", "options": []}, configuration=[])
    meta_arr = pa.array([None, meta], types["metaData"])
    cols = {"protocol": proto, "metaData": meta_arr}
    return pa.RecordBatch.from_arrays([cols.get(f.name, pa.nulls(2, f.type)) for f in schema], schema=schema)


def _add_batch(schema: Any, types: dict[str, Any], cols: FileColumns) -> Any:
    import pyarrow as pa

    add = cols.add_struct(types)
    return pa.RecordBatch.from_arrays(
        [add if f.name == "add" else pa.nulls(cols.n, f.type) for f in schema], schema=schema
    )


def write_checkpoint(
    log_dir: Path, kind: str, version: int, files: int, partitions: int, adds_per_commit: int, part_rows: int
) -> dict[str, Any]:
    """The checkpoint at ``version`` (classic multi-part or V2 with sidecars); returns _last_checkpoint."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = _types()
    file_schema = pa.schema([("add", types["add"]), ("remove", types["remove"])])
    full_schema = pa.schema(
        [("protocol", types["protocol"]), ("metaData", types["metaData"]), ("txn", types["txn"])] + list(file_schema)
    )
    n_parts = max(1, -(-files // part_rows))
    written: list[tuple[str, int]] = []
    for i in range(n_parts):
        if kind == "classic":
            name = f"{version:020d}.checkpoint.{i + 1:010d}.{n_parts:010d}.parquet"
            target, schema = log_dir / name, full_schema
        else:
            name = f"{uuid.UUID(int=(GENERATOR_VERSION << 64) + i)}.parquet"
            target, schema = log_dir / "_sidecars" / name, file_schema
        target.parent.mkdir(exist_ok=True)
        with pq.ParquetWriter(target, schema, compression="snappy") as w:
            if kind == "classic" and i == 0:
                w.write_batch(_small_actions_batch(schema, types, kind, partitions))
            lo, hi = i * part_rows, min(files, (i + 1) * part_rows)
            for start in range(lo, hi, CHUNK):
                cols = FileColumns(start, min(hi, start + CHUNK), partitions, adds_per_commit)
                w.write_batch(_add_batch(schema, types, cols), row_group_size=CHUNK)
        os.utime(target, (ts_of(version) / 1000, ts_of(version) / 1000))
        written.append((name, target.stat().st_size))
        log.info("checkpoint file %d of %d written", i + 1, n_parts)
    if kind == "classic":
        return {"version": version, "size": files + 2, "parts": n_parts, "numOfAddFiles": files}
    lines = [
        _line("checkpointMetadata", {"version": version}),
        _line("protocol", protocol_action(kind)),
        _line("metaData", metadata_action(partitions)),
    ]
    for name, size in written:
        lines.append(_line("sidecar", {"path": name, "sizeInBytes": size, "modificationTime": ts_of(version)}))
    top = log_dir / f"{version:020d}.checkpoint.{uuid.UUID(int=(GENERATOR_VERSION << 64) + 0xFFFF)}.json"
    _write(top, lines, version)
    return {"version": version, "size": files + len(lines), "numOfAddFiles": files}


def write_inventory(target: Path, table: Path, files: int, partitions: int, orphans: int, tail: int) -> None:
    """Delta Spark's inventory schema: every data file on storage (live, removed-by-tail and orphans)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    root = "file:" + str(table.resolve()) + "/"
    schema = pa.schema(
        [("path", pa.string()), ("length", pa.int64()), ("isDir", pa.bool_()), ("modificationTime", pa.int64())]
    )
    with pq.ParquetWriter(target, schema, compression="snappy") as w:
        total = files + tail
        for start in range(0, total, CHUNK):
            cols = FileColumns(start, min(total, start + CHUNK), partitions, 1)
            w.write_batch(
                pa.RecordBatch.from_arrays(
                    [
                        pc.binary_join_element_wise(root, cols.path, ""),
                        cols.size,
                        pa.nulls(cols.n, pa.bool_()).fill_null(False),
                        pa.array(np.full(cols.n, START_MS, dtype=np.int64)),
                    ],
                    schema=schema,
                )
            )
        for start in range(0, orphans, CHUNK):  # a batch at a time: an inventory of 100 million objects too
            k = np.arange(start, min(orphans, start + CHUNK), dtype=np.int64)
            ks = pc.cast(pa.array(k), pa.string())
            part = pc.binary_join_element_wise(
                "p", pc.utf8_lpad(pc.cast(pa.array(k % partitions), pa.string()), 3, "0"), ""
            )
            paths = pc.binary_join_element_wise(
                root + "part=", part, "/orphan-", pc.utf8_lpad(ks, 9, "0"), ".parquet", ""
            )
            n = len(k)
            w.write_batch(
                pa.RecordBatch.from_arrays(
                    [
                        paths,
                        pa.array(np.full(n, 2048, dtype=np.int64)),
                        pa.nulls(n, pa.bool_()).fill_null(False),
                        pa.array(np.full(n, START_MS, dtype=np.int64)),
                    ],
                    schema=schema,
                )
            )


def big_inventory(table: Path, info: dict[str, Any], objects: int) -> Path:
    """An inventory of ``objects`` objects beside a built table: its data files plus unreferenced ones (cached).

    For the engines' scale test (issue 30): ``inventory-{objects}.parquet`` in the table's cache
    folder, ``objects - live files`` of them orphans dated 2023, written a batch at a time.
    """
    target = table.parent / f"inventory-{objects}.parquet"
    marker = table.parent / f".inventory-{objects}.complete"
    if marker.exists() and target.exists():
        return target
    files = info["files"] + info["tail"]
    if objects <= files:
        raise ValueError(f"an inventory of {objects} objects cannot hold the table's {files} files and orphans")
    t0 = time.perf_counter()
    partial = target.with_suffix(".partial")
    write_inventory(partial, table, info["files"], info["partitions"], objects - files, info["tail"])
    partial.rename(target)
    marker.write_text(json.dumps({"objects": objects, "seconds": round(time.perf_counter() - t0, 1)}))
    log.info("wrote %s (%d objects) in %.1f s", target, objects, time.perf_counter() - t0)
    return target


# --- the cached table --------------------------------------------------------------------


def build(
    kind: str = "classic",
    files: int = 10_000_000,
    *,
    tail: int = 0,
    partitions: int = 100,
    adds_per_commit: int = 10_000,
    part_rows: int = 1_000_000,
    orphans: int = 100_000,
) -> tuple[Path, dict[str, Any]]:
    """Build (or reuse) one table; returns (table path, info)."""
    if kind not in ("classic", "v2"):
        raise ValueError(f"kind must be classic or v2, not {kind!r}")
    if files % adds_per_commit:
        raise ValueError("files must be a multiple of adds_per_commit")
    params = {
        "generator": GENERATOR_VERSION,
        "kind": kind,
        "files": files,
        "tail": tail,
        "partitions": partitions,
        "adds_per_commit": adds_per_commit,
        "part_rows": part_rows,
        "orphans": orphans,
    }
    root = table_dir(kind, files, tail)
    marker = root / ".complete"
    try:
        info = json.loads(marker.read_text())
        if {k: info.get(k) for k in params} == params:
            return root / "table", info
    except (OSError, ValueError):
        pass
    shutil.rmtree(root, ignore_errors=True)
    table = root / "table"
    log_dir = table / "_delta_log"
    log_dir.mkdir(parents=True)
    t0 = time.perf_counter()
    checkpoint_version = write_commits(log_dir, kind, files, partitions, adds_per_commit)
    last = write_checkpoint(log_dir, kind, checkpoint_version, files, partitions, adds_per_commit, part_rows)
    removes = write_tail(log_dir, checkpoint_version + 1, files, tail, partitions) if tail else 0
    (log_dir / "_last_checkpoint").write_text(json.dumps(last))
    write_inventory(root / "inventory.parquet", table, files, partitions, orphans, tail)
    info = dict(
        params,
        checkpoint_version=checkpoint_version,
        version=checkpoint_version + tail,
        live_files=files + tail - removes,
        inventory=str(root / "inventory.parquet"),
        inventory_rows=files + tail + orphans,
        seconds=round(time.perf_counter() - t0, 1),
    )
    marker.write_text(json.dumps(info))
    log.info("built %s in %.1f s: %s", root.name, info["seconds"], info)
    return table, info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=["classic", "v2"], default="classic")
    ap.add_argument("--files", type=int, default=10_000_000)
    ap.add_argument("--tail", type=int, default=0, help="JSON commits after the checkpoint")
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--adds-per-commit", type=int, default=10_000)
    ap.add_argument("--part-rows", type=int, default=1_000_000, help="adds per checkpoint part / sidecar")
    ap.add_argument("--orphans", type=int, default=100_000, help="unreferenced files in the inventory")
    ap.add_argument("--inventory-objects", type=int, default=0, help="also write an inventory of this many objects")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    table, info = build(
        a.kind,
        a.files,
        tail=a.tail,
        partitions=a.partitions,
        adds_per_commit=a.adds_per_commit,
        part_rows=a.part_rows,
        orphans=a.orphans,
    )
    if a.inventory_objects:
        info = dict(info, big_inventory=str(big_inventory(table, info, a.inventory_objects)))
    print(json.dumps(dict(info, table=str(table))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
