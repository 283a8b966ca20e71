"""A compaction plan run against a table: made for it (its id, a version it reached), from its own files.

A plan is a file another process runs (``deltalog compact --plan``, a Spark job, a later Airflow
task). Before a bin is read or written, :func:`check_plan_owner` proves the plan is this table's:

- its ``table_id`` is the table's ``metaData.id`` and its ``snapshot_version`` a version the
  table has reached (:mod:`deltalog.write_checks.handoffs`);
- every input file (path and deletion vector) was a live file of the table at that version.
  A plan naming a file the table did not hold then was made from another table's state (a copy
  with the same id, hand-edited), and is refused whole.

Inputs live at the plan's version but removed by commits since (a concurrent DELETE, another
compaction) are not a refusal: the table moved on, as it may during any compaction. Their bins
are skipped as conflicts before anything is read for them (the commit rules would drop them
anyway, after rewriting them), the other bins run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.compaction.engine_output import BinSkipped
from deltalog.compaction.plan import CompactionPlan
from deltalog.errors import ForeignHandoffError, VersionNotFoundError
from deltalog.log.actions import dv_unique_id
from deltalog.log.load import snapshot_at
from deltalog.log.snapshot import Snapshot
from deltalog.storage.filesystem import Storage
from deltalog.write_checks.handoffs import check_made_at, check_table_id

__all__ = ["check_plan_owner"]

log = logging.getLogger(__name__)

Key = tuple[str, "str | None"]


def _live(snapshot: Snapshot, paths: Iterable[str]) -> set[Key]:
    """The (path, deletion vector id) keys of ``snapshot``'s live files among ``paths``."""
    wanted = pa.array(sorted(set(paths)), pa.string())
    files = snapshot.files.select(["path", "deletionVector"])
    hit = files.filter(pc.is_in(files.column("path"), value_set=wanted))
    return {(r["path"], dv_unique_id(r["deletionVector"])) for r in hit.to_pylist()}


def check_plan_owner(storage: Storage, plan: CompactionPlan, latest: Snapshot) -> list[BinSkipped]:
    """Refuse ``plan`` unless it is this table's (module docstring); return the bins to skip as conflicts."""
    what = "the compaction plan"
    check_table_id(what, "table_id", plan.table_id, latest.metadata.id, storage.uri)
    made_at = check_made_at(what, "snapshot_version", plan.snapshot_version, latest.version, storage.uri)
    keys = {f.key for b in plan.bins for f in b.files}
    gone = keys - _live(latest, (k[0] for k in keys))
    if not gone:
        return []
    if made_at < latest.version:
        try:
            then = snapshot_at(storage, version=made_at)
        except VersionNotFoundError:
            raise ForeignHandoffError(
                f"{what} was made at version {made_at}, which the log of {storage.uri} no longer holds, and "
                f"{len(gone)} of its input files are no longer live: plan again. Nothing was read or written"
            ) from None
        foreign = gone - _live(then, (k[0] for k in gone))
    else:
        foreign = gone
    if foreign:
        example = sorted(k[0] for k in foreign)[0]
        raise ForeignHandoffError(
            f"{what} names {len(foreign)} input file(s) that were not live files of {storage.uri} at version "
            f"{made_at}, the version it was made at (e.g. {example!r}): it was not made from this table's files. "
            "Nothing was read or written"
        )
    skipped = []
    for b in plan.bins:
        removed = sorted(f.path for f in b.files if f.key in gone)
        if removed:
            skipped.append(
                BinSkipped(
                    b.id,
                    f"input {removed[0]} was removed by a commit after the plan was made at version {made_at} "
                    f"(the table is at version {latest.version}); the bin was not rewritten",
                    "conflict",
                    removed,
                )
            )
    log.warning(
        "compaction plan of %s (version %d): %d of %d bins lost an input to commits since; they are skipped",
        storage.uri,
        made_at,
        len(skipped),
        len(plan.bins),
    )
    return skipped
