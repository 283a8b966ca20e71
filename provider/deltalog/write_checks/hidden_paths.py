"""Which paths inside a table are hidden: one rule for vacuum, commit requests and convert.

Delta readers and VACUUM ignore names starting with ``_`` or ``.`` (``_delta_log``,
``.crc`` side files, ``_temporary`` and other writer scratch space), except two
kinds of directory that hold table data:

- ``_change_data`` (change data files; vacuum cleans them, but no ``add`` may
  point into it: PROTOCOL.md "Data Files" allows data files only in non-hidden
  directories, and change data has its own action);
- partition directories ``col=value`` whose partition column name starts with
  ``_`` (a table partitioned by ``_p`` keeps its rows in ``_p=x/``).

This is Delta Spark's ``isHiddenDirectory`` rule. It lives here, outside vacuum,
so a file a commit request adds is never one vacuum would refuse to look at (and
the reverse): a rule kept twice drifts apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from deltalog._arrow_utils import any_substring
from deltalog.log.actions import Metadata
from deltalog.storage.filesystem import LOG_DIR

__all__ = ["CHANGE_DATA_DIR", "HiddenRule", "partition_dir_names"]

CHANGE_DATA_DIR = "_change_data"
PHYSICAL_NAME = "delta.columnMapping.physicalName"


def partition_dir_names(metadata: Metadata) -> list[str]:
    """Partition column names as directories may carry them (logical and, with column mapping, physical)."""
    names = list(metadata.partition_columns)
    try:
        fields = json.loads(metadata.schema_string).get("fields", [])
    except (ValueError, AttributeError):
        fields = []
    for f in fields:
        if isinstance(f, dict) and f.get("name") in names:
            physical = (f.get("metadata") or {}).get(PHYSICAL_NAME)
            if physical:
                names.append(physical)
    return names


#: Where UniForm keeps the Iceberg metadata Delta Spark writes beside the Delta log.
ICEBERG_METADATA_DIR = "metadata"


def iceberg_enabled(metadata: Metadata) -> bool:
    """UniForm Iceberg or Iceberg compatibility is on: ``metadata/`` holds Iceberg's metadata, not data.

    Delta Spark hides the directory when ``delta.universalFormat.enabledFormats`` names
    iceberg; the compatibility properties are counted too (keeping more is the safe side).
    """
    conf = {k.lower(): str(v).lower() for k, v in metadata.configuration.items()}
    formats = {f.strip() for f in conf.get("delta.universalformat.enabledformats", "").split(",")}
    return "iceberg" in formats or any(conf.get(f"delta.enableicebergcompatv{n}") == "true" for n in (1, 2, 3))


class HiddenRule:
    """Delta's rule for which names readers and vacuum skip, for one table's partition columns.

    ``iceberg`` (UniForm tables) hides every ``metadata`` component too, as Delta Spark's
    ``isHiddenDirectory`` does: vacuum must never delete the Iceberg metadata files.
    """

    def __init__(self, partition_columns: Iterable[str] = (), iceberg: bool = False) -> None:
        self.partition_prefixes = tuple(f"{c}=" for c in partition_columns if c)
        self.iceberg = iceberg

    @classmethod
    def for_metadata(cls, metadata: Metadata) -> HiddenRule:
        return cls(partition_dir_names(metadata), iceberg_enabled(metadata))

    def hidden_name(self, name: str) -> bool:
        """Whether one path component is hidden (and so skipped with everything below it)."""
        if self.iceberg and name == ICEBERG_METADATA_DIR:
            return True
        if not name or name[0] not in "_.":
            return False
        if name == LOG_DIR:
            return True
        if name.startswith(CHANGE_DATA_DIR):
            return False
        return not name.startswith(self.partition_prefixes) if self.partition_prefixes else True

    def hidden_path(self, relative_path: str) -> bool:
        """Whether any component of a table-relative path is hidden (vacuum's view: change data is visible)."""
        return any(self.hidden_name(part) for part in relative_path.split("/"))

    def hidden_component(self, relative_path: str) -> str | None:
        """The first component that keeps a *data file* out of the table: a hidden name, or the change data directory.

        None when ``relative_path`` is a valid place for a data file an ``add`` names.
        """
        for part in relative_path.split("/"):
            change_data = part.startswith(CHANGE_DATA_DIR) and not part.startswith(self.partition_prefixes)
            if self.hidden_name(part) or change_data:
                return part
        return None

    def hidden_mask(self, paths: pa.Array) -> pa.Array:
        """Vectorised :meth:`hidden_path`: a boolean per path (only paths with a ``_``/``.`` component are checked one by one)."""
        if len(paths) == 0:
            return pa.array([], pa.bool_())
        needles: tuple[str, ...] = ("/_", "/.")
        prefixes: tuple[str, ...] = ("_", ".")
        if self.iceberg:
            needles += (f"/{ICEBERG_METADATA_DIR}/",)
            prefixes += (f"{ICEBERG_METADATA_DIR}/",)
        maybe = any_substring(paths, needles, prefixes)
        idx = pc.indices_nonzero(maybe)
        if len(idx) == 0:
            return pc.fill_null(maybe, False)
        hidden = [self.hidden_path(p) for p in pc.take(paths, idx).to_pylist()]
        mask = [False] * len(paths)
        for i, h in zip(idx.to_pylist(), hidden):
            mask[i] = h
        return pa.array(mask, pa.bool_())
