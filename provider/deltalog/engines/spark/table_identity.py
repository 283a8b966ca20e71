"""Which table a Spark job works on: its ``metaData.id`` and newest version, read through Spark's own filesystem.

A Spark job gets its table as a location and reaches it through Spark's Hadoop configuration
(``s3a``, ``abfss``, ``gs``, ``file``), not deltalog's storage options, so the table's identity is
read the same way: the newest ``metaData`` action of the JSON commits after the newest
checkpoint, newest first, else the checkpoint's (its ``metaData`` column, read by Spark). The
ingest job writes it into its commit request; the compaction job checks its plan against it
before rewriting anything (:mod:`deltalog.write_checks.handoffs`).
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from typing import Any

from deltalog.engines.spark.hadoop import HadoopFs, hadoop_uri
from deltalog.errors import CorruptLogError, NotADeltaTableError
from deltalog.log.listing import (
    CLASSIC_CHECKPOINT_RE,
    COMMIT_RE,
    MULTIPART_CHECKPOINT_RE,
    V2_CHECKPOINT_RE,
)

__all__ = ["TableIdentity", "table_identity"]


@dataclass(frozen=True)
class TableIdentity:
    """A table's ``metaData.id`` and its newest version."""

    table_id: str
    version: int


def _metadata_id(text: str, where: str) -> str | None:
    """The id of the last ``metaData`` action in a commit's (or JSON checkpoint's) lines, if any."""
    found = None
    for line in text.splitlines():
        if '"metaData"' not in line:
            continue
        try:
            action = json.loads(line)
        except ValueError:
            raise CorruptLogError(f"{where}: a line that is not JSON") from None
        meta = action.get("metaData") if isinstance(action, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get("id"), str):
            found = meta["id"]
    return found


def table_identity(spark: Any, table_uri: str) -> TableIdentity:
    """The table at ``table_uri``'s id and newest version (NotADeltaTableError without a readable log)."""
    table = hadoop_uri(table_uri).rstrip("/")
    log_dir = f"{table}/_delta_log"
    hfs = HadoopFs(spark, log_dir)
    try:
        names = [posixpath.basename(p) for p, _, _ in hfs.list_files(log_dir)]
    except Exception as exc:  # noqa: BLE001 - Py4J wraps the JVM's FileNotFoundException
        raise NotADeltaTableError(f"{table_uri} is not a Delta table (no readable _delta_log: {exc})") from None
    commits = sorted(int(m.group(1)) for n in names if (m := COMMIT_RE.match(n)))
    if not commits:
        raise NotADeltaTableError(f"{table_uri} is not a Delta table (no commit in _delta_log)")
    checkpoints: dict[int, list[str]] = {}
    for n in names:
        m = CLASSIC_CHECKPOINT_RE.match(n) or MULTIPART_CHECKPOINT_RE.match(n) or V2_CHECKPOINT_RE.match(n)
        if m:
            checkpoints.setdefault(int(m.group(1)), []).append(n)
    latest = commits[-1]
    below = [v for v in checkpoints if v <= latest]
    start = max(below) if below else -1
    for version in reversed([v for v in commits if v > start]):
        name = f"{version:020d}.json"
        found = _metadata_id(hfs.read_text(f"{log_dir}/{name}"), name)
        if found:
            return TableIdentity(found, latest)
    if start >= 0:
        parts = sorted(checkpoints[start])
        json_parts = [p for p in parts if p.endswith(".json")]
        for part in json_parts:
            found = _metadata_id(hfs.read_text(f"{log_dir}/{part}"), part)
            if found:
                return TableIdentity(found, latest)
        parquet = [f"{log_dir}/{p}" for p in parts if p.endswith(".parquet")]
        if parquet:
            rows = spark.read.parquet(*parquet).where("metaData is not null").select("metaData.id").limit(1).collect()
            if rows and isinstance(rows[0][0], str):
                return TableIdentity(rows[0][0], latest)
    raise CorruptLogError(f"the log of {table_uri} holds no metaData action a table needs")
