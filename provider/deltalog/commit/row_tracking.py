"""Row tracking (PROTOCOL.md "Row Tracking"): fresh row IDs and row commit versions for the files a commit adds.

When a table supports ``rowTracking`` (and ``delta.rowTrackingSuspended`` is not true),
every writer must

- give each new ``add`` a ``baseRowId`` above the table's high-water mark, so the
  default row IDs (``baseRowId`` + row position) of every row ever committed are unique,
  and advance the mark (the ``delta.rowTracking`` domain, ``rowIdHighWaterMark``) in the
  same commit;
- give each new ``add`` the commit's version as ``defaultRowCommitVersion``;
- copy both fields, from the live ``add`` of the same path, into ``remove`` actions and
  re-committed ``add`` actions.

The version and the mark are only known when an attempt is serialised (a lost race
moves both), so :class:`deltalog.commit.transaction.Transaction` calls :func:`assign` per
attempt with the mark raised past any winner's. Row counts come from each add's
``numRecords`` statistic; an add without one cannot get IDs and is refused.

Keeping *stable* row IDs through a rewrite (compaction) is the engines' job: they
materialise each row's ID and commit version into the columns named by
``delta.rowTracking.materializedRowIdColumnName`` / ``...RowCommitVersionColumnName``
(see :mod:`deltalog.compaction.local` and :mod:`deltalog.compaction.spark.job`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.errors import OperationRefusedError
from deltalog.protocol.table_protocol import Protocol

__all__ = [
    "DOMAIN",
    "assign",
    "assigns_row_ids",
    "domain_action",
    "enabled",
    "high_water_mark",
    "live_row_fields",
    "materialized_columns",
    "parse_high_water_mark",
]

DOMAIN = "delta.rowTracking"
HIGH_WATER_MARK = "rowIdHighWaterMark"
ENABLED = "delta.enableRowTracking"
SUSPENDED = "delta.rowTrackingSuspended"
ROW_ID_COLUMN = "delta.rowTracking.materializedRowIdColumnName"
ROW_COMMIT_VERSION_COLUMN = "delta.rowTracking.materializedRowCommitVersionColumnName"
FIELDS = ("baseRowId", "defaultRowCommitVersion")


def _true(value: str | None) -> bool:
    return str(value).strip().lower() == "true"


def assigns_row_ids(protocol: Protocol | None, configuration: dict[str, str]) -> bool:
    """Whether writers must assign fresh row IDs: the feature is supported and not suspended."""
    return (
        protocol is not None
        and "rowTracking" in protocol.effective_writer_features()
        and not _true(configuration.get(SUSPENDED))
    )


def enabled(protocol: Protocol | None, configuration: dict[str, str]) -> bool:
    """Row tracking is enabled: stable row IDs must be preserved through rewrites."""
    return assigns_row_ids(protocol, configuration) and _true(configuration.get(ENABLED))


@dataclass(frozen=True)
class MaterializedColumns:
    """The hidden columns that hold preserved row IDs and row commit versions."""

    row_id: str
    row_commit_version: str


def materialized_columns(configuration: dict[str, str]) -> MaterializedColumns:
    """The materialised column names; an enabled table without them is broken, and refused."""
    row_id = configuration.get(ROW_ID_COLUMN)
    version = configuration.get(ROW_COMMIT_VERSION_COLUMN)
    if not row_id or not version:
        raise OperationRefusedError(
            f"the table enables row tracking but does not name its materialised columns ({ROW_ID_COLUMN}, "
            f"{ROW_COMMIT_VERSION_COLUMN}); rewriting it would lose row IDs"
        )
    return MaterializedColumns(row_id, version)


def high_water_mark(domains: dict[str, dict[str, Any]]) -> int:
    """The table's ``rowIdHighWaterMark`` (-1 when no row ID was ever assigned)."""
    domain = domains.get(DOMAIN)
    if not domain or domain.get("removed"):
        return -1
    return parse_high_water_mark(domain.get("configuration"))


def parse_high_water_mark(configuration: Any) -> int:
    try:
        doc = json.loads(configuration) if isinstance(configuration, str) else configuration
        return int(doc[HIGH_WATER_MARK])
    except (ValueError, TypeError, KeyError):
        raise OperationRefusedError(
            f"the {DOMAIN} domain metadata has no readable {HIGH_WATER_MARK} ({configuration!r}); "
            "assigning row IDs could duplicate them"
        ) from None


def num_records(add: dict[str, Any]) -> int:
    """The add's row count from its stats (row IDs cannot be assigned without it)."""
    try:
        n = json.loads(add["stats"])["numRecords"]
        if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
            return n
    except (KeyError, TypeError, ValueError):
        pass
    raise OperationRefusedError(
        f"cannot assign row IDs to {add.get('path')!r}: its stats carry no numRecords (row tracking needs the "
        "row count of every added file)"
    )


def live_row_fields(files: pa.Table, paths: list[str]) -> dict[str, dict[str, int]]:
    """``baseRowId``/``defaultRowCommitVersion`` of the live adds at ``paths`` (the ones that have them)."""
    if not paths or files.num_rows == 0 or "baseRowId" not in files.column_names:
        return {}
    hit = files.filter(pc.is_in(files.column("path"), value_set=pa.array(paths, pa.string())))
    out: dict[str, dict[str, int]] = {}
    for row in hit.select(["path", *FIELDS]).to_pylist():
        fields = {k: row[k] for k in FIELDS if row[k] is not None}
        if fields:
            out[row["path"]] = fields
    return out


def assign(
    adds: list[dict[str, Any]],
    removes: list[dict[str, Any]],
    live: dict[str, dict[str, int]],
    hwm: int,
    version: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int | None]:
    """Adds and removes with row tracking fields, and the new high-water mark (None: unchanged).

    An add or remove of a path that is live keeps the live add's fields; a new add gets
    the next free ``baseRowId`` and ``version`` as its ``defaultRowCommitVersion``.
    """
    new_adds = []
    mark = hwm
    for a in adds:
        a = dict(a)
        kept = live.get(a["path"])
        if kept is not None:
            for k, v in kept.items():
                a.setdefault(k, v)
        if a.get("baseRowId") is None:
            a["baseRowId"] = mark + 1
            mark += num_records(a)
        a.setdefault("defaultRowCommitVersion", version)
        new_adds.append(a)
    new_removes = []
    for r in removes:
        r = dict(r)
        for k, v in live.get(r["path"], {}).items():
            r.setdefault(k, v)
        new_removes.append(r)
    return new_adds, new_removes, (mark if mark > hwm else None)


def domain_action(mark: int) -> dict[str, Any]:
    return {"domain": DOMAIN, "configuration": json.dumps({HIGH_WATER_MARK: mark}), "removed": False}
