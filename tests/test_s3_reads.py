"""S3 GETs and listings through obstore (deltalog.storage.s3_reads): same answers as s3fs, s3fs as the fallback.

The translation of s3fs storage options is checked without a server; the reads run on the
S3 test server, each compared with the same read through s3fs (``{"s3_reads": "s3fs"}``).
"""

from __future__ import annotations

import multiprocessing
import os

import fsspec
import pytest

from deltalog import DeltaTable
from deltalog.errors import InvalidArgumentError, StorageError
from deltalog.storage import s3_reads as s3r
from deltalog.storage.filesystem import Storage
from fleet_helpers import small_files_table

S3FS = {"s3_reads": "s3fs"}


def _upload(local: str, uri: str, options: dict) -> None:
    fsspec.filesystem("s3", **options).put(local + "/", uri.removeprefix("s3://") + "/", recursive=True)


# --- which options obstore may serve -----------------------------------------------------


def test_static_keys_endpoint_and_region_are_translated():
    kwargs = s3r._translate(
        {
            "key": "k",
            "secret": "s",
            "token": "t",
            "endpoint_url": "http://127.0.0.1:9",
            "client_kwargs": {"region_name": "eu-west-1"},
            "config_kwargs": {"connect_timeout": 5, "retries": {"max_attempts": 2, "mode": "standard"}},
            "use_listings_cache": False,
        }
    )
    assert kwargs is not None
    assert (kwargs["access_key_id"], kwargs["secret_access_key"], kwargs["session_token"]) == ("k", "s", "t")
    assert kwargs["endpoint"] == "http://127.0.0.1:9" and kwargs["region"] == "eu-west-1"
    assert kwargs["client_options"]["allow_http"] is True and kwargs["client_options"]["connect_timeout"] == "5.0s"
    assert kwargs["retry_config"]["max_retries"] == 1
    assert s3r._translate({"anon": True, "endpoint_url": "https://minio.local"})["skip_signature"] is True


@pytest.mark.parametrize(
    "options",
    [
        {"key": "k", "secret": "s", "endpoint_url": "http://x", "requester_pays": True},  # changes the GET
        {"key": "k", "secret": "s", "endpoint_url": "http://x", "s3_additional_kwargs": {"SSECustomerKey": "x"}},
        {"key": "k", "secret": "s", "endpoint_url": "http://x", "client_kwargs": {"verify": False}},
        {"key": "k", "secret": "s", "endpoint_url": "http://x", "config_kwargs": {"s3": {"addressing_style": "x"}}},
        {"key": "k", "endpoint_url": "http://x"},  # half a key pair: s3fs reports it
        {"key": "k", "secret": "s"},  # no endpoint and no region: s3fs finds the bucket's region itself
        {"anon": "yes", "endpoint_url": "http://x"},
    ],
)
def test_options_only_s3fs_understands_keep_s3fs(options, monkeypatch):
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    assert s3r._translate(options) is None
    assert s3r.s3_reads_for("bucket", options) is None


def test_without_keys_obstore_signs_with_botocores_credential_chain(monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-env")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    kwargs = s3r._translate({"endpoint_url": "http://x"})
    assert kwargs is not None and "access_key_id" not in kwargs
    creds = kwargs["credential_provider"]()
    assert (creds["access_key_id"], creds["secret_access_key"]) == ("from-env", "env-secret")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert s3r._translate({"endpoint_url": "http://x"}) is None  # no credentials at all: s3fs's error


def test_one_client_per_bucket_and_options_in_a_process():
    options = {"endpoint_url": "http://127.0.0.1:9", "key": "k", "secret": "s"}
    a = Storage("s3://bucket/a", options)._reads()
    b = Storage("s3://bucket/b", dict(options))._reads()
    assert a is not None and a is b and a._store() is b._store()
    other = Storage("s3://bucket/a", {**options, "key": "k2"})._reads()
    assert other is not None and other._store() is not a._store()


def test_the_read_client_option_is_checked():
    assert Storage("s3://bucket/t", {"endpoint_url": "http://x", "key": "k", "secret": "s", **S3FS})._reads() is None
    with pytest.raises(InvalidArgumentError, match="s3_reads must be one of obstore, s3fs"):
        Storage("s3://bucket/t", {"s3_reads": "boto"})


# --- on the S3 test server ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.s3
def test_snapshot_and_listing_through_obstore_equal_s3fs(tmp_path, s3_bucket, s3_storage_options, monkeypatch):
    small_files_table(str(tmp_path / "t"), n=5)
    uri = f"s3://{s3_bucket}/lake/t"
    _upload(str(tmp_path / "t"), uri, s3_storage_options)
    theirs = DeltaTable(uri, {**s3_storage_options, **S3FS})
    expected = theirs.snapshot()
    expected_listing = sorted((f.name, f.size) for f in theirs.storage.list_log())

    mine = DeltaTable(uri, s3_storage_options)
    assert mine.storage._reads() is not None

    def no_s3fs(*_args, **_kwargs):
        raise AssertionError("read through s3fs")

    monkeypatch.setattr(Storage, "_read_fsspec", no_s3fs)
    monkeypatch.setattr(type(mine.storage.fs), "ls", no_s3fs)
    got = mine.snapshot()
    assert got.version == expected.version == 5
    assert got.files.sort_by("path").equals(expected.files.sort_by("path"))
    assert got.metadata == expected.metadata
    assert sorted((f.name, f.size) for f in mine.storage.list_log()) == expected_listing
    assert all(f.modification_time > 0 for f in mine.storage.list_log())
    files, dirs = mine.storage.list_entries(f"{s3_bucket}/lake")
    assert files == [] and dirs == [f"{s3_bucket}/lake/t"]
    assert mine.storage.list_entries(f"{s3_bucket}/nothing") == ([], [])
    with pytest.raises(FileNotFoundError):
        mine.storage.read_bytes(f"{s3_bucket}/lake/t/_delta_log/{99:020d}.json")
    with pytest.raises(FileNotFoundError):
        mine.storage.read_many([f"{s3_bucket}/lake/t/_delta_log/{v:020d}.json" for v in (0, 99)])


@pytest.mark.slow
@pytest.mark.s3
def test_a_failing_obstore_read_is_answered_by_s3fs(tmp_path, s3_bucket, s3_storage_options, monkeypatch):
    import obstore

    small_files_table(str(tmp_path / "t"), n=3)
    uri = f"s3://{s3_bucket}/t"
    _upload(str(tmp_path / "t"), uri, s3_storage_options)

    def broken(*_args, **_kwargs):
        raise obstore.exceptions.GenericError("connection reset")

    monkeypatch.setattr(obstore, "get", broken)
    monkeypatch.setattr(obstore, "list_with_delimiter", broken)
    assert DeltaTable(uri, s3_storage_options).snapshot().version == 3
    storage = Storage(f"s3://{s3_bucket}/elsewhere", {**s3_storage_options, "endpoint_url": "http://127.0.0.1:9"})
    with pytest.raises(StorageError, match="cannot list"):  # both clients fail: s3fs's error stands
        storage.list_log()


def _read_in_child(uri: str, options: dict, path: str, queue) -> None:
    queue.put(Storage(uri, options).read_bytes(path))


@pytest.mark.slow
@pytest.mark.s3
def test_a_process_forked_after_obstore_was_used_reads_through_s3fs(s3_bucket, s3_storage_options):
    """obstore's runtime threads do not survive fork(): before this rule a forked child hung on its first GET."""
    uri = f"s3://{s3_bucket}/forked"
    path = f"{s3_bucket}/forked/_delta_log/{0:020d}.json"
    fsspec.filesystem("s3", **s3_storage_options).pipe_file(path, b"{}\n")
    assert Storage(uri, s3_storage_options).read_bytes(path) == b"{}\n"  # obstore used in this process
    assert s3r._used_by_pid == os.getpid()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_read_in_child, args=(uri, s3_storage_options, path, queue))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0 and queue.get(timeout=5) == b"{}\n"
