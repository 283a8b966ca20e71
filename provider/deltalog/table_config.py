"""Table configuration read by log maintenance: retention intervals, booleans, checkpoint cadence.

Checkpoints, log cleanup, vacuum, manifests and the due verdict all read the same few
table properties; one parser each lives here (validation at ``create`` time is
``deltalog.properties``, which uses the same parsers).
"""

from __future__ import annotations

import logging
import re

from deltalog.commit_result import CommitResult
from deltalog.errors import InvalidArgumentError
from deltalog.properties import DEFAULT_CHECKPOINT_INTERVAL, parse_checkpoint_interval
from deltalog.protocol import Protocol

log = logging.getLogger(__name__)

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


def hook_configuration(result: CommitResult) -> dict[str, str]:
    """The table properties as of the commit: carried by the CommitResult, so deciding costs no I/O."""
    conf = getattr(result, "table_configuration", None)
    return dict(conf) if isinstance(conf, dict) else {}
