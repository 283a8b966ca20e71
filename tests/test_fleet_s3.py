"""Discovery and fleet health over the S3 test server (object-store listings, not os.scandir)."""

from __future__ import annotations

import fsspec
import pytest

from deltalog.fleet.discover import discover_tables
from deltalog.fleet.ranking import fleet_health
from fleet_helpers import healthy_table, one_small_file_per_partition, small_files_table

pytestmark = [pytest.mark.slow, pytest.mark.s3]


def upload(local: str, uri: str, options: dict) -> None:
    fs = fsspec.filesystem("s3", **options)
    fs.put(local + "/", uri.removeprefix("s3://") + "/", recursive=True)


def test_discover_and_rank_on_s3(tmp_path, s3_bucket, s3_storage_options):
    builders = {
        "raw/events": small_files_table,
        "raw/clicks": one_small_file_per_partition,
        "gold/daily": healthy_table,
    }
    for name, build in builders.items():
        build(str(tmp_path / name))
        upload(str(tmp_path / name), f"s3://{s3_bucket}/lake/{name}", s3_storage_options)
    fs = fsspec.filesystem("s3", **s3_storage_options)
    fs.pipe_file(f"{s3_bucket}/lake/notes/readme.txt", b"not a table")

    result = discover_tables(f"s3://{s3_bucket}/lake", storage_options=s3_storage_options)
    assert [t.uri for t in result.tables] == [f"s3://{s3_bucket}/lake/{n}" for n in sorted(builders)]
    assert result.errors == ()

    reports = fleet_health([t.uri for t in result.tables], storage_options=s3_storage_options)
    assert reports[0].uri.endswith("raw/events") and reports[0].due.compaction and reports[0].gain == 5
    rest = {r.uri.rsplit("/", 1)[-1]: r for r in reports[1:]}
    assert not rest["clicks"].any_due and rest["clicks"].health.small_file_share == 1.0
    assert not rest["daily"].any_due and all(r.error is None for r in reports)


def test_snapshot_costs_one_request_per_commit_and_one_listing(
    tmp_path, s3_bucket, s3_storage_options, s3_request_counter
):
    """Issue 17 item 4: one GET per commit file (no HEAD before it), one LIST of _delta_log, nothing else."""
    from deltalog import DeltaTable

    small_files_table(str(tmp_path / "t"), n=7)  # versions 0..7: eight commits, no checkpoint
    uri = f"s3://{s3_bucket}/t"
    upload(str(tmp_path / "t"), uri, s3_storage_options)
    before = s3_request_counter.snapshot()
    snapshot = DeltaTable(uri, s3_storage_options).snapshot()
    assert snapshot.version == 7
    assert s3_request_counter.since(before) == {"GET": 8, "LIST": 1}


def test_one_filesystem_per_process_and_connection(s3_bucket, s3_storage_options):
    from deltalog import DeltaTable

    a = DeltaTable(f"s3://{s3_bucket}/a", s3_storage_options).storage.fs
    b = DeltaTable(f"s3://{s3_bucket}/b", dict(s3_storage_options)).storage.fs
    assert a is b  # same options: fsspec's instance cache hands back the same client and connection pool


def test_missing_table_on_s3_is_reported_as_missing(s3_bucket, s3_storage_options):
    from deltalog import DeltaTable
    from deltalog.errors import TableNotFoundError

    with pytest.raises(TableNotFoundError, match="does not exist"):
        DeltaTable(f"s3://{s3_bucket}/nothing-here", s3_storage_options).snapshot()


def test_fleet_maintenance_on_s3(tmp_path, s3_bucket, s3_storage_options, s3_deltalake_options):
    """run_fleet over S3 tables: the due one compacted under its lease (released after), the rest untouched."""
    import deltalake

    from deltalog.fleet.lease import LEASE_NAME
    from deltalog.fleet.run import run_fleet

    for name, build in {"events": small_files_table, "daily": healthy_table}.items():
        build(str(tmp_path / name))
        upload(str(tmp_path / name), f"s3://{s3_bucket}/lake/{name}", s3_storage_options)
    found = discover_tables(f"s3://{s3_bucket}/lake", storage_options=s3_storage_options)
    result = run_fleet(list(found.tables), storage_options=s3_storage_options, time_budget_seconds=120)
    (outcome,) = result.outcomes
    assert outcome.uri.endswith("/events") and outcome.status == "done" and outcome.ran == ["compaction: 1 bins"]
    assert (outcome.small_files_before, outcome.small_files_after) == (6, 1)
    assert result.healthy == [f"s3://{s3_bucket}/lake/daily"]
    events = f"s3://{s3_bucket}/lake/events"
    assert deltalake.DeltaTable(events, storage_options=s3_deltalake_options).to_pyarrow_table().num_rows == 18
    fs = fsspec.filesystem("s3", **s3_storage_options)
    assert not fs.exists(f"{s3_bucket}/lake/events/{LEASE_NAME}")
    assert result.throughput_bytes_per_second > 0


def test_list_file_on_s3(tmp_path, s3_bucket, s3_storage_options):
    """A list file may itself live on the object store (the fleet DAG's list_uri, `--list s3://...`)."""
    from deltalog.errors import InvalidArgumentError
    from deltalog.fleet.discover import read_table_list, tables_from_list

    small_files_table(str(tmp_path / "t"), n=1)
    upload(str(tmp_path / "t"), f"s3://{s3_bucket}/lake/t", s3_storage_options)
    fs = fsspec.filesystem("s3", **s3_storage_options)
    fs.pipe_file(f"{s3_bucket}/lists/nightly.txt", f"# nightly\ns3://{s3_bucket}/lake/t\n".encode())
    assert read_table_list(f"s3://{s3_bucket}/lists/nightly.txt", s3_storage_options) == [f"s3://{s3_bucket}/lake/t"]
    result = tables_from_list(f"s3://{s3_bucket}/lists/nightly.txt", s3_storage_options)
    assert [(t.uri, t.version) for t in result.tables] == [(f"s3://{s3_bucket}/lake/t", 1)]
    with pytest.raises(InvalidArgumentError, match="cannot read the table list"):
        read_table_list(f"s3://{s3_bucket}/lists/missing.txt", s3_storage_options)
