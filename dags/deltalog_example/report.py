"""What maintenance did to a table, measured on the table itself.

Used by the ``summary`` task of the maintenance DAGs and by ``scripts/demo.py``:
numbers come from the Delta log and a listing of the table folder, not from the
tasks' own claims, so the report doubles as a check that the work happened.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from deltalog import DeltaTable
from deltalog.storage.filesystem import LOG_DIR


@dataclass
class TableReport:
    """A table's state at one moment: the log, the live files and what lies on storage."""

    version: int
    live_files: int
    small_files: int
    live_bytes: int
    data_files_on_storage: int
    data_bytes_on_storage: int
    log_files: int
    checkpoint_version: int | None
    oldest_version: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _is_data_path(relative: str) -> bool:
    """Table data, not the log, not hidden folders (staging, commit requests) and not markers."""
    parts = relative.split("/")
    return not any(p.startswith(("_", ".")) for p in parts) and parts[-1].endswith(".parquet")


def table_report(table: DeltaTable) -> TableReport:
    """Measure ``table`` now (one snapshot plus one listing of its folder)."""
    health = table.health()
    storage = table.storage
    data_files = data_bytes = log_files = 0
    for info in storage.walk_files():
        rel = storage.relative(info.path)
        if rel.startswith(LOG_DIR + "/"):
            log_files += 1
        elif _is_data_path(rel):
            data_files += 1
            data_bytes += info.size
    return TableReport(
        version=health.version,
        live_files=health.num_files,
        small_files=health.num_small_files,
        live_bytes=health.size_in_bytes,
        data_files_on_storage=data_files,
        data_bytes_on_storage=data_bytes,
        log_files=log_files,
        checkpoint_version=health.last_checkpoint_version,
        oldest_version=health.oldest_readable_version,
    )


def operations_since(table: DeltaTable, after_version: int) -> dict[str, dict[str, int]]:
    """Sum of the numeric operation metrics per operation committed after ``after_version``."""
    out: dict[str, dict[str, int]] = {}
    for record in table.history():
        if record.version <= after_version or not record.operation:
            continue
        bucket = out.setdefault(record.operation, {"commits": 0})
        bucket["commits"] += 1
        for key, value in (record.operationMetrics or {}).items():
            try:
                bucket[key] = bucket.get(key, 0) + int(value)
            except (TypeError, ValueError):
                continue
    return out


def _human(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(n)


ROWS = [
    ("table version", "version", str),
    ("live files", "live_files", str),
    ("small files", "small_files", str),
    ("live bytes", "live_bytes", _human),
    ("data files on storage", "data_files_on_storage", str),
    ("data bytes on storage", "data_bytes_on_storage", _human),
    ("_delta_log files", "log_files", str),
    ("last checkpoint version", "checkpoint_version", lambda v: "-" if v is None else str(v)),
    ("oldest readable version", "oldest_version", lambda v: "-" if v is None else str(v)),
]


def render_before_after(before: TableReport, after: TableReport) -> str:
    """A fixed-width before/after table with the change per row."""
    lines = [f"{'':<26}{'before':>14}{'after':>14}{'change':>14}"]
    for label, key, fmt in ROWS:
        b, a = getattr(before, key), getattr(after, key)
        change = ""
        if isinstance(b, int) and isinstance(a, int) and key not in ("checkpoint_version", "oldest_version"):
            delta = a - b
            change = (_human(abs(delta)) if "bytes" in key else str(abs(delta))) if delta else "0"
            change = ("+" if delta > 0 else "-" if delta < 0 else "") + change
        lines.append(f"{label:<26}{fmt(b):>14}{fmt(a):>14}{change:>14}")
    return "\n".join(lines)
