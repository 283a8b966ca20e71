"""Row tracking (PROTOCOL.md "Row Tracking"): fresh row IDs on every commit that adds files, stable ones kept by compaction."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.commit.transaction import Transaction
from deltalog.compaction import compact
from deltalog.errors import OperationRefusedError
from deltalog.ingest import commit_request
from deltalog.protocol.table_protocol import Protocol
from helpers import make_table, rows, write_data_file

ROW_ID = "_row-id-col-7"
ROW_VERSION = "_row-commit-version-col-7"
PROTOCOL = Protocol(1, 7, None, ("rowTracking", "domainMetadata"))
ENABLED = {
    "delta.enableRowTracking": "true",
    "delta.rowTracking.materializedRowIdColumnName": ROW_ID,
    "delta.rowTracking.materializedRowCommitVersionColumnName": ROW_VERSION,
}


def _table(path: str, configuration: dict[str, str] | None = None) -> DeltaTable:
    return make_table(path, protocol=PROTOCOL, configuration=ENABLED if configuration is None else configuration)


def _request(path: str, *sizes: int, start: int = 0) -> dict:
    adds = []
    for n in sizes:
        adds.append({"path": write_data_file(path, rows(n, start=start))["path"]})
        start += n
    return {"operation": "WRITE", "add": adds}


def _hwm(table: DeltaTable) -> int:
    return json.loads(table.snapshot().domain_metadata["delta.rowTracking"]["configuration"])["rowIdHighWaterMark"]


def _row_fields(table: DeltaTable) -> dict[str, tuple[int, int]]:
    f = table.snapshot().files
    return {
        p: (b, v)
        for p, b, v in zip(
            f.column("path").to_pylist(),
            f.column("baseRowId").to_pylist(),
            f.column("defaultRowCommitVersion").to_pylist(),
        )
    }


def stable_rows(table: DeltaTable) -> dict[int, tuple[int, int]]:
    """``id`` column -> (stable row ID, stable row commit version), as PROTOCOL.md tells readers to compute them."""
    snap = table.snapshot()
    out: dict[int, tuple[int, int]] = {}
    for path, base, version in zip(
        snap.files.column("path").to_pylist(),
        snap.files.column("baseRowId").to_pylist(),
        snap.files.column("defaultRowCommitVersion").to_pylist(),
    ):
        data = pq.read_table(os.path.join(table.storage.root, path))
        ids = data.column("id").to_pylist()
        mat_id = data.column(ROW_ID).to_pylist() if ROW_ID in data.column_names else [None] * len(ids)
        mat_v = data.column(ROW_VERSION).to_pylist() if ROW_VERSION in data.column_names else [None] * len(ids)
        for pos, (i, rid, rv) in enumerate(zip(ids, mat_id, mat_v)):
            out[i] = (base + pos if rid is None else rid, version if rv is None else rv)
    return out


def test_commit_request_assigns_row_ids_above_the_high_water_mark(tmp_path):
    path = str(tmp_path / "t")
    t = _table(path)
    r1 = commit_request(t, _request(path, 3, 2))
    fields = sorted(_row_fields(t).values())
    assert fields == [(0, r1.version), (3, r1.version)]
    assert _hwm(t) == 4
    r2 = commit_request(t, _request(path, 4, start=5))
    assert sorted(_row_fields(t).values())[-1] == (5, r2.version)
    assert _hwm(t) == 8
    # Every row ID is unique across the table.
    ids = [rid for rid, _ in stable_rows(t).values()]
    assert sorted(ids) == list(range(9))


def test_supported_but_not_enabled_still_assigns_fresh_ids(tmp_path):
    path = str(tmp_path / "t")
    t = _table(path, configuration={})
    commit_request(t, _request(path, 2))
    assert list(_row_fields(t).values()) == [(0, 1)]
    assert _hwm(t) == 1


def test_suspended_row_tracking_assigns_nothing(tmp_path):
    path = str(tmp_path / "t")
    t = _table(path, configuration={"delta.rowTrackingSuspended": "true"})
    commit_request(t, _request(path, 2))
    assert list(_row_fields(t).values()) == [(None, None)]
    assert "delta.rowTracking" not in t.snapshot().domain_metadata


def test_a_writer_that_lost_the_race_reassigns_above_the_winner(tmp_path):
    path = str(tmp_path / "t")
    t = _table(path)
    snap = t.snapshot()
    txns = []
    for start in (0, 10):
        txn = Transaction(t.storage, snap, operation="WRITE", operation_parameters={"mode": "Append"})
        txn.add([write_data_file(path, rows(3, start=start))])
        txns.append(txn)
    first = txns[0].commit()
    second = txns[1].commit()  # blind appends do not conflict: retried at the next version
    assert second.version == first.version + 1 and second.attempts == 2
    fields = _row_fields(t)
    assert sorted(fields.values()) == [(0, first.version), (3, second.version)]
    assert _hwm(t) == 5


def test_removes_carry_the_live_row_fields(tmp_path):
    path = str(tmp_path / "t")
    t = _table(path)
    commit_request(t, _request(path, 3))
    (live,) = _row_fields(t).items()
    r = commit_request(t, {"operation": "DELETE", "remove": [{"path": live[0]}]})
    log = os.path.join(path, "_delta_log", f"{r.version:020d}.json")
    removes = [json.loads(line)["remove"] for line in open(log) if '"remove"' in line]
    assert [(x["baseRowId"], x["defaultRowCommitVersion"]) for x in removes] == [live[1]]


def test_compaction_preserves_stable_row_ids_and_commit_versions(tmp_path):
    path = str(tmp_path / "t")
    t = _table(path)
    for start in (0, 3, 6):
        commit_request(t, _request(path, 3, start=start))
    before = stable_rows(t)
    old = _row_fields(t)
    compact(t, target_size=1 << 30)
    after = stable_rows(t)
    assert after == before
    # The new file has fresh fields of its own, above the old high-water mark, at the compaction's version.
    (new,) = _row_fields(t).values()
    assert new[0] == 9 and new[1] == t.snapshot().version and _hwm(t) == 17
    # A second compaction keeps the materialised values (they win over the new defaults).
    commit_request(t, _request(path, 2, start=20))
    before = stable_rows(t)
    compact(t, target_size=1 << 30)
    assert stable_rows(t) == before
    removes = []
    log = os.path.join(path, "_delta_log")
    for name in sorted(os.listdir(log)):
        if name.endswith(".json"):
            removes += [json.loads(line)["remove"] for line in open(os.path.join(log, name)) if '"remove"' in line]
    assert {(r["path"], (r["baseRowId"], r["defaultRowCommitVersion"])) for r in removes if r["path"] in old} == set(
        old.items()
    )


def test_compaction_refuses_an_enabled_table_without_materialised_column_names(tmp_path):
    path = str(tmp_path / "t")
    t = _table(path, configuration={"delta.enableRowTracking": "true"})
    for start in (0, 3):
        commit_request(t, _request(path, 3, start=start))
    with pytest.raises(OperationRefusedError, match="materialised columns"):
        compact(t, target_size=1 << 30)


def test_hidden_columns_stay_out_of_the_table_schema(tmp_path):
    path = str(tmp_path / "t")
    t = _table(path)
    for start in (0, 3):
        commit_request(t, _request(path, 3, start=start))
    compact(t, target_size=1 << 30)
    snap = t.snapshot()
    assert [f.name for f in snap.schema] == ["id", "value", "part"]
    stats = json.loads(snap.files.column("stats").to_pylist()[0])
    assert ROW_ID not in stats["minValues"] and stats["numRecords"] == 6
    data = pq.read_table(os.path.join(path, snap.files.column("path").to_pylist()[0]))
    assert data.schema.field(ROW_ID).type == pa.int64()


@pytest.mark.parametrize("mode", ["zorder", "purge"])
def test_layout_rewrites_preserve_stable_row_ids(tmp_path, mode):
    """Z-order reorders rows across files and a purge drops deleted ones: each surviving row keeps its ID."""
    path = str(tmp_path / "t")
    t = _table(path)
    for start in (0, 3, 6):
        commit_request(t, _request(path, 3, start=start))
    before = stable_rows(t)
    if mode == "zorder":
        result = compact(t, zorder_by=["value"])
    else:
        from test_compaction_support import add_deletion_vector

        first = t.snapshot().file_paths()[0]
        add_deletion_vector(path, first, [1])
        deleted = pq.read_table(os.path.join(path, first)).column("id")[1].as_py()
        before.pop(deleted)  # the purge drops the row the DV hides, and only it
        result = compact(t, purge_deletion_vectors=True)
    assert result.ok and result.commits
    assert stable_rows(t) == before
