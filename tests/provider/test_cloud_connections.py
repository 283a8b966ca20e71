"""Azure and Google credentials from the Airflow connections a deployment already has (issue 28).

The mapping of every documented field of ``wasb`` / ``adls`` and ``google_cloud_platform``
connections is checked on its own; then real Airflow connections (``AIRFLOW_CONN_*``
environment variables, as a deployment's secrets backend would serve them) carry a table
through create, appends, compaction and a read on Azurite and fake-gcs-server:

- Azure: ``wasb_default`` with the account key (login/password, host = the emulator's
  account URL), ``wasb`` with a SAS token, ``azure_data_lake_default`` with a connection string;
- GCS: ``google_cloud_default`` with a service-account key (``keyfile_dict``) whose
  ``token_uri`` is a local OAuth token endpoint, and application default credentials
  (``GOOGLE_APPLICATION_CREDENTIALS``) with the same key: google-auth signs a JWT, gets an
  access token from that endpoint and gcsfs sends it; the endpoint counts the grants.

Token credentials on Azure (service principal, managed identity) need Azure AD and an
HTTPS account (Azurite serves OAuth only over HTTPS); their mapping is checked here, their
tokens reach obstore and adlfs as tested in tests/test_azure_gcs.py (docs/azure-gcs.md).
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from deltalog.errors import InvalidArgumentError
from deltalog_provider.hooks.cloud_connections import azure_options_from_connection, gcs_options_from_connection
from deltalog_provider.hooks.delta_table import DeltaTableHook
from helpers import rows

pytestmark = pytest.mark.airflow


def connection(conn_type: str, **fields: Any) -> Any:
    from airflow.models.connection import Connection

    extra = fields.pop("extra", None)
    return Connection(conn_id=f"{conn_type}_test", conn_type=conn_type, extra=json.dumps(extra or {}), **fields)


def set_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, conn_type: str, **fields: Any) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": conn_type, **fields}))


# --- Azure: the fields of wasb and adls connections --------------------------------------------


def test_azure_fields_map_as_the_azure_provider_reads_them() -> None:
    public = "https://acct.blob.core.windows.net/"
    cases = [
        (connection("wasb", extra={"connection_string": "X=1"}), {"connection_string": "X=1"}),
        (
            connection("wasb", host=public, login="app", password="s3cret", extra={"tenant_id": "t"}),
            {"account_name": "acct", "tenant_id": "t", "client_id": "app", "client_secret": "s3cret"},
        ),
        (connection("wasb", login="acct", password="k=="), {"account_name": "acct", "account_key": "k=="}),
        (
            connection("wasb", host=public, extra={"shared_access_key": "k=="}),
            {"account_name": "acct", "account_key": "k=="},
        ),
        (connection("wasb", host=public, extra={"sas_token": "?sv=1&sig=x"}), {"account_name": "acct", "sas_token": "sv=1&sig=x"}),
        (
            connection("wasb", extra={"sas_token": "https://acct.blob.core.windows.net/?sv=1&sig=x"}),
            {"account_name": "acct", "sas_token": "sv=1&sig=x"},
        ),
        (
            connection("wasb", host=public, extra={"managed_identity_client_id": "mi", "workload_identity_tenant_id": "w"}),
            {"account_name": "acct", "anon": False, "managed_identity_client_id": "mi", "workload_identity_tenant_id": "w"},
        ),
        (connection("wasb", host=public, extra={"public_read": True}), {"account_name": "acct", "anon": True}),
        (connection("wasb", host=public, extra={"extra__wasb__tenant_id": "t"}, login="a", password="b"),
         {"account_name": "acct", "tenant_id": "t", "client_id": "a", "client_secret": "b"}),
        # adls: the host is the account name; a password without a tenant is the account key.
        (connection("adls", host="lake", password="k=="), {"account_name": "lake", "account_key": "k=="}),
        (connection("adls", host="lake"), {"account_name": "lake", "anon": False}),
        (
            connection("adls", host="lake", login="app", password="s", extra={"tenant_id": "t"}),
            {"account_name": "lake", "tenant_id": "t", "client_id": "app", "client_secret": "s"},
        ),
        # A sovereign cloud's HTTPS host: token credentials go to that host.
        (
            connection("wasb", host="https://acct.blob.core.chinacloudapi.cn", extra={"managed_identity_client_id": "m"}),
            {"account_name": "acct", "account_host": "acct.blob.core.chinacloudapi.cn", "anon": False,
             "managed_identity_client_id": "m"},
        ),
    ]  # fmt: skip
    for conn, expected in cases:
        assert azure_options_from_connection(conn) == expected, conn.get_uri()
    # An emulator's plain-HTTP endpoint with a key: a connection string (how adlfs reaches it).
    emulator = connection(
        "wasb", host="http://127.0.0.1:10000/devstoreaccount1", login="devstoreaccount1", password="k"
    )
    assert azure_options_from_connection(emulator) == {
        "connection_string": "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=k;"
        "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"
    }
    with pytest.raises(InvalidArgumentError, match="names no storage account"):
        azure_options_from_connection(connection("wasb"))
    with pytest.raises(InvalidArgumentError, match="client id .* and secret"):
        azure_options_from_connection(connection("wasb", host=public, extra={"tenant_id": "t"}))
    with pytest.raises(InvalidArgumentError, match="over HTTPS"):
        azure_options_from_connection(connection("wasb", host="http://10.0.0.1:1/acct"))


@pytest.mark.azure
def test_wasb_and_adls_connections_carry_a_table_on_azurite(azure_server: str, monkeypatch, tmp_path) -> None:
    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

    from azure_server import ACCOUNT, ACCOUNT_KEY, blob_endpoint, connection_string, create_container

    endpoint = blob_endpoint(azure_server)
    sas = generate_account_sas(
        ACCOUNT,
        ACCOUNT_KEY,
        ResourceTypes(service=True, container=True, object=True),
        AccountSasPermissions(read=True, write=True, delete=True, list=True, add=True, create=True),
        expiry=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1),
    )
    identities = {
        "wasb_default": ("wasb", {"host": endpoint, "login": ACCOUNT, "password": ACCOUNT_KEY}),
        "wasb_sas": ("wasb", {"host": endpoint, "extra": {"sas_token": sas}}),
        "azure_data_lake_default": ("adls", {"extra": {"connection_string": connection_string(azure_server)}}),
    }
    for conn_id, (conn_type, fields) in identities.items():
        set_connection(monkeypatch, conn_id, conn_type, **fields)
        container = create_container(azure_server)
        set_connection(
            monkeypatch, "deltalog_az", "deltalog", host=f"abfs://{container}/lake", extra={"azure_conn_id": conn_id}
        )
        exercise(DeltaTableHook("deltalog_az"), conn_id)


# --- Google: the fields of google_cloud_platform connections, and a token endpoint --------------------


class TokenEndpoint:
    """An OAuth 2.0 token endpoint on 127.0.0.1 that grants any JWT bearer assertion (counted)."""

    def __init__(self) -> None:
        owner = self
        self.grants = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                if "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer" not in body:
                    self.send_response(400)
                    self.end_headers()
                    return
                owner.grants += 1
                doc = json.dumps({"access_token": f"token-{owner.grants}", "expires_in": 3600, "token_type": "Bearer"})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(doc.encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def service_account_key(self) -> dict[str, Any]:
        """A new service-account key (JSON, as the console downloads it) whose tokens come from here."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
        return {
            "type": "service_account",
            "project_id": "deltalog-test",
            "private_key_id": "k1",
            "private_key": pem,
            "client_email": "maintainer@deltalog-test.iam.gserviceaccount.com",
            "client_id": "1",
            "token_uri": self.url,
        }


@pytest.fixture
def token_endpoint() -> Iterator[TokenEndpoint]:
    endpoint = TokenEndpoint()
    yield endpoint
    endpoint.server.shutdown()
    endpoint.server.server_close()


def test_google_fields_map_as_the_google_provider_reads_them(token_endpoint: TokenEndpoint, tmp_path) -> None:
    from google.oauth2 import service_account

    key = token_endpoint.service_account_key()
    options = gcs_options_from_connection(
        connection("google_cloud_platform", extra={"keyfile_dict": json.dumps(key), "project": "p"})
    )
    assert options["project"] == "p" and isinstance(options["token"], service_account.Credentials)
    path = tmp_path / "key.json"
    path.write_text(json.dumps(key))
    legacy = {"extra__google_cloud_platform__key_path": str(path)}
    options = gcs_options_from_connection(connection("google_cloud_platform", extra=legacy))
    assert options["token"].service_account_email == key["client_email"]
    assert gcs_options_from_connection(connection("google_cloud_platform")) == {"token": "google_default"}
    assert gcs_options_from_connection(connection("google_cloud_platform", extra={"is_anonymous": True})) == {
        "token": "anon"
    }
    with pytest.raises(InvalidArgumentError, match="Secret Manager"):
        gcs_options_from_connection(connection("google_cloud_platform", extra={"key_secret_name": "k"}))
    with pytest.raises(InvalidArgumentError, match="cannot load its credentials"):
        gcs_options_from_connection(connection("google_cloud_platform", extra={"keyfile_dict": '{"type": "x"}'}))


@pytest.mark.gcs
def test_google_connections_carry_a_table_on_fake_gcs_server(
    gcs_server: str, token_endpoint: TokenEndpoint, monkeypatch, tmp_path
) -> None:
    from gcs_server import create_bucket

    key = token_endpoint.service_account_key()
    key_file = tmp_path / "adc.json"
    key_file.write_text(json.dumps(key))
    identities = {
        "google_cloud_default": {"extra": {"keyfile_dict": json.dumps(key), "project": "deltalog-test"}},
        "google_adc": {"extra": {"project": "deltalog-test"}},  # application default credentials
    }
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
    for conn_id, fields in identities.items():
        set_connection(monkeypatch, conn_id, "google_cloud_platform", **fields)
        bucket = create_bucket(gcs_server)
        set_connection(
            monkeypatch,
            "deltalog_gs",
            "deltalog",
            host=f"gs://{bucket}/lake",
            extra={"gcp_conn_id": conn_id, "endpoint_url": gcs_server},
        )
        granted = token_endpoint.grants
        exercise(DeltaTableHook("deltalog_gs"), conn_id)
        assert token_endpoint.grants > granted, f"{conn_id}: no access token was minted"


def exercise(hook: DeltaTableHook, conn_id: str) -> None:
    """Create a table through the hook's options, append three files, compact them, read it back."""
    import pyarrow.parquet as pq

    from deltalog import Transaction, compact, create_table
    from helpers import DEFAULT_SCHEMA

    uri = hook.resolve_uri("events")
    create_table(uri, DEFAULT_SCHEMA, storage_options=hook.storage_options_for(uri))
    table = hook.get_table("events")
    storage = table.storage
    for i in range(3):
        rel = f"part-{i}.parquet"
        with storage.fs.open(storage.join(rel), "wb") as fh:
            pq.write_table(rows(2, i * 2), fh)
        info = storage.info(storage.join(rel))
        add = {"path": rel, "partitionValues": {}, "size": info.size, "modificationTime": info.modification_time,
               "dataChange": True, "stats": '{"numRecords":2}'}  # fmt: skip
        txn = Transaction(storage, table.snapshot(), operation="WRITE")
        txn.add([add])
        txn.commit()
    result = compact(table)
    assert result.ok and len(result.committed_bins) == 1, conn_id
    snapshot = hook.get_table("events").snapshot()
    (path,) = snapshot.file_paths()
    with storage.open_input(storage.join(path)) as fh:
        assert sorted(pq.read_table(fh).column("id").to_pylist()) == list(range(6)), conn_id
    assert snapshot.version == 4, conn_id


def _redact(text: str) -> str:
    try:  # Airflow >= 3.1
        from airflow.sdk._shared.secrets_masker import redact
    except ImportError:  # Airflow 3.0
        from airflow.sdk.execution_time.secrets_masker import redact  # type: ignore[no-redef]
    return str(redact(text))


def test_the_spark_submitter_passes_the_tables_hadoop_settings_and_hides_its_credentials(tmp_path, monkeypatch):
    """The operator's Spark path: the hand-off's conf reaches spark-submit, its credentials never the task log."""
    import os

    from deltalog import SparkHandoff
    from deltalog_provider.hooks.spark_submit import SparkJobSubmitter

    seen = tmp_path / "argv"
    script = tmp_path / "bin" / "spark-submit"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\necho "$@" > {seen}\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    set_connection(monkeypatch, "spark_mask", "spark", host="local[1]")
    host = "acct.dfs.core.windows.net"
    conf = {f"spark.hadoop.fs.azure.account.key.{host}": "k3y-value-for-the-mask-test", "spark.jars": "/x.jar"}
    handoff = SparkHandoff("r1", f"abfss://c@{host}/t", "/tmp/plan.json", "/tmp/request.json", conf)
    SparkJobSubmitter("spark_mask")(handoff)
    argv = seen.read_text()
    assert f"spark.hadoop.fs.azure.account.key.{host}=k3y-value-for-the-mask-test" in argv
    assert f"--table abfss://c@{host}/t" in argv and "spark.jars=/x.jar" in argv
    assert handoff.secrets() == ["k3y-value-for-the-mask-test"]
    assert "k3y-value-for-the-mask-test" not in _redact(f"Spark-Submit cmd: {argv}")
