"""Vacuum at scale: the path-only snapshot, the fingerprinted protected set and the streamed inventory.

Each of them must change nothing but memory and time: the projection holds exactly the
full snapshot's columns it keeps, the fingerprints find every protected path, and a
plan is the same whichever way the protected set is probed or the inventory is read.
"""

from __future__ import annotations

import os
import random
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.log.actions import ADD_SCHEMA, FileColumns
from deltalog.log.load import snapshot_at
from deltalog.log_maintenance import create_checkpoint
from deltalog.protocol.table_protocol import Protocol
from deltalog.vacuuming import inventory as inventory_module
from deltalog.vacuuming import path_set, plan_vacuum
from deltalog.vacuuming.path_set import PathSet, fingerprints
from deltalog.vacuuming.retained import VACUUM_COLUMNS
from helpers import rows
from vacuum_helpers import DAY_MS, commit_at, make_table_at, new_file, now_ms, remove_of, set_mtime, z85_encode

#: Five days: the tombstone of ten days ago is expired, the one of two days ago is not.
SHORT = {"retention_hours": 24 * 5, "allow_short_retention": True}


def _dv(path: str, at: int) -> dict:
    """A deletion vector file on disk and its ``u`` descriptor."""
    u = uuid.uuid4()
    rel = f"dv/deletion_vector_{u}.bin"
    full = os.path.join(path, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as fh:
        fh.write(b"\x00" * 40)
    set_mtime(full, at)
    return {
        "storageType": "u",
        "pathOrInlineDv": "dv" + z85_encode(u.bytes),
        "offset": 1,
        "sizeInBytes": 34,
        "cardinality": 1,
    }


def _history(path: str, checkpoint_at: int | None) -> DeltaTable:
    """Appends, deletes with and without DVs, a percent-encoded path and junk, in the past."""
    now = now_ms()
    proto = Protocol(3, 7, ("deletionVectors",), ("deletionVectors",))
    table = make_table_at(path, now - 30 * DAY_MS, protocol=proto, partition_by=["part"])
    adds = []
    for i in range(12):
        add = new_file(
            table, rows(3, 10 * i, part="a b" if i % 4 == 0 else "x"), {"part": "a b" if i % 4 == 0 else "x"}
        )
        if i % 3 == 0:
            add["deletionVector"] = _dv(path, now - 30 * DAY_MS)
        adds.append(add)
        commit_at(table, now - (29 - i) * DAY_MS, adds=[add])
        if checkpoint_at == i:
            create_checkpoint(path)
    commit_at(
        table,
        now - 10 * DAY_MS,
        removes=[remove_of(adds[1]), dict(remove_of(adds[3]), deletionVector=adds[3]["deletionVector"])],
    )
    commit_at(
        table,
        now - 2 * DAY_MS,
        removes=[remove_of(adds[4]), dict(remove_of(adds[6]), deletionVector=adds[6]["deletionVector"])],
    )
    junk = new_file(table, rows(2, 999), {"part": "x"})
    set_mtime(os.path.join(path, junk["path"]), now - 20 * DAY_MS)
    return table


@pytest.mark.parametrize("checkpoint_at", [None, 5, 11])
def test_projection_holds_exactly_the_full_snapshots_columns(tmp_path, checkpoint_at):
    path = str(tmp_path / "t")
    table = _history(path, checkpoint_at)
    full = snapshot_at(table.storage)
    part = snapshot_at(table.storage, columns=VACUUM_COLUMNS)
    assert part.version == full.version and part.metadata == full.metadata and part.protocol == full.protocol
    assert part.columns == VACUUM_COLUMNS and part.files.schema.names == VACUUM_COLUMNS.add.names
    for got, want in ((part.files, full.files), (part.tombstones, full.tombstones)):
        want = want.select(got.schema.names).sort_by("path")
        assert got.sort_by("path").equals(want)
    assert "stats" not in part.files.schema.names and "partitionValues" not in part.tombstones.schema.names


def test_projection_keeps_the_reconciliation_key_and_refuses_unknown_fields():
    cols = FileColumns.of(add=("size",), remove=())
    assert cols.add.names == ["path", "size", "deletionVector"] and cols.remove.names == ["path", "deletionVector"]
    assert FileColumns().is_full and not cols.is_full and FileColumns().add.equals(ADD_SCHEMA)
    with pytest.raises(ValueError, match="unknown file action field"):
        FileColumns.of(add=("statz",), remove=())


def test_fingerprints_find_every_member_and_agree_with_exact_membership():
    rnd = random.Random(7)
    alphabet = "abcxyz/=._-%é日 0123456789"
    members = list({"".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 40))) for _ in range(5000)})
    others = [m + "x" for m in members[:2000]] + [m[:-1] for m in members[:2000] if len(m) > 1] + ["", "/"]
    chunked = pa.chunked_array([pa.array(members[:2500]), pa.array(members[2500:])])
    fp, exact = PathSet(chunked, exact_up_to=0), PathSet(chunked)
    assert not fp.exact and exact.exact and len(fp) == len(members)
    probe = pa.array(members + others)
    want = pc.is_in(probe, value_set=pa.array(members)).to_pylist()
    assert fp.contains(probe).to_pylist() == want == exact.contains(probe).to_pylist()
    assert fp.contains(pa.array([], pa.string())).to_pylist() == []
    # Equal text, equal fingerprint: from any chunking and any batch.
    assert list(fingerprints(probe.slice(0, 10))) == list(
        fingerprints(pa.chunked_array([probe.slice(0, 4), probe.slice(4, 6)]))
    )


@pytest.mark.parametrize("checkpoint_at", [None, 5])
def test_plans_are_the_same_with_fingerprints_and_a_streamed_inventory(tmp_path, monkeypatch, checkpoint_at):
    path = str(tmp_path / "t")
    _history(path, checkpoint_at)
    listed = plan_vacuum(path, **SHORT)
    rows_ = []
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            full = os.path.join(dirpath, f)
            rows_.append(
                {
                    "path": "file:" + full,
                    "size": os.path.getsize(full),
                    "modificationTime": int(os.path.getmtime(full) * 1000),
                }
            )
    inv = str(tmp_path / "inventory.parquet")
    pq.write_table(pa.Table.from_pylist(rows_ + rows_[:3]), inv)  # three objects listed twice
    plans = [listed, plan_vacuum(path, **SHORT, inventory=inv)]
    monkeypatch.setattr(path_set, "EXACT_UP_TO", 0)
    monkeypatch.setattr(inventory_module, "BATCH_ROWS", 3)
    plans += [plan_vacuum(path, **SHORT), plan_vacuum(path, **SHORT, inventory=inv)]
    files = [p.files.select(["path", "size", "reason"]).to_pylist() for p in plans]
    assert files[0] and all(f == files[0] for f in files), files
    assert {f["reason"] for f in files[0]} >= {
        "expired tombstone: removed before the cutoff",
        "not referenced by any retained version",
    }
    assert any(r["path"].startswith("dv/") for r in files[0]), "a DV file of an expired tombstone is planned"
    assert all(p.snapshot is not None and p.snapshot.files.num_rows == 0 for p in plans), "plans keep no file list"
    assert (
        plans[1].stats["files_listed"]
        == plans[3].stats["files_listed"]
        == len(rows_) + 3 - sum(1 for r in rows_ if "/_delta_log/" in r["path"])
    )
    assert plans[0].stats["protected_paths"] == plans[2].stats["protected_paths"] > 0


def test_local_engine_refuses_a_plan_too_large_to_hold_and_names_the_spark_engine(tmp_path, monkeypatch):
    from deltalog.errors import OperationRefusedError
    from deltalog.vacuuming import plan as plan_module

    path = str(tmp_path / "t")
    _history(path, None)
    monkeypatch.setattr(plan_module, "LOCAL_CANDIDATES_LIMIT", 2)
    with pytest.raises(OperationRefusedError, match="engine='spark'") as err:
        plan_vacuum(path, **SHORT)
    assert "Nothing was deleted" in str(err.value)
