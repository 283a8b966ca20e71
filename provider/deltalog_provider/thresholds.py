"""The health threshold parameters, shared by the health-check operators and the maintenance-due sensor.

A mixin of its own (not in ``operators/``) so sensors and operators both depend on
it rather than on each other.
"""

from __future__ import annotations

from typing import Any

from deltalog_provider.utils.checks import MaintenanceThresholds
from deltalog_provider.utils.coerce import optional_int
from deltalog_provider.version_compat import BaseOperatorMeta

THRESHOLD_FIELDS = (
    "max_small_file_share",
    "max_commits_since_checkpoint",
    "max_tombstone_bytes",
    "max_versions_since_vacuum",
    "max_dv_hidden_share",
)


class HealthThresholdsMixin:
    """The threshold parameters shared by the health-check operators and the maintenance-due sensor.

    :param max_small_file_share: fraction (0..1) of files below half the target size
        (templated); counted only when at least ``min_small_files`` small files exist.
    :param max_commits_since_checkpoint: commits since the last checkpoint (templated).
    :param max_tombstone_bytes: bytes of removed files still tracked as tombstones (templated).
    :param max_versions_since_vacuum: versions since the last ``VACUUM END`` (templated).
    :param max_dv_hidden_share: rows hidden by deletion vectors over all rows (templated); above it
        the report's ``crossed`` holds ``dv_hidden_share`` (a purge is due: ``DeltaCompactOperator(
        purge_deletion_vectors=True)``).
    :param target_file_size: the size small files are measured against (templated; default
        the table's ``delta.targetFileSize``, else 128 MiB).
    :param min_small_files: fewer small files than this never make the share count.
    """

    # As Airflow's own mixins do (ResumableJobMixin); typed for BaseOperator subclasses only.
    @BaseOperatorMeta._apply_defaults  # type: ignore[type-var]
    def __init__(
        self,
        *,
        max_small_file_share: float | str | None = None,
        max_commits_since_checkpoint: int | str | None = None,
        max_tombstone_bytes: int | str | None = None,
        max_versions_since_vacuum: int | str | None = None,
        max_dv_hidden_share: float | str | None = None,
        target_file_size: int | str | None = None,
        min_small_files: int = 2,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.max_small_file_share = max_small_file_share
        self.max_commits_since_checkpoint = max_commits_since_checkpoint
        self.max_tombstone_bytes = max_tombstone_bytes
        self.max_versions_since_vacuum = max_versions_since_vacuum
        self.max_dv_hidden_share = max_dv_hidden_share
        self.target_file_size = target_file_size
        self.min_small_files = min_small_files

    def thresholds(self) -> MaintenanceThresholds:
        """The rendered thresholds (none set: the core's due verdict decides)."""
        return MaintenanceThresholds.from_values(
            **{name: getattr(self, name) for name in THRESHOLD_FIELDS}, min_small_files=self.min_small_files
        )

    def rendered_target_file_size(self) -> int | None:
        return optional_int(self.target_file_size, "target_file_size")
