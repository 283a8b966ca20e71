"""Byte sizes: parsing ``128m``-style strings and the table's target file size.

Health (what counts as a small file) and compaction (what bins pack up to) must
agree on the target, so both read it here.
"""

from __future__ import annotations

import re

from deltalog.errors import InvalidArgumentError

__all__ = ["DEFAULT_TARGET_FILE_SIZE", "parse_size", "target_file_size"]

DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024
#: Sizes are Delta ``long`` values (and Arrow int64): anything larger is a typo, not a size.
MAX_SIZE = 2**63 - 1
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(value: str | int, what: str) -> int:
    """Bytes from ``134217728``, ``128m``, ``128MiB`` or ``1g`` (binary units, like Spark's byte strings)."""
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    else:
        m = _SIZE.match(str(value))
        if not m:
            raise InvalidArgumentError(f"{what} {value!r} is not a size in bytes (e.g. 134217728 or 128m)")
        unit = (m.group(2) or "").lower()[:1]
        size = int(m.group(1)) * _UNITS[unit]
    if abs(size) > MAX_SIZE:
        raise InvalidArgumentError(f"{what} {value!r} is too large: sizes are at most {MAX_SIZE} bytes (8 EiB)")
    return size


def target_file_size(configuration: dict[str, str], override: int | str | None = None) -> int:
    """The explicit target, else the table's ``delta.targetFileSize`` (in ``configuration``), else 128 MiB."""
    if override is None:
        configured = configuration.get("delta.targetFileSize")
        if configured is None:
            return DEFAULT_TARGET_FILE_SIZE
        override = parse_size(configured, "table property delta.targetFileSize")
    size = parse_size(override, "target size")
    if size <= 0:
        raise InvalidArgumentError(f"target size must be positive, got {size}")
    return size
