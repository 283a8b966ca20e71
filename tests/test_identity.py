"""Identity columns on commit requests: values checked against start, step and high-water mark; the mark advanced."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from deltalog import DeltaTable
from deltalog.errors import OperationRefusedError
from deltalog.ingest import commit_request
from deltalog.protocol.table_protocol import Protocol
from helpers import make_table, write_data_file

PROTOCOL = Protocol(1, 7, None, ("identityColumns",))


def _table(
    path: str, *, start: int = 1, step: int = 1, hwm: int | None = None, explicit: bool = False, nullable: bool = False
) -> DeltaTable:
    meta = {"delta.identity.start": str(start), "delta.identity.step": str(step)}
    meta["delta.identity.allowExplicitInsert"] = "true" if explicit else "false"
    if hwm is not None:
        meta["delta.identity.highWaterMark"] = str(hwm)
    schema = pa.schema([pa.field("id", pa.int64(), nullable, metadata=meta), pa.field("s", pa.string())])
    return make_table(path, schema=schema, protocol=PROTOCOL)


def _commit(path: str, ids: list[int | None]):
    data = pa.table({"id": pa.array(ids, pa.int64()), "s": [str(i) for i in ids]})
    add = write_data_file(path, data)
    return commit_request(path, {"operation": "WRITE", "add": [{"path": add["path"]}]})


def _mark(path: str):
    field = json.loads(DeltaTable(path).snapshot().metadata.schema_string)["fields"][0]
    return field["metadata"].get("delta.identity.highWaterMark")


def test_values_beyond_the_mark_are_committed_and_advance_it(tmp_path):
    path = str(tmp_path / "t")
    _table(path, start=1, step=1)
    _commit(path, [1, 2, 3])
    assert _mark(path) == 3
    _commit(path, [5, 4])
    assert _mark(path) == 5


@pytest.mark.parametrize(
    ("ids", "why"),
    [
        ([3, 4], "not beyond the high-water mark 3"),
        ([7, 7], "repeat a value"),
        ([6, 8], "not start 0 plus a multiple of step 2"),  # start 0, step 2, mark 3
    ],
)
def test_bad_values_are_refused_naming_the_column(tmp_path, ids, why):
    path = str(tmp_path / "t")
    if "multiple" in why:
        _table(path, start=0, step=2, hwm=4)
        ids = [7, 9]
    else:
        _table(path, start=1, step=1, hwm=3)
    before = DeltaTable(path).snapshot().version
    with pytest.raises(OperationRefusedError, match=f"identity column 'id': .*{why.split(' 0 ')[0]}"):
        _commit(path, ids)
    assert DeltaTable(path).snapshot().version == before


def test_negative_step_counts_down(tmp_path):
    path = str(tmp_path / "t")
    _table(path, start=-1, step=-2, hwm=-3)
    _commit(path, [-5, -7])
    assert _mark(path) == -7
    with pytest.raises(OperationRefusedError, match="not beyond"):
        _commit(path, [-7])


def test_explicit_inserts_push_the_mark_past_them_on_the_step(tmp_path):
    path = str(tmp_path / "t")
    _table(path, start=1, step=10, hwm=11, explicit=True)
    _commit(path, [5, 42])  # any value is allowed; the next generated value must not collide
    assert _mark(path) == 51
    _commit(path, [2])  # below the mark: nothing to move
    assert _mark(path) == 51


def test_a_file_without_the_identity_column_is_refused(tmp_path):
    path = str(tmp_path / "t")
    _table(path, nullable=True)  # a NOT NULL column missing is already a schema mismatch
    add = write_data_file(path, pa.table({"s": ["a"]}))
    with pytest.raises(OperationRefusedError, match="no values for identity column 'id'"):
        commit_request(path, {"operation": "WRITE", "add": [{"path": add["path"]}]})


def test_null_identity_values_are_refused(tmp_path):
    path = str(tmp_path / "t")
    _table(path, nullable=True)  # Delta Spark declares identity columns NOT NULL; a nullable one is still checked
    with pytest.raises(OperationRefusedError, match="identity column 'id': 1 new rows have no value"):
        _commit(path, [None, 2])
