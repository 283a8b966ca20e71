"""The Spark engine on GCS and Azure: deltalog's compaction job through their Hadoop connectors, on the emulators.

``compact(engine="spark")`` on a ``gs://`` table adds the GCS connector (Maven
``com.google.cloud.bigdataoss:gcs-connector``), on an ``abfs[s]://`` / ``az://`` table
hadoop-azure's ABFS driver, from the jar cache, and the Hadoop settings of the table's own
storage options (endpoint, identity) to the job; nothing is configured by hand. The job reads
the small files and writes the new ones through the connector; deltalog commits them; deltalake
reads the same rows at every version. Azurite has no DFS endpoint: ABFS reaches it through the
Blob API, as it reaches an account without a hierarchical namespace.
"""

from __future__ import annotations

from collections import Counter

import pytest

from deltalog import DeltaTable, compact
from deltalog.compaction.spark import spark_table_uri, storage_spark_conf
from deltalog.engines.spark_packages import gcs_spark_conf
from deltalog.errors import InvalidArgumentError
from deltalog.storage import Storage
from fleet_helpers import small_files_table

pytestmark = [pytest.mark.slow, pytest.mark.spark]
STORES = [pytest.param("gcs", marks=pytest.mark.gcs), pytest.param("azure", marks=pytest.mark.azure)]


def _rows(uri: str, options: dict[str, str], version: int | None = None) -> Counter:
    import deltalake

    table = deltalake.DeltaTable(uri, storage_options=options, version=version).to_pyarrow_table()
    return Counter(zip(table.column("id").to_pylist(), table.column("value").to_pylist()))


@pytest.mark.parametrize("store", STORES)
def test_spark_engine_on_the_store_through_its_connector(request, tmp_path, store: str) -> None:
    uri = request.getfixturevalue(f"{store}_table_uri")
    options = request.getfixturevalue(f"{store}_storage_options")
    dl_options = request.getfixturevalue(f"{store}_deltalake_options")
    small_files_table(str(tmp_path / "t"), n=4)
    storage = Storage(uri, options)
    storage.fs.put(str(tmp_path / "t") + "/", storage.root + "/", recursive=True)
    before = _rows(uri, dl_options)
    result = compact(uri, storage_options=options, engine="spark", spark_options={"master": "local[1]", "timeout": 600})
    assert result.ok, result.to_dict()
    d = result.to_dict()
    assert d["engine"] == "spark" and d["num_files_removed"] == 4 and d["num_files_added"] == 1
    snapshot = DeltaTable(uri, options).snapshot()
    assert snapshot.version == 5 and snapshot.num_files == 1
    for version in range(1, 5):  # every appended version still reads as it was
        assert sum(_rows(uri, dl_options, version).values()) == 3 * version
    assert _rows(uri, dl_options) == before
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


def test_azure_hadoop_settings_follow_the_storage_options() -> None:
    from deltalog.engines.spark_packages import azure_spark_conf

    host = "acct.dfs.core.windows.net"
    keyed, scheme = azure_spark_conf(host, {"account_name": "acct", "account_key": "k=="})
    assert scheme == "abfss" and keyed[f"spark.hadoop.fs.azure.account.key.{host}"] == "k=="
    sas, _ = azure_spark_conf(host, {"account_name": "acct", "sas_token": "?sv=1&sig=x"})
    assert sas[f"spark.hadoop.fs.azure.sas.fixed.token.{host}"] == "sv=1&sig=x"
    principal, _ = azure_spark_conf(host, {"tenant_id": "t", "client_id": "c", "client_secret": "s"})
    assert principal[f"spark.hadoop.fs.azure.account.oauth2.client.endpoint.{host}"].endswith("/t/oauth2/token")
    managed, _ = azure_spark_conf(host, {"account_name": "acct", "managed_identity_client_id": "m"})
    assert managed[f"spark.hadoop.fs.azure.account.oauth.provider.type.{host}"].endswith("MsiTokenProvider")
    emulator, scheme = azure_spark_conf(
        host, {"connection_string": "AccountName=a;AccountKey=k;BlobEndpoint=http://127.0.0.1:10000/a;"}
    )
    assert scheme == "abfs" and emulator["spark.hadoop.fs.azure.abfs.endpoint"] == "127.0.0.1:10000"
    with pytest.raises(InvalidArgumentError, match="no anonymous access"):
        azure_spark_conf(host, {"account_name": "acct", "anon": True})


def test_azure_tables_are_named_as_abfs_names_them_and_credentials_are_not_logged() -> None:
    from deltalog.engines.spark.submit import _redacted

    keyed = {"account_name": "acct", "account_key": "k=="}
    assert spark_table_uri(Storage("az://c/lake/t", keyed)) == "abfss://c@acct.dfs.core.windows.net/lake/t"
    assert spark_table_uri(Storage("abfss://c@acct.blob.core.windows.net/t", keyed)) == (
        "abfss://c@acct.dfs.core.windows.net/t"
    )
    onelake = Storage("abfss://ws@onelake.dfs.fabric.microsoft.com/lh.Lakehouse/Tables/t", {"anon": False})
    assert spark_table_uri(onelake) == "abfss://ws@onelake.dfs.fabric.microsoft.com/lh.Lakehouse/Tables/t"
    conf = storage_spark_conf(Storage("az://c/t", keyed))
    shown = " ".join(_redacted([f"{k}={v}" for k, v in conf.items()]))
    assert "k==" not in shown and "fs.azure.account.key.acct.dfs.core.windows.net=***" in shown
