"""A vacuum plan: what would be deleted and why, checked against every safety rule, by either engine.

Also where the plan's cursor lives: ``_delta_log/_last_vacuum_info``
(``{"latestCommitVersionOutsideOfRetentionWindow": N}``, as Delta Spark keeps it).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from deltalog._arrow_utils import column_sum
from deltalog.log.history import format_ms
from deltalog.log.replay import empty_table
from deltalog.log.snapshot import Snapshot
from deltalog.storage.filesystem import Storage
from deltalog.vacuuming.retention import Retention
from deltalog.vacuuming.verdict import PLAN_SCHEMA

__all__ = [
    "CURSOR_KEY",
    "DEFAULT_MAX_WORKERS",
    "ENGINES",
    "LAST_VACUUM_INFO",
    "MODES",
    "SPILL_BATCH_ROWS",
    "VacuumPlan",
    "cursor_path",
    "log_plan",
    "next_cursor",
    "previous_cursor_of",
    "read_cursor",
    "without_file_lists",
]

log = logging.getLogger(__name__)

MODES = ("full", "lite")
#: Where the plan is made: this process, or a Spark job (deleting is the core's either way).
ENGINES = ("local", "spark")
DEFAULT_MAX_WORKERS = 8
LAST_VACUUM_INFO = "_last_vacuum_info"
CURSOR_KEY = "latestCommitVersionOutsideOfRetentionWindow"

#: Rows per batch when a spilled plan is read back (about 100 MB of paths).
SPILL_BATCH_ROWS = 1_000_000


@dataclass(frozen=True)
class VacuumPlan:
    """What a vacuum would delete, checked against every safety rule, and why.

    ``files`` has one row per file to delete: table-relative ``path``, ``size``,
    ``modificationTime`` and ``reason``. ``directories`` are the directories expected
    to be left empty (local filesystems only; removed deepest first). ``cursor`` is
    the value ``_last_vacuum_info`` takes once the plan has been executed.

    ``engine``: which engine planned (``local`` or ``spark``). A plan too large to hold
    in memory (the Spark engine's, past a million files) keeps its file list as Parquet
    files at ``files_location`` (``files`` is then empty, ``spilled`` holds the count and
    bytes); :meth:`file_batches` reads either kind a batch at a time.
    """

    table_uri: str
    mode: str
    version: int
    retention: Retention
    fully_readable_from: int
    window_start: int | None
    files: pa.Table
    directories: list[str]
    source: str
    cursor: int | None
    previous_cursor: int | None
    lite_range: tuple[int, int] | None = None
    stats: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    planning_seconds: float = 0.0
    snapshot: Snapshot | None = field(default=None, repr=False)
    engine: str = "local"
    files_location: str | None = None
    spilled: tuple[int, int] = (0, 0)
    #: What keeps ``files_location`` alive (a temporary directory, removed with the plan).
    workspace: Any = field(default=None, repr=False, compare=False)
    #: Files the verdicts would delete that Iceberg snapshots readers may still use reference
    #: (``PLAN_SCHEMA``; ``reason`` names the snapshot), kept.
    kept_for_iceberg: pa.Table = field(default_factory=PLAN_SCHEMA.empty_table)
    #: The Iceberg side of a table with Iceberg metadata (an ``IcebergGuard``), else None; executing
    #: the plan re-validates against it.
    iceberg: Any = field(default=None, repr=False, compare=False)

    @property
    def num_files(self) -> int:
        return self.spilled[0] if self.files_location else self.files.num_rows

    @property
    def size_in_bytes(self) -> int:
        return self.spilled[1] if self.files_location else column_sum(self.files, "size")

    def file_batches(self, batch_rows: int = SPILL_BATCH_ROWS) -> Iterator[pa.Table]:
        """The planned files (``PLAN_SCHEMA``), a batch at a time: from memory, or streamed from ``files_location``."""
        if not self.files_location:
            if self.files.num_rows:
                yield self.files
            return
        import pyarrow.dataset as ds

        dataset = ds.dataset(self.files_location, format="parquet")
        for batch in dataset.to_batches(columns=PLAN_SCHEMA.names, batch_size=batch_rows):
            if batch.num_rows:
                yield pa.Table.from_batches([batch]).cast(PLAN_SCHEMA)

    def head(self, n: int) -> pa.Table:
        """The first ``n`` planned files (for showing a plan)."""
        rows: list[pa.Table] = []
        for batch in self.file_batches(max(1, n)):
            rows.append(batch.slice(0, n - sum(t.num_rows for t in rows)))
            if sum(t.num_rows for t in rows) >= n:
                break
        return pa.concat_tables(rows) if rows else PLAN_SCHEMA.empty_table()

    @property
    def knows_directories(self) -> bool:
        """Whether ``directories`` holds the folders to remove (a local listing); otherwise the deleted
        files' parents are tried, and only the empty ones go."""
        return self.engine == "local" and self.mode == "full" and self.source == "listing"

    @property
    def cutoff_ms(self) -> int:
        return self.retention.cutoff_ms

    def readable_versions(self) -> str:
        return f"{self.fully_readable_from}..{self.version}"

    @property
    def num_kept_for_iceberg(self) -> int:
        return self.kept_for_iceberg.num_rows

    def iceberg_note(self) -> str:
        """``"; N files kept for Iceberg readers"`` on a table with Iceberg metadata, else ``""``."""
        if self.iceberg is None:
            return ""
        return f"; {self.num_kept_for_iceberg} files kept for Iceberg readers"

    def summary_line(self) -> str:
        """One line for logs and the CLI: what the vacuum would delete and what stays readable."""
        return (
            f"{self.mode} vacuum plan for {self.table_uri} at version {self.version}: {self.num_files} files "
            f"({self.size_in_bytes} bytes) to delete; versions {self.readable_versions()} (and later) keep all "
            f"their files{self.iceberg_note()}"
        )

    def to_dict(self, include_files: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "table": self.table_uri,
            "mode": self.mode,
            "version": self.version,
            "cutoff": format_ms(self.cutoff_ms),
            **self.retention.to_dict(),
            "fully_readable_from_version": self.fully_readable_from,
            "fully_readable_versions": self.readable_versions(),
            "window_start_version": self.window_start,
            "num_files_to_delete": self.num_files,
            "size_of_data_to_delete": self.size_in_bytes,
            "num_directories_to_delete": len(self.directories),
            "source": self.source,
            "cursor": self.cursor,
            "previous_cursor": self.previous_cursor,
            "lite_range": list(self.lite_range) if self.lite_range else None,
            "stats": dict(self.stats),
            "warnings": list(self.warnings),
            "planning_seconds": round(self.planning_seconds, 3),
            "engine": self.engine,
            "files_location": self.files_location,
            "num_kept_for_iceberg": self.num_kept_for_iceberg,
            "iceberg": self.iceberg.to_dict() if self.iceberg is not None else None,
        }
        if include_files:
            # A spilled plan's millions of files stay where they are (``files_location``).
            out["files"] = None if self.files_location else self.files.to_pylist()
            out["directories"] = list(self.directories)
            out["kept_for_iceberg"] = self.kept_for_iceberg.to_pylist()
        return out


def without_file_lists(snapshot: Snapshot) -> Snapshot:
    """``snapshot``'s version, protocol, metadata and log segment, without its file lists.

    What a plan keeps of its snapshot (executing it writes commitInfo-only commits):
    a plan of a ten-million-file table must not hold the table's state.
    """
    if not snapshot.files.num_rows and not snapshot.tombstones.num_rows:
        return snapshot
    return dataclasses.replace(
        snapshot, files=empty_table(snapshot.files.schema), tombstones=empty_table(snapshot.tombstones.schema)
    )


def cursor_path(storage: Storage) -> str:
    return storage.join("_delta_log", LAST_VACUUM_INFO)


def read_cursor(storage: Storage) -> int | None:
    """The version the previous vacuum covered, from ``_delta_log/_last_vacuum_info`` (None if absent or unreadable)."""
    try:
        doc = json.loads(storage.read_bytes(cursor_path(storage)))
    except (OSError, ValueError):
        return None
    value = doc.get(CURSOR_KEY) if isinstance(doc, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def previous_cursor_of(storage: Storage, version: int, warnings: list[str]) -> int | None:
    """The previous vacuum's cursor, unless it is beyond ``version`` (a re-created table: ignored, with a warning)."""
    previous = read_cursor(storage)
    if previous is not None and previous > version:
        warnings.append(
            f"_delta_log/{LAST_VACUUM_INFO} says version {previous} was vacuumed, but the table is at version "
            f"{version} (re-created?); ignoring it"
        )
        return None
    return previous


def next_cursor(window_start: int | None, previous: int | None) -> int | None:
    """The cursor once the plan is executed: the newest version before the window, never going back."""
    cursor = window_start if window_start is not None else previous
    if cursor is not None and previous is not None and cursor < previous:
        cursor = previous
    return cursor


def log_plan(plan: VacuumPlan, job_seconds: float | None = None) -> None:
    """The plan's warnings and its one line in the log (the Spark job's own seconds beside the total)."""
    for w in plan.warnings:
        log.warning("vacuum %s: %s", plan.table_uri, w)
    engine = " (Spark)" if plan.engine == "spark" else ""
    job = f", job {job_seconds:.2f} s" if job_seconds is not None else ""
    if plan.iceberg is not None:
        kept = plan.kept_for_iceberg.column("path").to_pylist()
        log.info(
            "vacuum plan for %s: %d files kept for Iceberg readers (%d Iceberg snapshots they may still use)%s",
            plan.table_uri,
            len(kept),
            len(plan.iceberg.references.snapshots),
            f": {', '.join(kept[:5])}" + (f" and {len(kept) - 5} more" if len(kept) > 5 else "") if kept else "",
        )
    log.info(
        "vacuum plan for %s%s: %d files (%d bytes) to delete, versions %s stay fully readable (%.2f s%s)",
        plan.table_uri,
        engine,
        plan.num_files,
        plan.size_in_bytes,
        plan.readable_versions(),
        plan.planning_seconds,
        job,
    )
