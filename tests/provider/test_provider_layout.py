"""DeltaCompactOperator's layout options: DV purge and Z-order (issue 18), real values only."""

from __future__ import annotations

import json
import os

import pytest

from deltalog import DeltaTable
from deltalog.create import create_table
from deltalog.errors import InvalidArgumentError
from deltalog.log.listing import commit_name
from deltalog_provider.operators import DeltaCompactOperator
from test_compaction_support import RICH_SCHEMA, add_deletion_vector, make_rich_table, read_multiset

pytestmark = pytest.mark.airflow


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"purge_deletion_vectors": "true"}, "purge_deletion_vectors must be True or False"),
        ({"purge_deletion_vectors": 1}, "purge_deletion_vectors must be True or False"),
        ({"purge_deletion_vectors": True, "min_deleted_share": "0.5"}, "min_deleted_share"),
        ({"min_deleted_share": 0.5}, "purge only"),
        ({"zorder_by": "x"}, "non-empty list"),
        ({"zorder_by": []}, "non-empty list"),
    ],
)
def test_bad_layout_options_fail_when_the_task_is_defined(kwargs, message):
    with pytest.raises(InvalidArgumentError, match=message):
        DeltaCompactOperator(task_id="c", table="/t", **kwargs)


def test_operator_purges_deletion_vectors(tmp_path):
    path = str(tmp_path / "t")
    create_table(path, RICH_SCHEMA, partition_by=["part"], configuration={"delta.enableDeletionVectors": "true"})
    make_rich_table(path, True, appends=2, rows_per_append=50)
    paths = DeltaTable(path).snapshot().file_paths()
    add_deletion_vector(path, paths[0], [0, 1, 2])
    before = read_multiset(path)
    op = DeltaCompactOperator(task_id="c", table=path, purge_deletion_vectors=True, emit_asset=False)
    metrics = op.execute({})
    assert metrics["num_files_removed"] == 1 and metrics["num_deletion_vectors_applied"] == 1
    assert read_multiset(path) == before
    version = DeltaTable(path).snapshot().version
    with open(os.path.join(path, "_delta_log", commit_name(version))) as fh:
        info = json.loads(fh.readline())["commitInfo"]
    assert info["operation"] == "REORG" and info["operationParameters"]["applyPurge"] == "true"


def test_operator_zorders(tmp_path):
    path = make_rich_table(str(tmp_path / "t"), False, appends=3, rows_per_append=40)
    before = read_multiset(path)
    op = DeltaCompactOperator(task_id="c", table=path, zorder_by=["id", "ts"], emit_asset=False)
    metrics = op.execute({})
    assert metrics["num_files_removed"] == 3 and metrics["num_files_added"] == 1
    assert read_multiset(path) == before


def test_dv_share_threshold_makes_a_purge_due(tmp_path):
    from deltalog_provider.utils.checks import MaintenanceThresholds, evaluate_health

    path = str(tmp_path / "t")
    create_table(path, RICH_SCHEMA, partition_by=["part"], configuration={"delta.enableDeletionVectors": "true"})
    make_rich_table(path, True, appends=2, rows_per_append=50)
    table = DeltaTable(path)
    thresholds = MaintenanceThresholds.from_values(max_dv_hidden_share="0.05")
    assert "dv_hidden_share" not in evaluate_health(table, thresholds).crossed  # no DV at all
    paths = table.snapshot().file_paths()
    add_deletion_vector(path, paths[0], list(range(10)))  # 10 of 200 rows: 0.05, not above
    assert "dv_hidden_share" not in evaluate_health(table, thresholds).crossed
    add_deletion_vector(path, paths[1], [0])
    report = evaluate_health(table, thresholds)
    assert report.crossed["dv_hidden_share"] == {"value": 0.055, "threshold": 0.05} and report.due
    with pytest.raises(InvalidArgumentError, match="max_dv_hidden_share"):
        MaintenanceThresholds.from_values(max_dv_hidden_share="most")
