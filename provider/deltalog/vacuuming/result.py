"""The outcome of a vacuum (or of a dry run): what ``to_dict()`` gives the operators for XCom."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deltalog.log.history import format_ms
from deltalog.vacuuming.plan import VacuumPlan

__all__ = ["COMPLETED", "FAILED", "VacuumResult", "result_of_plan"]

COMPLETED = "COMPLETED"
FAILED = "FAILED"
DRY_RUN = "DRY_RUN"


@dataclass(frozen=True)
class VacuumResult:
    """What a vacuum did (or, for a dry run, would do); ``to_dict()`` is what operators push to XCom.

    Every version from ``fully_readable_from_version`` to ``version`` (and every later
    one) still has all of its files after this vacuum.
    """

    table: str
    mode: str
    dry_run: bool
    status: str
    version: int
    cutoff_ms: int
    retention_hours: float
    configured_retention_hours: float
    fully_readable_from_version: int
    num_files_to_delete: int
    size_of_data_to_delete: int
    num_deleted_files: int = 0
    num_already_gone: int = 0
    num_vacuumed_directories: int = 0
    num_kept_by_revalidation: int = 0
    #: Files the rules would delete that Iceberg snapshots readers may still use reference (kept);
    #: None on a table without Iceberg metadata.
    num_kept_for_iceberg: int | None = None
    start_commit_version: int | None = None
    end_commit_version: int | None = None
    cursor: int | None = None
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    plan: VacuumPlan | None = field(default=None, repr=False)

    @property
    def fully_readable_versions(self) -> str:
        return f"{self.fully_readable_from_version}..{self.version}"

    def summary_line(self) -> str:
        """One line for logs and the CLI: what was (or would be) deleted and what stays readable."""
        verb = "would delete" if self.dry_run else "deleted"
        count = self.num_files_to_delete if self.dry_run else self.num_deleted_files
        iceberg = (
            f"; {self.num_kept_for_iceberg} files kept for Iceberg readers"
            if self.num_kept_for_iceberg is not None
            else ""
        )
        return (
            f"{self.mode} vacuum of {self.table} at version {self.version} ({self.status}): {verb} {count} files "
            f"({self.size_of_data_to_delete} bytes); versions {self.fully_readable_versions} (and later) keep all "
            f"their files{iceberg}"
        )

    def to_dict(self, include_files: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "table": self.table,
            "mode": self.mode,
            "dry_run": self.dry_run,
            "status": self.status,
            "version": self.version,
            "cutoff": format_ms(self.cutoff_ms),
            "cutoff_ms": self.cutoff_ms,
            "retention_hours": self.retention_hours,
            "configured_retention_hours": self.configured_retention_hours,
            "fully_readable_from_version": self.fully_readable_from_version,
            "fully_readable_versions": self.fully_readable_versions,
            "num_files_to_delete": self.num_files_to_delete,
            "size_of_data_to_delete": self.size_of_data_to_delete,
            "num_deleted_files": self.num_deleted_files,
            "num_already_gone": self.num_already_gone,
            "num_vacuumed_directories": self.num_vacuumed_directories,
            "num_kept_by_revalidation": self.num_kept_by_revalidation,
            "num_kept_for_iceberg": self.num_kept_for_iceberg,
            "start_commit_version": self.start_commit_version,
            "end_commit_version": self.end_commit_version,
            "cursor": self.cursor,
            "seconds": round(self.seconds, 3),
            "warnings": list(self.warnings),
        }
        if self.plan is not None:
            out["plan"] = self.plan.to_dict(include_files=include_files)
        return out


def result_of_plan(plan: VacuumPlan, seconds: float) -> VacuumResult:
    """The dry-run result: the plan, nothing done."""
    return VacuumResult(
        table=plan.table_uri,
        mode=plan.mode,
        dry_run=True,
        status=DRY_RUN,
        version=plan.version,
        cutoff_ms=plan.cutoff_ms,
        retention_hours=plan.retention.retention_hours,
        configured_retention_hours=plan.retention.configured_hours,
        fully_readable_from_version=plan.fully_readable_from,
        num_files_to_delete=plan.num_files,
        size_of_data_to_delete=plan.size_in_bytes,
        cursor=plan.cursor,
        num_kept_for_iceberg=plan.num_kept_for_iceberg if plan.iceberg is not None else None,
        seconds=seconds,
        warnings=list(plan.warnings),
        plan=plan,
    )
