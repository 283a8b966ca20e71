"""UniForm on S3 (moto's server, with conditional writes): the Iceberg metadata lands with If-None-Match and
pyiceberg, reading the bucket itself, sees what deltalake sees at every version.

deltalake's reader for column-mapped tables (its SQL engine) cannot read from moto's server here (its ranged
GETs time out), so deltalake reads a copy of the table's objects: the same log and data files."""

from __future__ import annotations

import pytest

from deltalog import DeltaTable
from deltalog.compaction import compact
from deltalog.uniform import sync_iceberg_metadata
from s3_server import ACCESS_KEY, REGION, SECRET_KEY
from uniform_tables import (
    append,
    create_uniform,
    deltalake_rows,
    iceberg_rows,
    iceberg_snapshot_for,
    rows,
    snapshots_by_delta_version,
)

pytestmark = [pytest.mark.slow, pytest.mark.s3]


def test_uniform_conversion_on_s3(s3_table_uri, s3_storage_options, s3_server, tmp_path):
    iceberg_props = {
        "s3.endpoint": s3_server,
        "s3.access-key-id": ACCESS_KEY,
        "s3.secret-access-key": SECRET_KEY,
        "s3.region": REGION,
    }
    table = create_uniform(s3_table_uri, storage_options=s3_storage_options)
    for i, part in enumerate("aab"):
        result = append(table, rows(i * 10, 10, part))
        assert {h.name: h.ok for h in result.hooks}["iceberg_metadata"], result.hooks
    append(table, rows(30, 10, "b"), run_hooks=False)  # left behind, as Delta Spark leaves it
    done = compact(table, target_size=1 << 30)
    assert done.commits
    latest = DeltaTable(s3_table_uri, s3_storage_options).snapshot().version
    by_version = snapshots_by_delta_version(s3_table_uri, iceberg_props)
    assert sorted(by_version) == list(range(1, latest + 1))  # the unconverted version too, caught up
    storage = table.storage
    copy = str(tmp_path / "copy")
    storage.fs.get(storage.root + "/", copy, recursive=True)
    for version in range(1, latest + 1):
        snapshot_id = iceberg_snapshot_for(by_version, version)
        assert iceberg_rows(s3_table_uri, snapshot_id=snapshot_id, properties=iceberg_props) == deltalake_rows(
            copy, version
        )
    names = {p.rsplit("/", 1)[-1] for p in storage.fs.ls(storage.join("metadata"))}
    assert {"version-hint.text", f"v{latest + 1 - 1}.metadata.json"} <= names
    assert sync_iceberg_metadata(s3_table_uri, storage_options=s3_storage_options).mode == "up_to_date"
