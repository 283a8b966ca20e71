"""Table properties deltalog reads, checked when a table is created.

A property is stored as a string and read much later (by checkpoints, log
cleanup, vacuum, compaction). ``delta.logRetentionDuration=garbage`` used to be
accepted by ``create`` and only refused by the first log cleanup, and
``delta.checkpointInterval=-4`` silently meant "the default". ``create`` now parses
every known property with the parser its reader uses and refuses a value that
reader would refuse or ignore, naming the property. Unknown (``delta.*`` or user)
properties are kept as given: other engines own them.
"""

from __future__ import annotations

from collections.abc import Callable

from deltalog.errors import InvalidArgumentError

DEFAULT_CHECKPOINT_INTERVAL = 10


def parse_checkpoint_interval(value: str, what: str = "table property delta.checkpointInterval") -> int:
    """``delta.checkpointInterval``: a positive integer (commits between checkpoints)."""
    try:
        interval = int(str(value).strip())
    except ValueError:
        raise InvalidArgumentError(f"{what} must be a positive integer, got {value!r}") from None
    if interval < 1:
        raise InvalidArgumentError(f"{what} must be a positive integer, got {value!r}")
    return interval


def _interval(value: str, what: str) -> object:
    from deltalog.table_config import parse_interval_ms  # the parser log cleanup and vacuum use

    return parse_interval_ms(value, what)


def _bool(value: str, what: str) -> object:
    if str(value).strip().lower() not in ("true", "false"):
        raise InvalidArgumentError(f"{what} must be true or false, got {value!r}")
    return None


def _size(value: str, what: str) -> object:
    from deltalog.sizes import parse_size

    if parse_size(value, what) <= 0:
        raise InvalidArgumentError(f"{what} must be a positive size, got {value!r}")
    return None


def _indexed_cols(value: str, what: str) -> object:
    try:
        n = int(str(value).strip())
    except ValueError:
        n = -2
    if n < -1:
        raise InvalidArgumentError(f"{what} must be an integer of at least -1 (all columns), got {value!r}")
    return None


def _choice(*allowed: str) -> Callable[[str, str], object]:
    def check(value: str, what: str) -> object:
        if str(value).strip().lower() not in allowed:
            raise InvalidArgumentError(f"{what} must be one of {', '.join(allowed)}, got {value!r}")
        return None

    return check


def _codec(value: str, what: str) -> object:
    from deltalog.parquet_codec import PARQUET_CODECS

    return _choice(*PARQUET_CODECS)(value, what)


def _isolation(value: str, what: str) -> object:
    from deltalog.isolation import ISOLATION_LEVELS

    if value not in ISOLATION_LEVELS:
        raise InvalidArgumentError(f"{what} must be one of {', '.join(ISOLATION_LEVELS)}, got {value!r}")
    return None


#: Property -> check(value, what) raising InvalidArgumentError.
CHECKS: dict[str, Callable[[str, str], object]] = {
    "delta.logRetentionDuration": _interval,
    "delta.deletedFileRetentionDuration": _interval,
    "delta.checkpointInterval": parse_checkpoint_interval,
    "delta.targetFileSize": _size,
    "delta.dataSkippingNumIndexedCols": _indexed_cols,
    "delta.checkpointPolicy": _choice("classic", "v2"),
    "delta.parquet.compression.codec": _codec,
    "delta.isolationLevel": _isolation,
    "delta.columnMapping.mode": _choice("none", "name", "id"),
    **{
        key: _bool
        for key in (
            "delta.appendOnly",
            "delta.enableExpiredLogCleanup",
            "delta.enableDeletionVectors",
            "delta.enableChangeDataFeed",
            "delta.enableInCommitTimestamps",
            "delta.enableRowTracking",
            "delta.checkpoint.writeStatsAsJson",
            "delta.checkpoint.writeStatsAsStruct",
            "delta.compatibility.symlinkFormatManifest.enabled",
        )
    },
}


def validate_table_properties(configuration: dict[str, str]) -> None:
    """InvalidArgumentError naming the first known property whose value its reader would refuse or ignore."""
    for key, value in configuration.items():
        check = CHECKS.get(key)
        if check is not None:
            check(value, f"table property {key}")
