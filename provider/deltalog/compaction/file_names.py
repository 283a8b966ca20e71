"""Names and folders of the files compaction writes: each new file's name records its bin.

The bin id in the name is how a commit request written by another engine (the Spark
job) is mapped back onto the plan's bins (:func:`bin_id_from_name`); a bin's output goes
next to its first input (:func:`output_dir`).
"""

from __future__ import annotations

import posixpath
import re
import uuid

from deltalog.protocol.parquet_layout import from_log_path, is_absolute

__all__ = ["bin_id_from_name", "output_dir", "output_file_name"]

_BIN_IN_NAME = re.compile(r"^part-(\d{5,})-[0-9a-f]{32}\.")


def output_file_name(bin_id: int, codec: str) -> str:
    """A fresh data file name that also records which bin produced it.

    The bin id in the name is how a commit request written by another engine
    (the Spark job) is mapped back onto the plan's bins, so that a bin that
    lost a race can be dropped on its own.
    """
    suffix = "" if codec == "none" else f".{codec}"
    return f"part-{bin_id:05d}-{uuid.uuid4().hex}.c000{suffix}.parquet"


def bin_id_from_name(path: str) -> int | None:
    m = _BIN_IN_NAME.match(posixpath.basename(path))
    return int(m.group(1)) if m else None


def output_dir(first_input_log_path: str, partition_values: dict[str, str | None]) -> str:
    """Storage directory (relative to the table) for a bin's output: next to its first input.

    Keeping the input's directory preserves whatever layout the table uses
    (hive-style ``col=value`` directories, Spark's random prefixes under column
    mapping, or the root). Inputs given as absolute URIs (shallow clones) get a
    hive-style directory built from the partition values instead.
    """
    if not is_absolute(first_input_log_path):
        return posixpath.dirname(from_log_path(first_input_log_path))
    parts = [f"{_hive_escape(k)}={_hive_escape(v)}" for k, v in partition_values.items()]
    return "/".join(parts)


def _hive_escape(value: str | None) -> str:
    if value is None or value == "":
        return "__HIVE_DEFAULT_PARTITION__"
    return "".join(c if c.isalnum() or c in "-_.~ " else f"%{ord(c):02X}" for c in value)
