"""Property: after a vacuum at any allowed retention, every version inside the window reads back whole.

Hypothesis draws histories of appends, deletes, overwrites, compactions
(dataChange=false rewrites), deletes whose writer stamped a skewed
deletionTimestamp, checkpoints (deltalake's and ours, which drop expired
tombstones), failed writers' leftovers and clock advances. The history is laid
out in the past: each commit file, the data files it adds and its remove actions
are dated at the simulated time. A pure-Python model records the rows and files
of every version. After vacuum we check, for every version committed within the
retention window (plus the state at the cutoff):

- safety: all of its files are on disk, and deltalake reads exactly its rows;
  no file modified after the cutoff was deleted;
- the result claims exactly those versions as fully readable;
- progress: every other non-hidden file older than the cutoff is gone.

Simulated times sit half an hour off the whole hours that cutoffs fall on, so no
event is ambiguous with respect to the cutoff.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from deltalog.vacuuming import path_set, vacuum
from helpers import write_data_file
from vacuum_helpers import HOUR_MS, commit_at, deltalake_ids, files_on_disk, make_table_at, now_ms, remove_of, set_mtime

PARTS = ["a", "b", "c"]

op = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(PARTS), st.integers(1, 3)),
    st.tuples(st.just("delete"), st.integers(0, 50)),
    st.tuples(st.just("skewed_delete"), st.integers(0, 50)),
    st.tuples(st.just("overwrite"), st.sampled_from(PARTS)),
    st.tuples(st.just("compact"), st.sampled_from(PARTS)),
    st.tuples(st.just("checkpoint"), st.sampled_from(["deltalake", "deltalog"])),
    st.tuples(st.just("junk"), st.sampled_from(PARTS)),
    st.tuples(st.just("advance"), st.integers(1, 24 * 8)),
    st.tuples(st.just("advance"), st.integers(1, 36)),
)

#: (table property, retention_hours, allow_short_retention): all allowed combinations.
retention = st.sampled_from(
    [
        (None, None, False),
        (None, 24 * 10, False),
        ("interval 1 day", None, False),
        ("interval 48 hours", 72, False),
        (None, 12, True),
        (None, 1, True),
        (None, 0, True),
        ("interval 2 days", 30, True),
    ]
)


@dataclass
class Model:
    """What each version holds: live files (path -> ids) and the moment it was committed."""

    live: dict[str, tuple[str, list[int]]] = field(default_factory=dict)  # path -> (partition, ids)
    versions: list[dict[str, list[int]]] = field(default_factory=list)
    commit_times: list[int] = field(default_factory=list)
    next_id: int = 0

    def ids(self, version: int) -> list[int]:
        return sorted(i for ids in self.versions[version].values() for i in ids)


def _data(ids: list[int], part: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "value": pa.array([f"v{i}" for i in ids]),
            "part": pa.array([part] * len(ids)),
        }
    )


def _add(table, model: Model, ids: list[int], part: str, at: int, data_change: bool = True) -> dict:
    add = write_data_file(table.storage.root, _data(ids, part), {"part": part})
    add["dataChange"] = data_change
    set_mtime(os.path.join(table.storage.root, add["path"]), at)
    return add


def _commit(table, model: Model, at: int, adds: list[dict], removes: list[dict], skew: int = 0) -> None:
    removes_out = [remove_of(r["add"], r.get("data_change", True)) for r in removes]
    if skew:
        # A writer whose clock was far behind: the tombstone looks long expired.
        from deltalog.commit.transaction import Transaction

        txn = Transaction(table.storage, table.snapshot(), operation="DELETE", run_hooks=False)
        txn.remove([dict(r, deletionTimestamp=at - skew) for r in removes_out])
        version = txn.commit().version
        set_mtime(os.path.join(table.storage.root, "_delta_log", f"{version:020d}.json"), at)
    else:
        commit_at(table, at, adds=adds, removes=removes_out)
    model.versions.append({p: ids for p, (_, ids) in model.live.items()})
    model.commit_times.append(at)


def run_history(path: str, ops: list[tuple], configured: str | None, start: int) -> tuple[object, Model, dict]:
    cfg = {"delta.deletedFileRetentionDuration": configured} if configured else None
    table = make_table_at(path, start, partition_by=["part"], configuration=cfg)
    model = Model(versions=[{}], commit_times=[start])
    adds_by_path: dict[str, dict] = {}
    now = start
    for step in ops:
        kind = step[0]
        now += 1000
        if kind == "append":
            ids = list(range(model.next_id, model.next_id + step[2]))
            model.next_id += step[2]
            add = _add(table, model, ids, step[1], now)
            adds_by_path[add["path"]] = add
            model.live[add["path"]] = (step[1], ids)
            _commit(table, model, now, [add], [])
        elif kind in ("delete", "skewed_delete") and model.live:
            victim = sorted(model.live)[step[1] % len(model.live)]
            del model.live[victim]
            _commit(
                table,
                model,
                now,
                [],
                [{"add": adds_by_path[victim]}],
                skew=30 * 24 * HOUR_MS if kind == "skewed_delete" else 0,
            )
        elif kind == "overwrite":
            removes = [{"add": adds_by_path[p]} for p in sorted(model.live)]
            ids = list(range(model.next_id, model.next_id + 2))
            model.next_id += 2
            add = _add(table, model, ids, step[1], now)
            adds_by_path[add["path"]] = add
            model.live = {add["path"]: (step[1], ids)}
            _commit(table, model, now, [add], removes)
        elif kind == "compact":
            inputs = sorted(p for p, (part, _) in model.live.items() if part == step[1])
            if len(inputs) < 2:
                continue
            ids = sorted(i for p in inputs for i in model.live[p][1])
            add = _add(table, model, ids, step[1], now, data_change=False)
            adds_by_path[add["path"]] = add
            for p in inputs:
                del model.live[p]
            model.live[add["path"]] = (step[1], ids)
            _commit(table, model, now, [add], [{"add": adds_by_path[p], "data_change": False} for p in inputs])
        elif kind == "checkpoint":
            if step[1] == "deltalake":
                import deltalake

                deltalake.DeltaTable(path).create_checkpoint()
            else:
                from deltalog.log_maintenance import create_checkpoint

                create_checkpoint(path)
        elif kind == "junk":
            junk = write_data_file(path, _data([10_000], step[1]), {"part": step[1]})
            set_mtime(os.path.join(path, junk["path"]), now)
        elif kind == "advance":
            now += step[1] * HOUR_MS
    return table, model, adds_by_path


@pytest.mark.slow
@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=6, max_size=20), ret=retention, fingerprints=st.booleans())
def test_vacuum_never_deletes_a_file_a_retained_version_needs(ops, ret, fingerprints):
    """``fingerprints``: the protected set as 64-bit fingerprints (what tables past ``EXACT_UP_TO`` files get)."""
    exact_up_to = path_set.EXACT_UP_TO
    path_set.EXACT_UP_TO = 0 if fingerprints else exact_up_to
    try:
        _check_history(ops, ret)
    finally:
        path_set.EXACT_UP_TO = exact_up_to
    event(f"protected set: {'fingerprints' if fingerprints else 'exact'}")


def _check_history(ops: list[tuple], ret: tuple) -> None:
    configured, retention_hours, allow = ret
    span = sum(step[1] for step in ops if step[0] == "advance") * HOUR_MS
    # Start far enough back that the last event is still two and a half hours in the past.
    start = now_ms() - span - 2 * HOUR_MS - HOUR_MS // 2 - len(ops) * 1000
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t")
        _table, model, _ = run_history(path, ops, configured, start)
        mtimes = {p: os.path.getmtime(os.path.join(path, p)) * 1000 for p in files_on_disk(path)}
        before_vacuum = now_ms()
        result = vacuum(path, retention_hours=retention_hours, allow_short_retention=allow)
        retention_ms = int(result.retention_hours * HOUR_MS)
        cutoff = before_vacuum - retention_ms
        older = [v for v, t in enumerate(model.commit_times) if t < cutoff]
        window_start = older[-1] if older else 0
        assert result.fully_readable_from_version == window_start

        on_disk = files_on_disk(path)
        # Whatever was written after the cutoff (an in-flight writer's file, for all vacuum knows) stays.
        recent = {p for p, m in mtimes.items() if m >= cutoff}
        assert recent <= on_disk, f"vacuum deleted recent files {recent - on_disk}"
        needed: set[str] = set()
        for v in range(window_start, len(model.versions)):
            files = model.versions[v]
            needed |= set(files)
            missing = set(files) - on_disk
            assert not missing, f"version {v} lost {missing}"
            assert deltalake_ids(path, v) == model.ids(v), f"version {v} reads back wrong"
        # Progress: nothing old and unneeded is left behind (hidden files are never candidates).
        leftovers = {
            p
            for p in on_disk - needed
            if not any(part.startswith((".", "_")) for part in p.split("/"))
            and os.path.getmtime(os.path.join(path, p)) * 1000 < cutoff
        }
        assert not leftovers, f"vacuum left {leftovers}"
        # Coverage of what was drawn (shown with --hypothesis-show-statistics).
        event(f"deleted files: {'some' if result.num_deleted_files else 'none'}")
        event(f"versions kept whole: {'all' if window_start == 0 else 'some'}")
        event(f"checkpointed: {any(step[0] == 'checkpoint' for step in ops)}")
