"""Identity columns on commit requests (PROTOCOL.md "Identity Columns").

deltalog does not generate identity values: a commit request's files carry them,
written by whoever produced the files. Before such files become part of the table,
each identity column's new values are checked the way Delta Spark's writer
guarantees them, and the column's ``delta.identity.highWaterMark`` is advanced in the
schema in the same commit, so the next writer (Delta Spark included) generates
values above them:

- ``allowExplicitInsert`` false: every value is ``start + k * step`` (k >= 0), beyond
  the high-water mark in the step's direction, not null, and not repeated among the
  new rows (all earlier values are on the other side of the mark, so the new ones are
  unique in the table);
- ``allowExplicitInsert`` true: any value is accepted; the mark moves past the new
  values (rounded to the step) so generated values never collide with them.

Only the identity column is read from each file (one column, not the rows). A file
without the column, or a value that breaks a rule, refuses the commit naming the column.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltalog.errors import OperationRefusedError
from deltalog.log.actions import Metadata

__all__ = ["check_and_advance"]

START = "delta.identity.start"
STEP = "delta.identity.step"
HIGH_WATER_MARK = "delta.identity.highWaterMark"
ALLOW_EXPLICIT = "delta.identity.allowExplicitInsert"
PHYSICAL_NAME = "delta.columnMapping.physicalName"


@dataclass(frozen=True)
class IdentityColumn:
    """One top-level identity column of the table schema."""

    name: str
    physical: str
    start: int
    step: int
    high_water_mark: int | None
    allow_explicit: bool


def identity_columns(metadata: Metadata) -> list[IdentityColumn]:
    """The table's identity columns (top-level: Delta allows them nowhere else)."""
    try:
        fields = json.loads(metadata.schema_string).get("fields", [])
    except (ValueError, AttributeError):
        return []
    out = []
    for f in fields:
        meta = f.get("metadata") or {}
        if STEP not in meta and START not in meta:
            continue
        name = str(f.get("name"))
        try:
            step = int(meta.get(STEP, 1))
            start = int(meta.get(START, 1))
            hwm = meta.get(HIGH_WATER_MARK)
            hwm = None if hwm is None else int(hwm)
        except (TypeError, ValueError):
            raise OperationRefusedError(f"identity column {name!r} has unreadable delta.identity.* metadata") from None
        if step == 0:
            raise OperationRefusedError(f"identity column {name!r} has step 0, which Delta forbids")
        allow = str(meta.get(ALLOW_EXPLICIT, "false")).lower() == "true"
        out.append(IdentityColumn(name, str(meta.get(PHYSICAL_NAME) or name), start, step, hwm, allow))
    return out


def _values(open_file: Callable[[str], Any], path: str, col: IdentityColumn) -> pa.ChunkedArray:
    with open_file(path) as fh:
        pf = pq.ParquetFile(fh)
        if col.physical not in pf.schema_arrow.names:
            raise OperationRefusedError(
                f"{path}: the file has no values for identity column {col.name!r}; deltalog does not generate "
                "identity values, so the file must carry them"
            )
        return pf.read(columns=[col.physical]).column(0)


def _refuse(col: IdentityColumn, why: str) -> OperationRefusedError:
    return OperationRefusedError(f"identity column {col.name!r}: {why}; nothing committed")


def check_and_advance(metadata: Metadata, paths: list[str], open_file: Callable[[str], Any]) -> Metadata | None:
    """Check the new files' identity values; the metadata with advanced high-water marks (None: unchanged)."""
    columns = identity_columns(metadata)
    if not columns or not paths:
        return None
    schema = json.loads(metadata.schema_string)
    changed = False
    for col in columns:
        chunks = [c.cast(pa.int64()) for p in paths for c in _values(open_file, p, col).chunks]
        values = pa.chunked_array(chunks, type=pa.int64())
        if values.null_count:
            raise _refuse(col, f"{values.null_count} new rows have no value")
        if len(values) == 0:
            continue
        lo, hi = pc.min(values).as_py(), pc.max(values).as_py()
        up = col.step > 0
        mark = col.high_water_mark
        if not col.allow_explicit:
            beyond_start = lo >= col.start if up else hi <= col.start
            if not beyond_start:
                raise _refuse(col, f"value {lo if up else hi} is before the start {col.start} (step {col.step})")
            if mark is not None and (lo <= mark if up else hi >= mark):
                raise _refuse(
                    col,
                    f"value {lo if up else hi} is not beyond the high-water mark {mark} (step {col.step}); "
                    "it may repeat a value the table already has",
                )
            arr = values.to_numpy()
            bad = arr[(arr - col.start) % abs(col.step) != 0]
            if len(bad):
                raise _refuse(col, f"value {int(bad[0])} is not start {col.start} plus a multiple of step {col.step}")
            if len(pc.unique(values)) != len(values):
                raise _refuse(col, "the new rows repeat a value")
            new_mark = hi if up else lo
        else:
            edge = hi if up else lo
            if mark is not None and (edge <= mark if up else edge >= mark):
                continue
            # Round past the explicit values to the step, so generated values stay aligned and unique.
            k = -(-(edge - col.start) // col.step) if up else (col.start - edge + (-col.step) - 1) // (-col.step)
            new_mark = col.start + max(k, 0) * col.step
        if mark is None or (new_mark > mark if up else new_mark < mark):
            for f in schema["fields"]:
                if f.get("name") == col.name:
                    f.setdefault("metadata", {})[HIGH_WATER_MARK] = new_mark
                    changed = True
    if not changed:
        return None
    return replace(metadata, schema_string=json.dumps(schema, separators=(",", ":")))
