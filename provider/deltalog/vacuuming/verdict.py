"""The verdict on an unreferenced file: deleted or kept, by its modification time, and why it goes.

One rule for both engines (the local planner and the Spark job's tasks): a file is
deleted only when storage gave it a plausible time before the cutoff; each deleted
file gets the reason shown in the plan.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.vacuuming.listing import LISTING_SCHEMA
from deltalog.vacuuming.times import FLOOR_MS
from deltalog.write_checks.hidden_paths import CHANGE_DATA_DIR

__all__ = [
    "PLAN_SCHEMA",
    "REASON_CDC",
    "REASON_DV",
    "REASON_LITE_REMOVED",
    "REASON_TOMBSTONE",
    "REASON_UNTRACKED",
    "age_masks",
    "reasons",
]

REASON_TOMBSTONE = "expired tombstone: removed before the cutoff"
REASON_UNTRACKED = "not referenced by any retained version"
REASON_DV = "deletion vector not used by any retained version"
REASON_CDC = "change data file of a commit before the cutoff"
REASON_LITE_REMOVED = "removed by a commit before the cutoff"

PLAN_SCHEMA = pa.schema([*LISTING_SCHEMA, ("reason", pa.string())])


def reasons(paths: pa.Array, expired: pa.Array) -> pa.Array:
    """Why each planned file goes; ``expired``: a mask, true where the path is an expired tombstone's."""
    reason = pa.array([REASON_UNTRACKED] * len(paths), pa.string())
    reason = pc.if_else(pc.starts_with(paths, CHANGE_DATA_DIR + "/"), REASON_CDC, reason)
    is_dv = pc.and_(pc.match_substring(paths, "deletion_vector_"), pc.ends_with(paths, ".bin"))
    reason = pc.if_else(is_dv, REASON_DV, reason)
    return pc.if_else(pc.fill_null(expired, False), REASON_TOMBSTONE, reason)


def age_masks(mtime: pa.Array | pa.ChunkedArray, cutoff_ms: int) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(known, implausible, old) per unreferenced file, from its modification time.

    Known: storage reported a time (0 means it did not). Implausible: before 2000, no time a
    Delta writer wrote a file (a broken clock, a unit error): kept. Old: known, plausible and
    before the cutoff: deleted. Everything else (too new: an in-flight writer's) is kept.
    """
    known = pc.greater(mtime, 0)
    implausible = pc.and_(known, pc.less(mtime, FLOOR_MS))
    old = pc.and_(pc.and_(known, pc.invert(implausible)), pc.less(mtime, cutoff_ms))
    return known, implausible, old
