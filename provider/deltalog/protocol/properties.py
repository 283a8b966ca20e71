"""Table properties: the one home of every property deltalog reads, its parser and its check.

A property is stored as a string and read much later (by checkpoints, log cleanup,
vacuum, compaction, the due verdict), so each has one parser here that its readers use
(``parse_interval_ms``, ``config_interval_ms``, ``config_bool``, ``checkpoint_interval``,
...), and ``create`` validates a new table's properties with those same parsers
(``validate_table_properties``). ``delta.logRetentionDuration=garbage`` used to be
accepted by ``create`` and only refused by the first log cleanup, and
``delta.checkpointInterval=-4`` silently meant "the default": a value a reader would
refuse or ignore is now refused at ``create``, naming the property. Unknown
(``delta.*`` or user) properties are kept as given: other engines own them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from deltalog.errors import InvalidArgumentError
from deltalog.protocol.isolation import ISOLATION_LEVELS
from deltalog.protocol.parquet_layout import PARQUET_CODECS
from deltalog.protocol.sizes import parse_size
from deltalog.protocol.table_protocol import Protocol

__all__ = [
    "DAY_MS",
    "DEFAULT_CHECKPOINT_INTERVAL",
    "DEFAULT_DELETED_FILE_RETENTION",
    "DEFAULT_LOG_RETENTION",
    "checkpoint_due",
    "checkpoint_interval",
    "checkpoint_protection_version",
    "config_bool",
    "config_interval_ms",
    "parse_checkpoint_interval",
    "parse_interval_ms",
    "validate_table_properties",
]

log = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_INTERVAL = 10
DAY_MS = 24 * 3600 * 1000
#: Delta's defaults of the retention table properties (one copy for checkpoint, log cleanup and vacuum).
DEFAULT_DELETED_FILE_RETENTION = "interval 1 week"
DEFAULT_LOG_RETENTION = "interval 30 days"

_INTERVAL_UNITS_MS = {
    "nanosecond": 1e-6,
    "microsecond": 1e-3,
    "millisecond": 1,
    "second": 1000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": DAY_MS,
    "week": 7 * DAY_MS,
}
_INTERVAL_PART = re.compile(r"(-?\d+(?:\.\d+)?)\s*([a-z]+)")


def parse_interval_ms(text: str, what: str = "interval") -> int:
    """Milliseconds of a Delta interval property value such as ``interval 7 days`` or ``1 week 2 hours``.

    Months and years are refused, as Delta Spark does for durations: their length varies.
    """
    raw = str(text).strip().lower()
    body = raw[len("interval") :].strip() if raw.startswith("interval") else raw
    total = 0.0
    pos = 0
    for m in _INTERVAL_PART.finditer(body):
        if body[pos : m.start()].strip():
            break
        unit = m.group(2).rstrip("s") if m.group(2) not in ("ms", "us") else m.group(2)
        unit = {"ms": "millisecond", "us": "microsecond", "sec": "second", "min": "minute"}.get(unit, unit)
        if unit not in _INTERVAL_UNITS_MS:
            raise InvalidArgumentError(f"{what} {text!r} has an unsupported unit {m.group(2)!r}")
        total += float(m.group(1)) * _INTERVAL_UNITS_MS[unit]
        pos = m.end()
    if pos == 0 or body[pos:].strip():
        raise InvalidArgumentError(f"{what} {text!r} is not an interval such as 'interval 7 days'")
    if total < 0:
        raise InvalidArgumentError(f"{what} {text!r} is negative")
    return int(total)


def config_interval_ms(configuration: dict[str, str], key: str, default: str) -> int:
    """A table property holding an interval, in milliseconds (the default when unset)."""
    return parse_interval_ms(configuration.get(key, default), f"table property {key}")


def config_bool(configuration: dict[str, str], key: str, default: bool) -> bool:
    value = configuration.get(key)
    return default if value is None else str(value).strip().lower() == "true"


def checkpoint_interval(configuration: dict[str, str]) -> int:
    """``delta.checkpointInterval`` (default 10); an unusable value falls back to the default."""
    raw = configuration.get("delta.checkpointInterval")
    if raw is None:
        return DEFAULT_CHECKPOINT_INTERVAL
    try:
        return parse_checkpoint_interval(raw)  # the parser create validates with
    except InvalidArgumentError as exc:  # a table written elsewhere: keep checkpointing at the default
        log.warning("ignoring %s; using %d", exc, DEFAULT_CHECKPOINT_INTERVAL)
        return DEFAULT_CHECKPOINT_INTERVAL


def checkpoint_protection_version(protocol: Protocol, configuration: dict[str, str]) -> int:
    """``delta.requireCheckpointProtectionBeforeVersion`` when the checkpointProtection feature is on, else 0."""
    if "checkpointProtection" not in protocol.effective_writer_features():
        return 0
    try:
        return int(configuration.get("delta.requireCheckpointProtectionBeforeVersion", "0"))
    except ValueError:
        return 0


def checkpoint_due(configuration: dict[str, str], version: int) -> bool:
    """Whether ``delta.checkpointInterval`` asks for a checkpoint at ``version`` (never version 0)."""
    return version > 0 and version % checkpoint_interval(configuration) == 0


# --- checking the properties of a new table --------------------------------------------


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
    return parse_interval_ms(value, what)  # the parser log cleanup and vacuum use


def _bool(value: str, what: str) -> object:
    if str(value).strip().lower() not in ("true", "false"):
        raise InvalidArgumentError(f"{what} must be true or false, got {value!r}")
    return None


def _size(value: str, what: str) -> object:
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
    return _choice(*PARQUET_CODECS)(value, what)


def _isolation(value: str, what: str) -> object:
    if value not in ISOLATION_LEVELS:
        raise InvalidArgumentError(f"{what} must be one of {', '.join(ISOLATION_LEVELS)}, got {value!r}")
    return None


#: Property -> check(value, what) raising InvalidArgumentError.
CHECKS: dict[str, Callable[[str, str], object]] = {
    "delta.logRetentionDuration": _interval,
    "delta.deletedFileRetentionDuration": _interval,
    # Streaming writers' exactly-once rests on it: a value checkpoints cannot read keeps every txn.
    "delta.setTransactionRetentionDuration": _interval,
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
