"""The questions sensors, triggers and the health-check operator ask a table.

Plain functions over ``deltalog`` (no Airflow import), so the synchronous poke,
the trigger running in the triggerer's thread pool and the branch operator give
the same answer for the same table:

* ``find_new_commit``: is there a commit newer than a version (optionally of
  given operations)?
* ``evaluate_health``: which maintenance thresholds does the table cross?
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from deltalog import DeltaTable
from deltalog.errors import InvalidArgumentError, NotADeltaTableError
from deltalog.health import compute_health
from deltalog.history import read_commit_info
from deltalog.log import LogListing
from deltalog_provider.utils.coerce import optional_float, optional_int

#: The commit that marks a finished vacuum (Delta Spark and deltalog write START and END).
VACUUM_END = "VACUUM END"


def current_version(table: DeltaTable, *, missing_ok: bool = False) -> int:
    """The latest version from one listing; -1 for a table not created yet when ``missing_ok``."""
    try:
        return table.version()
    except NotADeltaTableError:
        if missing_ok:
            return -1
        raise


def _operation_of(table: DeltaTable, listing: LogListing, version: int) -> str | None:
    f = listing.commits.get(version)
    if f is None:  # removed by log cleanup, or only a checkpoint exists at this version
        return None
    info = read_commit_info(table.storage, f.path, f.name) or {}
    return info.get("operation")


def find_new_commit(
    table: DeltaTable,
    after_version: int,
    operations: Iterable[str] | None = None,
    *,
    missing_ok: bool = False,
) -> dict[str, Any] | None:
    """The newest commit after ``after_version`` (matching ``operations`` if given), or None.

    Only the commits in between are read (newest first, stopping at the first match), so
    polling a long log costs one listing plus a few small reads.
    """
    try:
        listing = table.list_log()
    except NotADeltaTableError:
        if missing_ok:
            return None
        raise
    latest = listing.latest_version
    if latest is None or latest <= after_version:
        return None
    wanted = {op.upper() for op in operations} if operations else None
    if not wanted:
        return {"version": latest, "previous_version": after_version, "operation": None}
    for v in range(latest, after_version, -1):
        op = _operation_of(table, listing, v)
        if op is not None and op.upper() in wanted:
            return {"version": v, "previous_version": after_version, "operation": op, "latest_version": latest}
    return None


def versions_since_vacuum(table: DeltaTable, listing: LogListing, latest: int, window: int) -> int:
    """Versions committed since the last ``VACUUM END``, looking back at most ``window`` versions.

    Returns ``latest - v`` for the newest vacuum at ``v``. Without one in sight it returns a
    lower bound: ``window`` when the look-back was cut short (all a threshold of
    ``window - 1`` needs to know), else the number of versions the log still holds
    (``latest + 1`` when it reaches back to version 0).
    """
    versions = sorted((v for v in listing.commits if v <= latest), reverse=True)
    for v in versions:
        if latest - v >= window:
            return window
        if _operation_of(table, listing, v) == VACUUM_END:
            return latest - v
    return latest - versions[-1] + 1 if versions else 0


@dataclass(frozen=True)
class MaintenanceThresholds:
    """Upper bounds on table health; crossing any of them means maintenance is due.

    ``None`` disables a check. ``max_small_file_share`` only counts when at least
    ``min_small_files`` small files exist, since fewer cannot be compacted into anything.
    """

    max_small_file_share: float | None = None
    max_commits_since_checkpoint: int | None = None
    max_tombstone_bytes: int | None = None
    max_versions_since_vacuum: int | None = None
    min_small_files: int = 2

    def __post_init__(self) -> None:
        for name in (
            "max_small_file_share",
            "max_commits_since_checkpoint",
            "max_tombstone_bytes",
            "max_versions_since_vacuum",
        ):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
                raise InvalidArgumentError(f"{name} must be a non-negative number, got {value!r}")

    @property
    def empty(self) -> bool:
        return all(
            v is None
            for v in (
                self.max_small_file_share,
                self.max_commits_since_checkpoint,
                self.max_tombstone_bytes,
                self.max_versions_since_vacuum,
            )
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MaintenanceThresholds:
        return cls(**data)

    @classmethod
    def from_values(
        cls,
        *,
        max_small_file_share: Any = None,
        max_commits_since_checkpoint: Any = None,
        max_tombstone_bytes: Any = None,
        max_versions_since_vacuum: Any = None,
        min_small_files: Any = 2,
    ) -> MaintenanceThresholds:
        """Thresholds from possibly rendered-as-string template values."""
        return cls(
            max_small_file_share=optional_float(max_small_file_share, "max_small_file_share"),
            max_commits_since_checkpoint=optional_int(max_commits_since_checkpoint, "max_commits_since_checkpoint"),
            max_tombstone_bytes=optional_int(max_tombstone_bytes, "max_tombstone_bytes"),
            max_versions_since_vacuum=optional_int(max_versions_since_vacuum, "max_versions_since_vacuum"),
            min_small_files=optional_int(min_small_files, "min_small_files") or 0,
        )


@dataclass
class HealthReport:
    """Health numbers of one version plus which thresholds they cross (``crossed`` by check name)."""

    version: int
    health: dict[str, Any]
    versions_since_vacuum: int | None
    crossed: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def due(self) -> bool:
        return bool(self.crossed)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["due"] = self.due
        return d

    def summary(self) -> str:
        if not self.crossed:
            return f"version {self.version}: healthy (no threshold crossed)"
        parts = [f"{name} {c['value']} > {c['threshold']}" for name, c in self.crossed.items()]
        return f"version {self.version}: maintenance due ({'; '.join(parts)})"


def evaluate_health(
    table: DeltaTable, thresholds: MaintenanceThresholds, target_file_size: int | None = None
) -> HealthReport:
    """Compute table health from one snapshot and compare it with ``thresholds``."""
    if target_file_size is not None and target_file_size <= 0:
        raise InvalidArgumentError(f"target file size must be positive, got {target_file_size}")
    snapshot = table.snapshot()
    health = compute_health(snapshot, target_file_size).to_dict()
    since_vacuum = None
    if thresholds.max_versions_since_vacuum is not None:
        window = int(thresholds.max_versions_since_vacuum) + 1
        since_vacuum = versions_since_vacuum(table, snapshot.segment.listing, snapshot.version, window)
    report = HealthReport(version=snapshot.version, health=health, versions_since_vacuum=since_vacuum)

    def check(name: str, value: float | int | None, threshold: float | int | None) -> None:
        if threshold is not None and value is not None and value > threshold:
            report.crossed[name] = {"value": value, "threshold": threshold}

    if health["num_small_files"] >= thresholds.min_small_files:
        check("small_file_share", health["small_file_share"], thresholds.max_small_file_share)
    check("commits_since_checkpoint", health["commits_since_checkpoint"], thresholds.max_commits_since_checkpoint)
    check("tombstone_bytes", health["tombstone_bytes"], thresholds.max_tombstone_bytes)
    check("versions_since_vacuum", since_vacuum, thresholds.max_versions_since_vacuum)
    return report
