"""The Spark engine on GCS: deltalog's compaction job through the GCS connector, against fake-gcs-server.

``compact(engine="spark")`` on a ``gs://`` table adds the GCS connector (Maven
``com.google.cloud.bigdataoss:gcs-connector``, from the jar cache) and the Hadoop settings of the
table's own storage options (endpoint, identity, project) to the job; nothing is configured by
hand. The job reads the small files and writes the new ones through the connector; deltalog
commits them; deltalake reads the same rows at every version.
"""

from __future__ import annotations

from collections import Counter

import pytest

from deltalog import DeltaTable, compact
from deltalog.engines.spark_packages import gcs_spark_conf
from deltalog.errors import InvalidArgumentError
from deltalog.storage import Storage
from fleet_helpers import small_files_table

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.gcs]


def _rows(uri: str, options: dict[str, str], version: int | None = None) -> Counter:
    import deltalake

    table = deltalake.DeltaTable(uri, storage_options=options, version=version).to_pyarrow_table()
    return Counter(zip(table.column("id").to_pylist(), table.column("value").to_pylist()))


def test_spark_engine_on_gcs_through_the_gcs_connector(
    tmp_path, gcs_table_uri, gcs_storage_options, gcs_deltalake_options
) -> None:
    small_files_table(str(tmp_path / "t"), n=4)
    storage = Storage(gcs_table_uri, gcs_storage_options)
    storage.fs.put(str(tmp_path / "t") + "/", storage.root + "/", recursive=True)
    before = _rows(gcs_table_uri, gcs_deltalake_options)
    result = compact(
        gcs_table_uri,
        storage_options=gcs_storage_options,
        engine="spark",
        spark_options={"master": "local[1]", "timeout": 600},
    )
    assert result.ok, result.to_dict()
    d = result.to_dict()
    assert d["engine"] == "spark" and d["num_files_removed"] == 4 and d["num_files_added"] == 1
    snapshot = DeltaTable(gcs_table_uri, gcs_storage_options).snapshot()
    assert snapshot.version == 5 and snapshot.num_files == 1
    for version in range(1, 5):  # every appended version still reads as it was
        assert sum(_rows(gcs_table_uri, gcs_deltalake_options, version).values()) == 3 * version
    assert _rows(gcs_table_uri, gcs_deltalake_options) == before
    leftovers = [f.path for f in storage.walk_files() if "_deltalog_staging" in f.path or f.path.endswith("_SUCCESS")]
    assert leftovers == []


def test_gcs_hadoop_settings_follow_the_storage_options(tmp_path) -> None:
    key = tmp_path / "key.json"
    key.write_text("{}")
    anon = gcs_spark_conf({"token": "anon", "endpoint_url": "http://127.0.0.1:9/", "project": "p"})
    assert anon["spark.hadoop.fs.gs.storage.root.url"] == "http://127.0.0.1:9/"
    assert anon["spark.hadoop.fs.gs.auth.null.enable"] == "true" and anon["spark.hadoop.fs.gs.project.id"] == "p"
    assert anon["spark.hadoop.fs.gs.block.size"] == str(64 << 20)  # Hadoop 3.5 says "64m", the connector an int
    keyed = gcs_spark_conf({"token": str(key)})
    assert keyed["spark.hadoop.fs.gs.auth.service.account.json.keyfile"] == str(key)
    assert "spark.hadoop.fs.gs.storage.root.url" not in keyed  # storage.googleapis.com, the connector's default
    adc = gcs_spark_conf({})
    assert not any("auth" in k for k in adc)  # application default credentials: the connector's own chain
    with pytest.raises(InvalidArgumentError, match="no Hadoop form"):
        gcs_spark_conf({"token": {"type": "service_account"}})
    with pytest.raises(InvalidArgumentError, match="is not one"):
        gcs_spark_conf({"token": str(tmp_path / "missing.json")})
