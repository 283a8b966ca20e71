"""Tables on Azure Blob Storage and Google Cloud Storage, against their emulators (Azurite, fake-gcs-server).

Each test runs on three stores: ``azure`` (commits and reads through obstore, the default),
``azure-adlfs`` (``{"obstore": "false"}``: every request through adlfs, the fallback when the
options do not translate) and ``gcs`` (commits through gcsfs, reads through obstore).

- the commit primitive: a same-path race has exactly one winner; a create whose response
  was lost (it landed, then the client reported a timeout or its own retry's "exists") is
  ours, not a lost race; another writer's object is a lost race; a failure with nothing
  landed is sent again;
- every operation on a table on each store (snapshot, health, compaction, Z-order, purge,
  convert, create, commit requests, manifests, checkpoint, a real vacuum, log cleanup, the
  fleet run with its lease), checked by deltalake (the Spark engine: test_compaction_cloud_spark.py);
- requests per snapshot load and per commit, counted by the emulator;
- URI forms, OneLake defaults, option translation and refusal of unknown options.

The racing writers (processes) are in ``test_azure_gcs_races.py``.
"""

from __future__ import annotations

import io
import json
import threading
import time
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.storage import Storage

pytestmark = [pytest.mark.slow]

STORES = [
    pytest.param("azure", marks=pytest.mark.azure),
    pytest.param("azure-adlfs", marks=pytest.mark.azure),
    pytest.param("gcs", marks=pytest.mark.gcs),
]


class Cloud:
    """One store under test: a fresh table URI, deltalog's and deltalake's options, the emulator."""

    def __init__(self, request: pytest.FixtureRequest, store: str) -> None:
        base = "gcs" if store == "gcs" else "azure"
        self.store = store
        self.uri: str = request.getfixturevalue(f"{base}_table_uri")
        self.options: dict[str, Any] = dict(request.getfixturevalue(f"{base}_storage_options"))
        if store == "azure-adlfs":
            self.options["obstore"] = "false"
        self.deltalake_options: dict[str, str] = request.getfixturevalue(f"{base}_deltalake_options")
        self.emulator = request.getfixturevalue(f"{base}_emulator")

    def storage(self) -> Storage:
        return Storage(self.uri, self.options)

    def upload(self, local: str) -> None:
        storage = self.storage()
        storage.fs.put(local.rstrip("/") + "/", storage.root + "/", recursive=True)

    def rows(self, version: int | None = None) -> list[int]:
        import deltalake

        table = deltalake.DeltaTable(self.uri, storage_options=self.deltalake_options, version=version)
        return sorted(table.to_pyarrow_table().column("id").to_pylist())


@pytest.fixture(params=STORES)
def cloud(request: pytest.FixtureRequest) -> Cloud:
    return Cloud(request, request.param)


def _put_parquet(storage: Storage, rel: str, ids: list[int]) -> dict[str, Any]:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), buf)
    storage.fs.pipe_file(storage.join(rel), buf.getvalue())
    return {
        "path": rel,
        "size": len(buf.getvalue()),
        "partitionValues": {},
        "stats": json.dumps({"numRecords": len(ids)}),
    }


def _append(table: DeltaTable, rel: str, ids: list[int]):
    from deltalog.commit import Transaction

    txn = Transaction(table.storage, table.snapshot(), operation="WRITE", operation_parameters={"mode": "Append"})
    txn.add([_put_parquet(table.storage, rel, ids)])
    return txn.commit()


# --- the commit primitive ------------------------------------------------------------------------


def test_the_store_is_opened_with_the_chosen_clients(cloud: Cloud) -> None:
    storage = cloud.storage()
    assert storage.supports_atomic_create
    reads = storage._fast_reads
    if cloud.store == "azure-adlfs":
        assert reads is None
    else:
        assert reads is not None and reads.kind == ("gcs" if cloud.store == "gcs" else "azure")
    if cloud.store == "gcs":
        import gcsfs.core

        assert type(storage.fs) is gcsfs.core.GCSFileSystem  # the JSON-API class, not the gRPC-probing one


def test_same_path_race_has_exactly_one_winner(cloud: Cloud) -> None:
    storage = cloud.storage()
    for round_ in range(10):
        path = storage.join("_delta_log", f"{round_:020d}.json")
        barrier = threading.Barrier(8)
        outcomes: list[tuple[int, str]] = []

        def contender(
            i: int, path: str = path, barrier: threading.Barrier = barrier, outcomes: list = outcomes
        ) -> None:
            body = f'{{"writer": {i}, "path": "{path}"}}\n'.encode()
            barrier.wait()
            try:
                storage.put_if_absent(path, body)
                outcomes.append((i, "won"))
            except FileExistsError:
                outcomes.append((i, "lost"))

        threads = [threading.Thread(target=contender, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        winners = [i for i, o in outcomes if o == "won"]
        assert len(outcomes) == 8 and len(winners) == 1, outcomes
        assert json.loads(storage.read_bytes(path))["writer"] == winners[0]


def _creator(monkeypatch: pytest.MonkeyPatch, storage: Storage, wrap) -> list[int]:
    """Replace the store's create with ``wrap(real_create)``; returns the list of calls made."""
    calls: list[int] = []
    reads = storage._reads()
    if reads is not None and reads.kind == "azure":
        real = reads.create

        def patched(path: str, data: bytes) -> None:
            calls.append(1)
            wrap(lambda: real(path, data), path)

        monkeypatch.setattr(reads, "create", patched)
    else:
        real_pipe = storage.fs.pipe_file

        def patched_pipe(path: str, data: bytes, **kwargs: Any) -> None:
            calls.append(1)
            wrap(lambda: real_pipe(path, data, **kwargs), path)

        monkeypatch.setattr(storage.fs, "pipe_file", patched_pipe)
    return calls


@pytest.mark.parametrize("answer", ["timeout", "exists"])
def test_a_create_whose_response_was_lost_is_ours_not_a_lost_race(cloud: Cloud, monkeypatch, answer: str) -> None:
    """The create lands, then the client reports a timeout (or, having re-sent it, "exists"): success."""
    storage = cloud.storage()
    path = storage.join("_delta_log", "00000000000000000000.json")

    def lands_then_fails(create, p: str) -> None:
        create()
        raise TimeoutError("the response never came") if answer == "timeout" else FileExistsError(p)

    calls = _creator(monkeypatch, storage, lands_then_fails)
    storage.put_if_absent(path, b'{"ours": 1}\n')
    assert len(calls) == 1 and storage.read_bytes(path) == b'{"ours": 1}\n'


def test_another_writers_object_is_a_lost_race_even_after_an_unclear_answer(cloud: Cloud, monkeypatch) -> None:
    storage = cloud.storage()
    path = storage.join("_delta_log", "00000000000000000000.json")
    storage.put_if_absent(path, b'{"theirs": 1}\n')

    def fails_unclearly(create, p: str) -> None:
        try:
            create()
        except FileExistsError:
            pass
        raise ConnectionResetError("connection reset by peer")

    _creator(monkeypatch, storage, fails_unclearly)
    with pytest.raises(FileExistsError):
        storage.put_if_absent(path, b'{"ours": 1}\n')
    assert storage.read_bytes(path) == b'{"theirs": 1}\n'


@pytest.mark.parametrize("failures", [2, "all"])
def test_a_failed_create_that_left_nothing_is_sent_again_up_to_four_times(cloud: Cloud, monkeypatch, failures) -> None:
    """Nothing landed: send it again; a store that keeps failing is a StorageError and nothing is written."""
    from deltalog.errors import StorageError

    storage = cloud.storage()
    path = storage.join("_delta_log", "00000000000000000000.json")
    left = [ConnectionResetError("reset"), TimeoutError("timed out")]

    def fails(create, p: str) -> None:
        if failures == "all" or left:
            raise left.pop(0) if left else ConnectionResetError("reset")
        create()

    monkeypatch.setattr("deltalog.storage.azure_gcs.time.sleep", lambda s: None)
    calls = _creator(monkeypatch, storage, fails)
    if failures == "all":
        with pytest.raises(StorageError, match="reset"):
            storage.put_if_absent(path, b'{"ours": 1}\n')
        assert len(calls) == 4 and not storage.exists(path)
    else:
        storage.put_if_absent(path, b'{"ours": 1}\n')
        assert len(calls) == 3 and storage.read_bytes(path) == b'{"ours": 1}\n'


def test_a_commit_whose_response_was_lost_lands_once(cloud: Cloud, monkeypatch) -> None:
    """Through the transaction: the landed commit is reported at its version, not retried at the next one."""
    from deltalog.create import create_table

    create_table(cloud.uri, pa.schema([("id", pa.int64())]), storage_options=cloud.options)
    table = DeltaTable(cloud.uri, cloud.options)
    answers = ["exists"]

    def lands_then_exists(create, p: str) -> None:
        create()
        if answers and p.endswith("00000000000000000001.json"):
            answers.pop()
            raise FileExistsError(p)

    _creator(monkeypatch, table.storage, lands_then_exists)
    result = _append(table, "a.parquet", [1, 2, 3])
    assert result.version == 1 and not answers
    assert DeltaTable(cloud.uri, cloud.options).version() == 1
    assert cloud.rows() == [1, 2, 3]


# --- every operation on a table on the store --------------------------------------------------------


def test_every_operation_on_a_table_on_the_store(cloud: Cloud, tmp_path) -> None:
    from deltalog.compaction import compact
    from fleet_helpers import small_files_table

    small_files_table(str(tmp_path / "t"), n=6)  # versions 0..6, six 3-row files
    cloud.upload(str(tmp_path / "t"))
    expected = list(range(18))
    table = DeltaTable(cloud.uri, cloud.options)
    snap = table.snapshot()
    assert snap.version == 6 and snap.num_files == 6 and cloud.rows() == expected

    health = table.health()
    assert health.num_files == 6 and health.small_file_share == 1.0

    result = compact(cloud.uri, storage_options=cloud.options)
    assert result.ok and result.to_dict()["num_files_removed"] == 6 and result.to_dict()["num_files_added"] == 1
    compacted = DeltaTable(cloud.uri, cloud.options).snapshot()
    assert compacted.version == 7 and compacted.num_files == 1
    assert cloud.rows() == expected and cloud.rows(version=6) == expected

    for i in range(3):  # appends after the compaction, read back at every version
        if i == 2:
            # Listings give file times in whole seconds; a commit within the second of the one before it has
            # its timestamp raised above that one's (Delta's rule), and log cleanup then keeps the chain it
            # leans on. Version 10, the cutoff checkpoint's, gets a second of its own.
            time.sleep(1.1)
        assert _append(DeltaTable(cloud.uri, cloud.options), f"late-{i}.parquet", [100 + i]).version == 8 + i
    for v in range(8, 11):
        assert cloud.rows(version=v) == expected + [100 + i for i in range(v - 7)]

    checkpoint = DeltaTable(cloud.uri, cloud.options).create_checkpoint()
    assert checkpoint.version == 10
    assert DeltaTable(cloud.uri, cloud.options).snapshot().version == 10

    dry = DeltaTable(cloud.uri, cloud.options).vacuum(retention_hours=0, allow_short_retention=True, dry_run=True)
    assert dry.num_files_to_delete == 6 and dry.num_deleted_files == 0
    storage = cloud.storage()

    def data_files() -> set[str]:
        return {storage.relative(f.path) for f in storage.walk_files() if "_delta_log" not in f.path}

    before = data_files()
    vac = DeltaTable(cloud.uri, cloud.options).vacuum(retention_hours=0, allow_short_retention=True)
    assert vac.num_deleted_files == 6 and (vac.start_commit_version, vac.end_commit_version) == (11, 12)
    live = set(DeltaTable(cloud.uri, cloud.options).snapshot().file_paths())
    assert data_files() == live and len(before - live) == 6
    assert cloud.rows() == expected + [100, 101, 102]

    later = int(time.time() * 1000) + 40 * 86_400_000
    cleaned = DeltaTable(cloud.uri, cloud.options).cleanup_log(now_ms=later)
    assert cleaned.num_deleted > 0 and cleaned.num_deleted == cleaned.num_files
    log_names = {f.name for f in storage.list_dir(storage.log_dir)}
    assert "00000000000000000000.json" not in log_names and "00000000000000000010.checkpoint.parquet" in log_names
    assert DeltaTable(cloud.uri, cloud.options).snapshot().version == 12
    assert cloud.rows() == expected + [100, 101, 102]
    after = DeltaTable(cloud.uri, cloud.options).health()
    assert after.num_files == 4


def test_fleet_run_takes_the_lease_compacts_and_releases(cloud: Cloud, tmp_path) -> None:
    from deltalog.fleet.discover import discover_tables
    from deltalog.fleet.lease import LEASE_NAME
    from deltalog.fleet.run import run_fleet
    from fleet_helpers import healthy_table, small_files_table

    lake = cloud.uri.rsplit("/", 1)[0] + "/lake"
    for name, build in {"events": small_files_table, "daily": healthy_table}.items():
        build(str(tmp_path / name))
        storage = Storage(f"{lake}/{name}", cloud.options)
        storage.fs.put(str(tmp_path / name) + "/", storage.root + "/", recursive=True)
    found = discover_tables(lake, storage_options=cloud.options)
    assert [t.uri.rsplit("/", 1)[-1] for t in found.tables] == ["daily", "events"]
    result = run_fleet(list(found.tables), storage_options=cloud.options, time_budget_seconds=120)
    (outcome,) = result.outcomes
    assert outcome.uri.endswith("/events") and outcome.status == "done" and outcome.ran == ["compaction: 1 bins"]
    assert result.exit_code == 0
    events = Storage(f"{lake}/events", cloud.options)
    assert not events.exists(events.join(LEASE_NAME))
    assert DeltaTable(f"{lake}/events", cloud.options).snapshot().num_files == 1


# --- requests -------------------------------------------------------------------------------------


def test_requests_per_snapshot_load_and_per_commit(cloud: Cloud, tmp_path) -> None:
    """A load is one LIST of _delta_log and one GET per commit; a commit on a loaded snapshot is one PUT."""
    from deltalog.commit import Transaction
    from fleet_helpers import small_files_table

    small_files_table(str(tmp_path / "t"), n=7)  # versions 0..7, no checkpoint
    cloud.upload(str(tmp_path / "t"))
    counter = cloud.emulator.counter
    DeltaTable(cloud.uri, cloud.options).snapshot()  # warm the clients
    before = counter.snapshot()
    table = DeltaTable(cloud.uri, cloud.options)
    snapshot = table.snapshot()
    assert snapshot.version == 7
    # adlfs's own listing first asks whether the folder is a blob (a second LIST): the fallback costs one more.
    assert counter.since(before) == {"GET": 8, "LIST": 2 if cloud.store == "azure-adlfs" else 1}

    entry = _put_parquet(table.storage, "one-more.parquet", [99])
    txn = Transaction(table.storage, snapshot, operation="WRITE", operation_parameters={"mode": "Append"})
    txn.add([entry])
    before = counter.snapshot()
    assert txn.commit().version == 8
    assert counter.since(before) == {"PUT": 1}


# --- URIs and options -------------------------------------------------------------------------------


@pytest.mark.azure
def test_azure_uri_forms_reach_the_same_table(azure_container, azure_storage_options) -> None:
    from deltalog.create import create_table

    create_table(f"abfs://{azure_container}/t", pa.schema([("id", pa.int64())]), storage_options=azure_storage_options)
    for uri in (
        f"az://{azure_container}/t",
        f"abfss://{azure_container}/t",
        f"abfss://{azure_container}@devstoreaccount1.dfs.core.windows.net/t",
        f"abfs://{azure_container}@devstoreaccount1.blob.core.windows.net/t/",
    ):
        table = DeltaTable(uri, azure_storage_options)
        assert table.storage.root == f"{azure_container}/t", uri
        assert table.snapshot().version == 0, uri


@pytest.mark.gcs
def test_gcs_uri_forms_reach_the_same_table(gcs_bucket, gcs_storage_options) -> None:
    from deltalog.create import create_table

    create_table(f"gs://{gcs_bucket}/t", pa.schema([("id", pa.int64())]), storage_options=gcs_storage_options)
    for uri in (f"gcs://{gcs_bucket}/t", f"gs://{gcs_bucket}/t/"):
        table = DeltaTable(uri, gcs_storage_options)
        assert table.storage.root == f"{gcs_bucket}/t" and table.snapshot().version == 0, uri


def test_onelake_uris_get_onelakes_account_and_blob_endpoint() -> None:
    from deltalog.storage.azure_gcs_reads import _azure_kwargs

    uri = "abfss://my-workspace@onelake.dfs.fabric.microsoft.com/sales.Lakehouse/Tables/orders"
    principal = {"tenant_id": "t", "client_id": "c", "client_secret": "s"}  # OneLake takes Entra ID tokens only
    storage = Storage(uri, principal)
    assert storage.root == "my-workspace/sales.Lakehouse/Tables/orders"
    assert storage.fs.account_name == "onelake"
    assert storage.fs.account_url == "https://onelake.blob.fabric.microsoft.com"
    kwargs = _azure_kwargs(storage.fs)
    assert kwargs is not None and set(kwargs) == {"account_name", "endpoint", "credential_provider"}
    assert (kwargs["account_name"], kwargs["endpoint"]) == ("onelake", "https://onelake.blob.fabric.microsoft.com")
    own = Storage(uri, {**principal, "account_host": "onelake.blob.fabric.microsoft.com:443"})
    assert own.fs.account_url == "https://onelake.blob.fabric.microsoft.com:443"  # the caller's own settings win


@pytest.mark.parametrize(
    ("uri", "options", "named"),
    [
        ("abfs://c/t", {"account_name": "a", "acount_key": "x"}, "'acount_key'"),
        ("az://c/t", {"account_name": "a", "account_key": "eA==", "sas": "x", "tokn": "y"}, "'sas', 'tokn'"),
        ("gs://b/t", {"token": "anon", "endpoint": "http://x"}, "'endpoint'"),
        ("gcs://b/t", {"token": "anon", "obstore": "maybe"}, "obstore must be true or false"),
    ],
)
def test_unknown_or_bad_options_are_refused_naming_them(uri: str, options: dict, named: str) -> None:
    from deltalog.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=named):
        Storage(uri, options)


def test_default_azure_credential_settings_are_accepted() -> None:
    storage = Storage(
        "abfss://c@acct.dfs.core.windows.net/t",
        {"exclude_interactive_browser_credential": True, "managed_identity_client_id": "id"},
    )
    assert storage.fs.account_name == "acct"
    assert storage._fast_reads is None  # DefaultAzureCredential settings only adlfs applies: it reads alone


@pytest.mark.azure
def test_azure_option_translation_reaches_the_same_account(azure_server, azure_container) -> None:
    """Connection string, account key + host, SAS token: obstore reads what adlfs wrote; anonymous and a
    caller's own credential object translate as they must."""
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    from azure_server import ACCOUNT, ACCOUNT_KEY, storage_options_for
    from deltalog.storage.azure_gcs_reads import _azure_kwargs

    uri = f"abfs://{azure_container}/t"
    writer = Storage(uri, storage_options_for(azure_server))
    writer.put_if_absent(writer.join("x.json"), b"hello")
    sas = generate_container_sas(
        ACCOUNT,
        azure_container,
        account_key=ACCOUNT_KEY,
        permission=ContainerSasPermissions(read=True, list=True, write=True, create=True),
        expiry=time.time() + 3600,
    )
    endpoint = f"{azure_server}/{ACCOUNT}"
    for options in (
        storage_options_for(azure_server),
        {"connection_string": f"BlobEndpoint={endpoint};SharedAccessSignature={sas}"},
    ):
        storage = Storage(uri, options)
        reads = storage._fast_reads
        assert reads is not None, options
        assert reads.get(storage.join("x.json")) == b"hello"
        objects, _ = reads.list(storage.root)
        assert [o.path for o in objects] == [f"{azure_container}/t/x.json"]
    host = f"{ACCOUNT}.blob.core.chinacloudapi.cn"  # another Azure cloud's endpoint
    fs = fsspec.filesystem("abfs", account_name=ACCOUNT, account_key=ACCOUNT_KEY, account_host=host)
    assert _azure_kwargs(fs) == {"account_name": ACCOUNT, "endpoint": f"https://{host}", "account_key": ACCOUNT_KEY}
    anon = fsspec.filesystem("abfs", account_name=ACCOUNT, anon=True)
    assert _azure_kwargs(anon) == {"account_name": ACCOUNT, "skip_signature": True}


def test_azure_token_credentials_are_asked_for_storage_tokens() -> None:
    """adlfs's service-principal / DefaultAzureCredential pair: obstore asks the same credential for tokens."""
    from azure.core.credentials import AccessToken

    from deltalog.storage.azure_gcs_reads import AZURE_STORAGE_SCOPE, _azure_kwargs

    fs = fsspec.filesystem(
        "abfs", account_name="acct", tenant_id="t", client_id="c", client_secret="s", skip_instance_cache=True
    )
    asked = []

    class Recorder:
        def get_token(self, *scopes: str) -> AccessToken:
            asked.append(scopes)
            return AccessToken("tok", 2_000_000_000)

    assert fs.sync_credential is not None  # adlfs built a ClientSecretCredential pair
    fs.sync_credential = Recorder()
    kwargs = _azure_kwargs(fs)
    assert kwargs is not None and set(kwargs) == {"account_name", "credential_provider"}
    token = kwargs["credential_provider"]()
    assert token["token"] == "tok" and token["expires_at"].timestamp() == 2_000_000_000
    assert asked == [(AZURE_STORAGE_SCOPE,)]


@pytest.mark.gcs
def test_gcs_credentials_give_obstore_the_same_token(gcs_server, gcs_bucket) -> None:
    """A Google credentials object given to gcsfs: obstore's reads carry its token (fake-gcs-server accepts any)."""
    from google.oauth2.credentials import Credentials

    from deltalog.storage.azure_gcs_reads import _gcs_kwargs

    options = {"token": Credentials(token="static-token"), "endpoint_url": gcs_server, "project": "p"}
    storage = Storage(f"gs://{gcs_bucket}/t", options)
    kwargs = _gcs_kwargs(storage.fs)
    assert kwargs is not None and kwargs["base_url"] == gcs_server
    assert kwargs["credential_provider"]()["token"] == "static-token"
    storage.put_if_absent(storage.join("x.json"), b"hello")
    assert storage._fast_reads is not None and storage._fast_reads.get(storage.join("x.json")) == b"hello"
    assert _gcs_kwargs(fsspec.filesystem("gs", token="anon", requester_pays=True, skip_instance_cache=True)) is None


# --- the CLI -----------------------------------------------------------------------------------------


def test_the_cli_maintains_a_table_on_the_store(cloud: Cloud, tmp_path, capsys) -> None:
    """``--storage-option`` carries the store's options (a connection string with ``=`` and ``;`` included)."""
    from deltalog.cli import main
    from fleet_helpers import small_files_table

    small_files_table(str(tmp_path / "t"), n=4)
    cloud.upload(str(tmp_path / "t"))
    opts: list[str] = []
    for key, value in cloud.options.items():
        opts += ["--storage-option", f"{key}={value}"]

    def run(*args: str) -> dict[str, Any]:
        capsys.readouterr()
        assert main([*args, cloud.uri, *opts, "--json"]) == 0, capsys.readouterr().err
        return json.loads(capsys.readouterr().out)

    assert run("health")["num_files"] == 4
    assert run("compact")["num_files_removed"] == 4
    assert run("checkpoint")["version"] == 5
    vacuumed = run("vacuum", "--retention-hours", "0", "--allow-short-retention")
    assert vacuumed["num_deleted_files"] == 4
    assert run("snapshot")["version"] == 7  # VACUUM START and END
    assert cloud.rows() == list(range(12))


def test_convert_commit_requests_manifests_zorder_purge_and_create_on_the_store(cloud: Cloud, tmp_path) -> None:
    """The operations test_every_operation leaves out, each read back by deltalake."""
    import deltalake

    from deltalog import commit_request, compact, convert_to_delta, create_table, generate_manifest
    from helpers import DEFAULT_SCHEMA, rows, write_data_file
    from test_compaction_purge import _dv_table

    def put_dir(local: str, uri: str) -> Storage:
        storage = Storage(uri, cloud.options)
        storage.fs.put(local.rstrip("/") + "/", storage.root + "/", recursive=True)
        return storage

    def read_ids(uri: str) -> list[int]:
        table = deltalake.DeltaTable(uri, storage_options=cloud.deltalake_options)
        return sorted(table.to_pyarrow_table().column("id").to_pylist())

    base = cloud.uri.rsplit("/", 1)[0]
    local = tmp_path / "parquet"
    local.mkdir()
    for i in range(3):
        write_data_file(str(local), rows(4, i * 4))
    converted = f"{base}/converted"
    storage = put_dir(str(local), converted)
    assert convert_to_delta(converted, storage_options=cloud.options).num_files == 3
    assert read_ids(converted) == list(range(12))

    buf = io.BytesIO()
    pq.write_table(rows(4, 100), buf)
    storage.fs.pipe_file(storage.join("new-1.parquet"), buf.getvalue())
    landed = commit_request(converted, {"operation": "WRITE", "add": ["new-1.parquet"]}, storage_options=cloud.options)
    assert landed.version == 1 and read_ids(converted) == list(range(12)) + [100, 101, 102, 103]

    manifest = generate_manifest(converted, storage_options=cloud.options)
    text = storage.read_bytes(storage.join("_symlink_format_manifest", "manifest")).decode()
    assert (
        manifest.num_files == 4
        and len(text.splitlines()) == 4
        and all(line.startswith(converted) for line in text.splitlines())
    )

    zorder = compact(converted, zorder_by=["id"], storage_options=cloud.options)
    assert zorder.ok and zorder.commits and DeltaTable(converted, cloud.options).snapshot().num_files == 1
    assert read_ids(converted) == list(range(12)) + [100, 101, 102, 103]

    dv_path, _ = _dv_table(tmp_path / "dv")
    purged = f"{base}/purged"
    put_dir(dv_path, purged)

    def count(uri: str) -> int:  # deltalake's SQL reader applies deletion vectors (its pyarrow reader refuses them)
        table = deltalake.DeltaTable(uri, storage_options=cloud.deltalake_options)
        return (
            deltalake.QueryBuilder()
            .register("t", table)
            .execute("SELECT count(*) AS n FROM t")
            .read_all()["n"][0]
            .as_py()
        )

    before = count(purged)
    result = compact(purged, purge_deletion_vectors=True, storage_options=cloud.options)
    assert result.ok and len(result.committed_bins) == 2
    assert count(purged) == before == 36000 - 5005  # six files of 6000 rows; DVs hide 5001 + 4
    dvs = DeltaTable(purged, cloud.options).snapshot().files.column("deletionVector")
    assert dvs.null_count == len(dvs), "no file keeps a deletion vector"

    created = create_table(f"{base}/created", DEFAULT_SCHEMA, storage_options=cloud.options)
    assert created.version == 0 and read_ids(f"{base}/created") == []


def test_the_spark_vacuum_engine_refuses_the_store_before_any_work(cloud: Cloud, tmp_path) -> None:
    """The vacuum job gets no Azure/GCS connector settings yet: refused naming the local engine, nothing read."""
    from deltalog.errors import OperationRefusedError
    from deltalog.vacuuming import plan_vacuum
    from fleet_helpers import small_files_table

    small_files_table(str(tmp_path / "t"), n=2)
    cloud.upload(str(tmp_path / "t"))
    before = sorted(cloud.storage().fs.find(cloud.storage().root))
    with pytest.raises(OperationRefusedError, match=r"Spark vacuum engine runs on local and S3.*engine='local'"):
        plan_vacuum(cloud.uri, storage_options=cloud.options, engine="spark")
    assert sorted(cloud.storage().fs.find(cloud.storage().root)) == before
    assert plan_vacuum(cloud.uri, storage_options=cloud.options, engine="local").version == 2
