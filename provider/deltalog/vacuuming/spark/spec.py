"""What the Spark vacuum job is asked to do, and what it answers: two small JSON documents.

The driver (``plan_vacuum(engine="spark")``) has already done every check that needs
the log (protocol, retention, the window's commits, the JSON commits after the
checkpoint); the job gets locations and numbers only. It carries no storage
credentials: Spark reads the checkpoint, the inventory and the driver's side files
through its own Hadoop configuration, and the Python workers need storage access
only to list a table (ambient credentials: instance roles, the environment).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["JobReport", "VacuumJobSpec"]


@dataclass(frozen=True)
class VacuumJobSpec:
    """The job's input.

    - ``table_uri``: the table as deltalog names it (the workers' ``Storage``, for path rules);
      ``table_hadoop_uri`` as Spark's Hadoop layer names it.
    - ``cutoff_ms``: files modified at or after it are kept; tombstones deleted at or after it protect.
    - ``checkpoint_files``: Hadoop URIs of the Parquet checkpoint files (parts, sidecars) whose
      add/remove rows the job reads; ``decided_keys``: a Parquet file (column ``key``) of the file
      keys the JSON commits after the checkpoint decided (checkpoint rows with them are superseded), and
      how many (a few go to the tasks, many are anti-joined).
    - ``protected`` / ``expired``: Parquet files (column ``path``) of what the driver already
      resolved: paths the retained versions reference, expired tombstones.
    - ``inventory``: Hadoop URI of a Parquet inventory, read with ``inventory_columns``
      (path, size-or-length, modificationTime[, isDir]); else ``listing``: the table's top-level
      directories ``[absolute, relative]`` listed one per task, and ``root_files`` (a Parquet file
      of the root's own files).
    - ``partition_dirs`` / ``iceberg``: the hidden-path rule; ``window``: ``[earliest, latest,
      basis]`` of plausible inventory times (before the checkpoint's files are seen).
    - ``output``: Hadoop URI of a folder the job writes (``refs/`` and ``plan/``).
    - ``table_id`` / ``version``: the table (``metaData.id``) and version the driver planned; the
      report echoes them, and the driver refuses a report made for another spec.
    """

    table_uri: str
    table_hadoop_uri: str
    cutoff_ms: int
    output: str
    checkpoint_files: list[str] = field(default_factory=list)
    decided_keys: str | None = None
    decided_count: int = 0
    protected: str | None = None
    expired: str | None = None
    inventory: str | None = None
    inventory_columns: list[str] = field(default_factory=list)
    inventory_source: str = ""
    listing: list[list[str]] | None = None
    root_files: str | None = None
    partition_dirs: list[str] = field(default_factory=list)
    iceberg: bool = False
    window: list[Any] | None = None
    table_id: str = ""
    version: int = -1

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> VacuumJobSpec:
        return cls(**json.loads(text))


@dataclass(frozen=True)
class JobReport:
    """The job's answer: the plan's location and counts, what it counted on the way, or the error that stopped it.

    ``error`` holds one sentence and ``error_kind`` the deltalog error class that raised it in a
    task (an inventory time no file can have, a log path outside the table, links on a local table).
    """

    plan: str = ""
    num_files: int = 0
    size: int = 0
    stats: dict[str, int] = field(default_factory=dict)
    implausible_examples: list[str] = field(default_factory=list)
    oldest_live_ms: int | None = None
    error: str = ""
    error_kind: str = ""
    seconds: float = 0.0
    #: The spec's table id and version, echoed: which plan this report answers.
    table_id: str = ""
    version: int = -1

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> JobReport:
        return cls(**{k: v for k, v in doc.items() if k in cls.__dataclass_fields__})
