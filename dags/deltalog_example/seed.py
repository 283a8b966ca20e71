"""A month-old events table with the problems maintenance exists for (demo and tests).

``seed_history`` writes ``days`` days of small appends (``files_per_day`` little files
per daily partition, one commit per day), re-ingests a few old days (their first
files become tombstones), leaves a couple of orphan files a crashed writer never
committed, and then dates everything back: each commit file, checkpoint and data
file gets the modification time of the day it stands for. Without in-commit
timestamps that is exactly how Delta readers, vacuum and log cleanup see time, so
the table behaves like one that has really been written to for ``days`` days:

* compaction has many small files to merge;
* vacuum (default 7-day retention) may delete the re-ingested days' old files and
  the orphans, while files removed today stay for time travel;
* log cleanup (default 30-day log retention) may delete commits older than the
  oldest checkpoint it can keep.

Table properties are left at their defaults on purpose: the demo shows the safe
defaults at work, not a table tuned to make numbers look good.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from deltalog import DeltaTable
from deltalog.commit.transaction import Transaction
from deltalog.create import create_table
from deltalog.ingest import commit_request, load_commit_request, prepare_actions
from deltalog.storage.filesystem import LOG_DIR

from . import EVENTS_SCHEMA, PARTITION_BY

log = logging.getLogger(__name__)

EVENT_TYPES = ["view", "click", "add_to_cart", "purchase"]
ID_STRIDE = 1_000_000_000
#: Seeded ids start here within a day, far from the Spark job's ids (which start at 0).
SEED_ID_OFFSET = 500_000_000
DAY_MS = 86_400_000


@dataclass
class SeedResult:
    """What was seeded: versions, files and rows, for the demo's report and the tests."""

    table: str
    versions: int
    live_files: int
    live_rows: int
    tombstoned_files: int
    orphan_files: int
    first_day: str
    last_day: str
    commit_days: dict[int, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def day_rows(day: dt.date, rows: int, start: int = 0) -> pa.Table:
    """``rows`` deterministic events of ``day`` (without the partition column), ids from ``start``."""
    day_number = (day - dt.date(1970, 1, 1)).days
    ids = [day_number * ID_STRIDE + SEED_ID_OFFSET + start + i for i in range(rows)]
    base = day_number * 86_400_000_000
    return pa.table(
        {
            "event_id": pa.array(ids, pa.int64()),
            "event_time": pa.array(
                [base + (start + i) * 60_000_000 % 86_400_000_000 for i in range(rows)], pa.timestamp("us", tz="UTC")
            ),
            "user_id": pa.array([(i * 7919 + day_number) % 5000 + 1 for i in ids], pa.int64()),
            "event_type": pa.array([EVENT_TYPES[(i * 31 + day_number) % len(EVENT_TYPES)] for i in ids]),
            "amount": pa.array([round(((i * 104729) % 100_000) / 100.0, 2) for i in ids], pa.float64()),
        }
    )


def _write_file(root: str, day: dt.date, data: pa.Table) -> dict[str, Any]:
    rel = f"{PARTITION_BY[0]}={day.isoformat()}/part-{uuid.uuid4().hex}.c000.snappy.parquet"
    full = os.path.join(root, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    pq.write_table(data, full, compression="snappy")
    return {"path": rel, "size": os.path.getsize(full), "partitionValues": {PARTITION_BY[0]: day.isoformat()}}


def _set_mtime(path: str, ms: int) -> None:
    os.utime(path, (ms / 1000, ms / 1000))


def seed_history(
    root: str,
    days: int = 45,
    files_per_day: int = 8,
    rows_per_file: int = 250,
    reingested_days: tuple[int, ...] = (40, 24, 12),
    orphans: int = 2,
    today: dt.date | None = None,
) -> SeedResult:
    """Create the table at local path ``root`` (must not exist) and seed its history (see module doc)."""
    if days < 2 or files_per_day < 1 or rows_per_file < 1:
        raise ValueError("days must be >= 2 and files_per_day, rows_per_file >= 1")
    today = today or dt.datetime.now(dt.UTC).date()
    first = today - dt.timedelta(days=days)
    midnight = int(dt.datetime.combine(first, dt.time(), dt.UTC).timestamp() * 1000)
    create_table(root, EVENTS_SCHEMA, partition_by=PARTITION_BY, description="deltalog demo: click-stream events")
    # version -> moment it stands for; data file -> the same moment
    moments: dict[int, int] = {0: midnight - DAY_MS + 3_600_000}
    file_moments: dict[str, int] = {}
    day_files: dict[dt.date, list[str]] = {}
    table = DeltaTable(root)
    for offset in range(days):
        day = first + dt.timedelta(days=offset)
        moment = midnight + offset * DAY_MS + 6 * 3_600_000
        adds = [
            _write_file(root, day, day_rows(day, rows_per_file, start=k * rows_per_file)) for k in range(files_per_day)
        ]
        result = commit_request(table, {"operation": "WRITE", "add": adds})
        moments[result.version] = moment
        day_files[day] = [a["path"] for a in adds]
        file_moments.update({a["path"]: moment for a in adds})
        age = days - offset
        if age in reingested_days:
            # Late data: the day is rewritten a few hours later; its first files become tombstones.
            replacement = [
                _write_file(root, day, day_rows(day, rows_per_file * files_per_day // 2, start=k * 10_000_000))
                for k in range(2)
            ]
            later = moment + 5 * 3_600_000
            result = _overwrite_partition(table, day, replacement, day_files[day], deleted_at=later)
            moments[result.version] = later
            file_moments.update({a["path"]: later for a in replacement})
            day_files[day] = [a["path"] for a in replacement]
    tombstoned = sum(files_per_day for age in reingested_days if 0 < age <= days)
    for k in range(orphans):
        day = today - dt.timedelta(days=10)
        orphan = _write_file(root, day, day_rows(day, 10, start=90_000_000 + k * 10))
        file_moments[orphan["path"]] = midnight + (days - 10) * DAY_MS
    _date_back(root, moments, file_moments)
    snapshot = DeltaTable(root).snapshot()
    return SeedResult(
        table=root,
        versions=snapshot.version + 1,
        live_files=snapshot.files.num_rows,
        live_rows=_count_rows(root, snapshot),
        tombstoned_files=tombstoned,
        orphan_files=orphans,
        first_day=first.isoformat(),
        last_day=(today - dt.timedelta(days=1)).isoformat(),
        commit_days={v: dt.datetime.fromtimestamp(ms / 1000, dt.UTC).date().isoformat() for v, ms in moments.items()},
    )


def _overwrite_partition(
    table: DeltaTable, day: dt.date, adds: list[dict[str, Any]], removes: list[str], deleted_at: int
) -> Any:
    """Replace a day's files in one commit whose tombstones carry the (past) time of the rewrite.

    ``commit_request`` stamps removes with the current time; a seeded history needs the
    time the rewrite stands for, because vacuum keeps tombstones younger than its retention.
    """
    request = load_commit_request(
        {"operation": "WRITE", "add": adds, "remove": removes, "readPartitions": [{PARTITION_BY[0]: day.isoformat()}]}
    )
    snapshot = table.snapshot()
    add_actions, remove_actions = prepare_actions(table.storage, snapshot, request)
    for action in remove_actions:
        action["deletionTimestamp"] = deleted_at
    txn = Transaction(
        table.storage,
        snapshot,
        operation="WRITE",
        operation_parameters={"mode": "Overwrite", "partitionBy": f'["{PARTITION_BY[0]}"]'},
    )
    txn.add(add_actions)
    txn.remove(remove_actions)
    txn.read_partitions({PARTITION_BY[0]: day.isoformat()})
    return txn.commit({"numAddedFiles": len(add_actions), "numRemovedFiles": len(remove_actions)})


def _count_rows(root: str, snapshot: Any) -> int:
    return sum(pq.read_metadata(os.path.join(root, p)).num_rows for p in snapshot.files.column("path").to_pylist())


def _date_back(root: str, moments: dict[int, int], file_moments: dict[str, int]) -> None:
    """Give every log file and data file the modification time of the moment it stands for."""
    log_dir = os.path.join(root, LOG_DIR)
    for name in os.listdir(log_dir):
        stem = name.split(".", 1)[0]
        if stem.isdigit() and int(stem) in moments:
            _set_mtime(os.path.join(log_dir, name), moments[int(stem)])
    for rel, ms in file_moments.items():
        _set_mtime(os.path.join(root, rel), ms)
    log.info("dated back %d versions and %d data files", len(moments), len(file_moments))
