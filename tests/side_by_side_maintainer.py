"""deltalog's side of the side-by-side test: maintenance in a loop, in its own process, while Delta Spark writes.

``python tests/side_by_side_maintainer.py '<json>'`` with ``uri``, ``storage_options``,
``stop_file``, ``deadline`` (epoch seconds), ``out`` (where the outcomes go as JSON) and
``commit_lock`` (S3: a lock file each commit holds, shared with Delta Spark's statements).
Each round (a pause between rounds): compaction, checkpoint, log cleanup, and every third
round a vacuum (full, 1 hour retention: far longer than the run, so every version of the
run keeps its files while leftovers older than that go). Every operation is recorded as ``ok`` (with the versions it committed),
``conflict`` (a deltalog ConflictError, or a compaction bin lost to a concurrent commit)
or ``error``; the test fails on any ``error``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Iterator
from typing import Any

from deltalog.commit.conflicts import ConflictError
from deltalog.compaction import compact
from deltalog.log_maintenance import create_checkpoint
from deltalog.log_maintenance.log_cleanup import cleanup_log
from deltalog.vacuuming import vacuum

VACUUM_HOURS = 1.0


def _run(op: str, uri: str, so: dict[str, Any] | None) -> dict[str, Any]:
    if op == "compaction":
        r = compact(uri, min_files=2, storage_options=so)
        conflicts = [s.reason for s in r.skipped if s.kind == "conflict"]
        errors = [s.reason for s in r.skipped if s.kind == "error"] + ([r.error] if r.error else [])
        status = "error" if errors else "conflict" if conflicts and not r.commits else "ok"
        return {
            "status": status,
            "commits": [c.version for c in r.commits],
            "conflicts": conflicts,
            "detail": "; ".join(errors) or r.summary_line(),
        }
    if op == "checkpoint":
        c = create_checkpoint(uri, storage_options=so)
        return {"status": "ok", "commits": [], "detail": f"{c.kind} checkpoint at v{c.version}"}
    if op == "log cleanup":
        lc = cleanup_log(uri, storage_options=so)
        return {"status": "ok", "commits": [], "deleted": lc.num_deleted, "detail": lc.summary_line()}
    if op == "vacuum":
        v = vacuum(uri, retention_hours=VACUUM_HOURS, allow_short_retention=True, storage_options=so)
        commits = [x for x in (v.start_commit_version, v.end_commit_version) if x is not None]
        return {"status": "ok", "commits": commits, "deleted": v.num_deleted_files, "detail": v.summary_line()}
    raise ValueError(op)


@contextlib.contextmanager
def holding(lock: str | os.PathLike[str] | None) -> Iterator[None]:
    """An exclusive ``flock`` on the file ``lock`` for the block (nothing when there is no lock)."""
    if lock is None:
        yield
        return
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _commit_under_lock(lock_path: str) -> None:
    """Make every conditional PUT of a version (deltalog's commit point) hold ``lock_path``.

    The S3 run's stand-in for the mutual exclusion Delta Spark's single-driver S3 log store
    lacks across processes (see the test's docstring); only the commit step waits.
    """
    from deltalog.storage.filesystem import Storage

    put = Storage.put_if_absent

    def locked(self: Storage, path: str, data: bytes, **kwargs: Any) -> None:
        with holding(lock_path):
            put(self, path, data, **kwargs)

    Storage.put_if_absent = locked  # type: ignore[method-assign]


def main(args: dict[str, Any]) -> None:
    if args.get("commit_lock"):
        _commit_under_lock(args["commit_lock"])
    # The short-retention warning of every vacuum round is expected here; errors still show.
    logging.getLogger("deltalog").setLevel(logging.ERROR)
    uri, so = args["uri"], args.get("storage_options")
    outcomes: list[dict[str, Any]] = []
    rounds = 0
    while time.time() < args["deadline"] and not os.path.exists(args["stop_file"]):
        # Paced like a maintenance schedule, not a tight loop: a vacuum (two commits) every
        # third round, a pause between rounds.
        ops = ("compaction", "checkpoint", "log cleanup") + (("vacuum",) if rounds % 3 == 0 else ())
        rounds += 1
        time.sleep(args.get("pause", 1.0) if rounds > 1 else 0)
        for op in ops:
            t0 = time.time()
            try:
                out = _run(op, uri, so)
            except ConflictError as exc:
                out = {"status": "conflict", "commits": [], "conflicts": [type(exc).__name__], "detail": str(exc)}
            except Exception as exc:  # noqa: BLE001 - recorded; the test fails on it
                out = {"status": "error", "commits": [], "detail": f"{type(exc).__name__}: {exc}"}
                out["traceback"] = traceback.format_exc()[-2000:]
            out.update(op=op, start=t0, seconds=round(time.time() - t0, 3))
            outcomes.append(out)
            with open(args["out"], "w") as f:  # written as it goes: a killed run still reports
                json.dump(outcomes, f)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
