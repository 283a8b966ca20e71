"""The questions sensors, triggers and the health-check operator ask a table.

Plain functions over ``deltalog`` (no Airflow import), so the synchronous poke,
the trigger running in the triggerer's thread pool and the branch operator give
the same answer for the same table:

* ``find_new_commit``: is there a commit newer than a version (optionally of
  given operations)?
* ``evaluate_health``: is maintenance due? Without thresholds, the core's verdict
  (``deltalog.maintenance.due``: an operation is due when it would have work); with thresholds,
  the thresholds crossed whose operation would have work (a small-file share with no
  compaction bin, or tombstones vacuum may not delete yet, are not due).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from deltalog import DeltaTable, MaintenanceDue, compute_health, maintenance_due
from deltalog import find_new_commit as core_find_new_commit
from deltalog.errors import InvalidArgumentError, NotADeltaTableError, VersionNotFoundError
from deltalog_provider.utils.coerce import optional_float, optional_int


def current_version(table: DeltaTable, *, missing_ok: bool = False) -> int:
    """The latest version from one listing; -1 for a table not created yet when ``missing_ok``."""
    try:
        return table.version()
    except NotADeltaTableError:
        if missing_ok:
            return -1
        raise


def version_at_time(table: DeltaTable, when: dt.datetime, *, missing_ok: bool = False) -> int:
    """The latest version committed at or before ``when`` (commit timestamps, in-commit ones honoured).

    -1 when the table's first commit is later than ``when`` (created since), or when the
    table does not exist yet and ``missing_ok``.
    """
    try:
        return table.snapshot(timestamp=when).version
    except VersionNotFoundError:
        return -1
    except NotADeltaTableError:
        if missing_ok:
            return -1
        raise


def find_new_commit(
    table: DeltaTable,
    after_version: int,
    operations: Iterable[str] | None = None,
    *,
    missing_ok: bool = False,
) -> dict[str, Any] | None:
    """``deltalog.find_new_commit`` as the trigger event / sensor payload (a dict), or None."""
    found = core_find_new_commit(table.storage, after_version, operations, missing_ok=missing_ok)
    return found.to_dict() if found is not None else None


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
    #: Rows hidden by deletion vectors over all rows: above it a purge (``REORG ... APPLY (PURGE)``) is due.
    max_dv_hidden_share: float | None = None

    def __post_init__(self) -> None:
        for name in (
            "max_small_file_share",
            "max_commits_since_checkpoint",
            "max_tombstone_bytes",
            "max_versions_since_vacuum",
            "max_dv_hidden_share",
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
                self.max_dv_hidden_share,
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
        max_dv_hidden_share: Any = None,
    ) -> MaintenanceThresholds:
        """Thresholds from possibly rendered-as-string template values."""
        return cls(
            max_small_file_share=optional_float(max_small_file_share, "max_small_file_share"),
            max_commits_since_checkpoint=optional_int(max_commits_since_checkpoint, "max_commits_since_checkpoint"),
            max_tombstone_bytes=optional_int(max_tombstone_bytes, "max_tombstone_bytes"),
            max_versions_since_vacuum=optional_int(max_versions_since_vacuum, "max_versions_since_vacuum"),
            min_small_files=optional_int(min_small_files, "min_small_files") or 0,
            max_dv_hidden_share=optional_float(max_dv_hidden_share, "max_dv_hidden_share"),
        )


#: The operation each threshold check calls for.
CHECK_OPERATION = {
    "small_file_share": "compaction",
    "commits_since_checkpoint": "checkpoint",
    "tombstone_bytes": "vacuum",
    "versions_since_vacuum": "vacuum",
    "dv_hidden_share": "purge",
}


@dataclass
class HealthReport:
    """Health numbers of one version, the core's due verdict, and what is due (``crossed`` by check name).

    ``crossed`` holds the thresholds crossed whose operation would have work; without
    thresholds it holds the due operations themselves (keyed by operation name).
    ``not_actionable`` holds thresholds crossed although their operation has nothing to
    do. ``operations`` is the core verdict (``{"compaction": bool, ...}``) and
    ``reasons`` its explanation.
    """

    version: int
    health: dict[str, Any]
    versions_since_vacuum: int | None
    crossed: dict[str, dict[str, Any]] = field(default_factory=dict)
    operations: dict[str, bool] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    not_actionable: dict[str, dict[str, Any]] = field(default_factory=dict)
    refused: str | None = None

    @property
    def due(self) -> bool:
        return bool(self.crossed)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["due"] = self.due
        return d

    def summary(self) -> str:
        if not self.crossed:
            if self.refused:
                return f"version {self.version}: nothing due (maintenance refused: {self.refused})"
            return f"version {self.version}: healthy (nothing due)"
        parts = [
            f"{name} {c['value']} > {c['threshold']}" if "threshold" in c else f"{name}: {c.get('reason', 'due')}"
            for name, c in self.crossed.items()
        ]
        return f"version {self.version}: maintenance due ({'; '.join(parts)})"


def _has_work(verdict: MaintenanceDue, check: str, health: dict[str, Any]) -> bool:
    """Whether the operation behind a crossed threshold would do anything now.

    A checkpoint has work whenever a commit follows the last one (the threshold, not
    the interval, is the user's choice); compaction and vacuum need the planners' work.
    """
    op = CHECK_OPERATION[check]
    if op == "purge":  # a purge has work while any deletion vector hides rows
        return verdict.refused is None and verdict.rows_hidden_by_dvs > 0
    if op == "checkpoint":
        return verdict.refused is None and health["commits_since_checkpoint"] > 0
    return bool(getattr(verdict, op))


def evaluate_health(
    table: DeltaTable, thresholds: MaintenanceThresholds, target_file_size: int | None = None
) -> HealthReport:
    """Health of one snapshot and what is due: the core verdict, narrowed by ``thresholds`` when any is set."""
    if target_file_size is not None and target_file_size <= 0:
        raise InvalidArgumentError(f"target file size must be positive, got {target_file_size}")
    snapshot = table.snapshot()
    since_vacuum = None
    if thresholds.max_versions_since_vacuum is not None:  # look back just far enough to judge it
        window = int(thresholds.max_versions_since_vacuum) + 1
        health = compute_health(snapshot, target=target_file_size, vacuum_lookback=window).to_dict()
        since_vacuum = health["versions_since_vacuum"]
    else:
        health = compute_health(snapshot, target=target_file_size).to_dict()
    verdict = maintenance_due(table, snapshot, target_size=target_file_size)
    report = HealthReport(
        version=snapshot.version,
        health=health,
        versions_since_vacuum=since_vacuum,
        operations=verdict.flags(),
        reasons=list(verdict.reasons),
        refused=verdict.refused,
    )
    if thresholds.empty:
        for op, flag in verdict.flags().items():
            if flag:
                why = [r for r in verdict.reasons if r.startswith(f"{op}:")]
                report.crossed[op] = {"reason": why[0].split(": ", 1)[1] if why else "due"}
        return report

    def check(name: str, value: float | int | None, threshold: float | int | None) -> None:
        if threshold is not None and value is not None and value > threshold:
            entry = {"value": value, "threshold": threshold}
            if _has_work(verdict, name, health):
                report.crossed[name] = entry
            else:
                report.not_actionable[name] = entry

    if health["num_small_files"] >= thresholds.min_small_files:
        check("small_file_share", health["small_file_share"], thresholds.max_small_file_share)
    check("commits_since_checkpoint", health["commits_since_checkpoint"], thresholds.max_commits_since_checkpoint)
    check("tombstone_bytes", health["tombstone_bytes"], thresholds.max_tombstone_bytes)
    check("versions_since_vacuum", since_vacuum, thresholds.max_versions_since_vacuum)
    check("dv_hidden_share", verdict.dv_hidden_share, thresholds.max_dv_hidden_share)
    return report
