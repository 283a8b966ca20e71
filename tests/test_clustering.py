"""Liquid clustering: deltalog keeps the clustering domain and clustered files; commits need stats on its columns."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from deltalog import DeltaTable
from deltalog.commit.transaction import Transaction
from deltalog.compaction import compact
from deltalog.errors import OperationRefusedError
from deltalog.ingest import commit_request
from deltalog.protocol.table_protocol import Protocol
from helpers import make_table, rows, write_data_file

PROTOCOL = Protocol(1, 7, None, ("clustering", "domainMetadata"))
DOMAIN = {"clusteringColumns": [["value"]]}


def clustered_table(path: str, configuration: dict[str, str] | None = None) -> DeltaTable:
    t = make_table(path, protocol=PROTOCOL, configuration=configuration)
    txn = Transaction(t.storage, t.snapshot(), operation="CLUSTER BY", allow_system_domains=True)
    txn.set_domain_metadata("delta.clustering", json.dumps(DOMAIN))
    txn.commit()
    # Two files a clustering implementation wrote (as Delta Spark's OPTIMIZE does).
    adds = []
    for start in (0, 3):
        a = write_data_file(path, rows(3, start=start))
        a["stats"] = json.dumps(
            {"numRecords": 3, "minValues": {"value": f"v{start}"}, "maxValues": {}, "nullCount": {}}
        )
        a["clusteringProvider"] = "liquid"
        adds.append(a)
    txn = Transaction(t.storage, t.snapshot(), operation="OPTIMIZE")
    txn.add(adds)
    txn.commit()
    return t


def _providers(t: DeltaTable) -> dict[str, str | None]:
    f = t.snapshot().files
    return dict(zip(f.column("path").to_pylist(), f.column("clusteringProvider").to_pylist()))


def test_compaction_clusters_unclustered_files_and_keeps_clustered_ones_and_the_domain(tmp_path):
    path = str(tmp_path / "t")
    t = clustered_table(path)
    clustered = {p for p, v in _providers(t).items() if v}
    for start in (10, 20, 30):
        commit_request(
            t, {"operation": "WRITE", "add": [{"path": write_data_file(path, rows(2, start=start))["path"]}]}
        )
    # Every file is of a good size at this threshold: the clustered ones stay, the new ones are clustered.
    result = compact(t, target_size=1 << 30, small_file_threshold=1)
    assert result.plan.num_input_files == 3 and result.plan.clustering is not None
    after = _providers(t)
    assert clustered <= set(after) and {after[p] for p in clustered} == {"liquid"}
    new = [p for p in after if p not in clustered]
    assert len(new) == 1 and after[new[0]] == "liquid"  # the output is clustered by "value"
    assert json.loads(t.snapshot().domain_metadata["delta.clustering"]["configuration"]) == DOMAIN


def test_commit_request_needs_stats_on_clustering_columns(tmp_path):
    path = str(tmp_path / "t")
    # Only the first column gets stats: the clustering column "value" (second) would get none.
    t = clustered_table(path, configuration={"delta.dataSkippingNumIndexedCols": "1"})
    before = t.snapshot().version
    add = write_data_file(path, rows(2, start=50))
    with pytest.raises(OperationRefusedError, match="no statistics for clustering column 'value'"):
        commit_request(t, {"operation": "WRITE", "add": [{"path": add["path"]}]})
    assert t.snapshot().version == before
    assert os.path.exists(os.path.join(path, add["path"]))  # the caller's file is left alone


def test_stats_on_all_null_clustering_column_count(tmp_path):
    path = str(tmp_path / "t")
    t = clustered_table(path)
    data = rows(2, start=60).set_column(1, "value", pa.array([None, None], pa.string()))
    add = write_data_file(path, data)
    r = commit_request(t, {"operation": "WRITE", "add": [{"path": add["path"]}]})
    assert r.version == t.snapshot().version and _providers(t)[add["path"]] is None
