"""How long removed files must be kept, and the cutoff that follows from it.

The table property ``delta.deletedFileRetentionDuration`` (default one week) is
the promise a table makes to its readers: time travel and long-running queries
may use any file removed less than that long ago. A vacuum with a shorter
retention breaks that promise, so it is refused unless the caller overrides it
explicitly (a zero retention always needs the override, even on a table that
configures zero). Delta writes the durations as Spark calendar intervals
(``interval 1 week``, ``interval 168 hours``, ``7 days``); months and years have no
fixed length, so Delta rejects them for retention and so do we (the parser is
the one checkpoint and log cleanup use for their table properties).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from deltalog._flags import require_bools
from deltalog.errors import InvalidArgumentError, OperationRefusedError
from deltalog.protocol.properties import (
    DEFAULT_DELETED_FILE_RETENTION,
    DEFAULT_LOG_RETENTION,
    config_interval_ms,
    parse_interval_ms,
)

__all__ = ["DELETED_FILE_RETENTION_KEY", "Retention", "resolve_retention"]

DELETED_FILE_RETENTION_KEY = "delta.deletedFileRetentionDuration"
LOG_RETENTION_KEY = "delta.logRetentionDuration"

HOUR_MS = 3_600_000


def format_hours(ms: int) -> str:
    """``168 hours`` / ``0.5 hours``: how durations appear in messages."""
    hours = ms / HOUR_MS
    return f"{hours:g} hours" if hours != 1 else "1 hour"


@dataclass(frozen=True)
class Retention:
    """The retention a vacuum uses, where it came from, and the resulting cutoff.

    Files removed (and files written) before ``cutoff_ms`` are eligible for
    deletion; the cutoff is ``now_ms - retention_ms``.
    """

    now_ms: int
    retention_ms: int
    configured_ms: int
    configured_text: str
    log_retention_ms: int
    specified: bool
    short_retention_allowed: bool
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def cutoff_ms(self) -> int:
        return self.now_ms - self.retention_ms

    @property
    def retention_hours(self) -> float:
        return self.retention_ms / HOUR_MS

    @property
    def configured_hours(self) -> float:
        return self.configured_ms / HOUR_MS

    def to_dict(self) -> dict[str, Any]:
        return {
            "retention_hours": self.retention_hours,
            "configured_retention_hours": self.configured_hours,
            "configured_retention": self.configured_text,
            "log_retention_hours": self.log_retention_ms / HOUR_MS,
            "retention_specified": self.specified,
            "short_retention_allowed": self.short_retention_allowed,
            "now_ms": self.now_ms,
            "cutoff_ms": self.cutoff_ms,
        }


def resolve_retention(
    configuration: dict[str, str],
    retention_hours: float | None,
    allow_short_retention: bool,
    now_ms: int | None = None,
) -> Retention:
    """Decide the retention, refusing one shorter than the table's unless overridden.

    Raises InvalidArgumentError for a negative or non-numeric retention or a
    malformed table property, and OperationRefusedError for a retention shorter
    than ``delta.deletedFileRetentionDuration`` (or zero) without
    ``allow_short_retention``. Nothing has been touched when either is raised.
    """
    require_bools(allow_short_retention=allow_short_retention)
    configured_text = configuration.get(DELETED_FILE_RETENTION_KEY, DEFAULT_DELETED_FILE_RETENTION)
    configured_ms = parse_interval_ms(configured_text, f"table property {DELETED_FILE_RETENTION_KEY}")
    log_ms = config_interval_ms(configuration, LOG_RETENTION_KEY, DEFAULT_LOG_RETENTION)

    if retention_hours is None:
        retention_ms = configured_ms
    else:
        if isinstance(retention_hours, bool) or not isinstance(retention_hours, int | float):
            raise InvalidArgumentError(f"retention_hours must be a number of hours, got {retention_hours!r}")
        if not math.isfinite(retention_hours) or retention_hours < 0:
            raise InvalidArgumentError(f"retention_hours must be zero or positive, got {retention_hours!r}")
        retention_ms = int(round(retention_hours * HOUR_MS))

    too_short = retention_ms < configured_ms or retention_ms == 0
    if too_short and not allow_short_retention:
        raise OperationRefusedError(
            f"refusing to vacuum with a retention of {format_hours(retention_ms)}: the table's "
            f"{DELETED_FILE_RETENTION_KEY} is {format_hours(configured_ms)} ({configured_text!r}), and files removed "
            "within it may still be needed by time travel, running queries or in-flight writers; pass "
            "allow_short_retention=True (CLI: --allow-short-retention) only if nothing reads or writes this table"
        )

    warnings: list[str] = []
    if configured_ms > log_ms:
        warnings.append(
            f"{DELETED_FILE_RETENTION_KEY} ({format_hours(configured_ms)}) is longer than {LOG_RETENTION_KEY} "
            f"({format_hours(log_ms)}): log cleanup may remove the commits of versions whose files vacuum still "
            "keeps, so those versions cannot be time-travelled to anyway"
        )
    if too_short:
        warnings.append(
            f"retention {format_hours(retention_ms)} is shorter than the table's {format_hours(configured_ms)} "
            "(allowed by override): versions older than the cutoff and uncommitted files written before it are "
            "not protected"
        )
    return Retention(
        now_ms=int(time.time() * 1000) if now_ms is None else now_ms,
        retention_ms=retention_ms,
        configured_ms=configured_ms,
        configured_text=configured_text,
        log_retention_ms=log_ms,
        specified=retention_hours is not None,
        short_retention_allowed=allow_short_retention,
        warnings=tuple(warnings),
    )
