"""Issue 13 item 10: inputs that used to end in a traceback now end in one clear error, exit 2, nothing written.

Each test is one of the review's examples; ``tests/reliability/test_adversarial.py``
fuzzes the whole class (every option of every command).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from deltalog import DeltaTable
from deltalog.cli import main, one_line
from deltalog.errors import InvalidArgumentError, StorageError, UnsupportedFileNameError
from deltalog.storage.filesystem import S3_CONFIG_KWARGS, Storage
from helpers import append, make_table, rows
from vacuum_helpers import files_on_disk, log_files

DELTALOG = os.path.join(os.path.dirname(sys.executable), "deltalog")


@pytest.fixture
def table(tmp_path):
    path = str(tmp_path / "t")
    t = make_table(path)
    append(t, rows(3))
    append(t, rows(3, start=3))
    return path


def cli(args: list[str]) -> int:
    """``main`` with argparse's own exits (SystemExit) turned into their status, like the console script."""
    try:
        return main(args)
    except SystemExit as exc:
        return int(exc.code or 0)


def one_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_non_utf8_file_name_in_the_table_folder(table, capsys):
    bad = os.fsencode(table) + b"/bad\xff.parquet"
    open(bad, "wb").close()
    before = (files_on_disk(table), log_files(table))
    for args in (
        ["vacuum", table, "--dry-run"],
        ["vacuum", table, "--retention-hours", "0", "--allow-short-retention"],
    ):
        assert main(args) == 2
        assert "not valid UTF-8: b'bad\\xff.parquet'" in one_error(capsys)
    assert (files_on_disk(table), log_files(table)) == before
    from deltalog.vacuuming import vacuum

    with pytest.raises(UnsupportedFileNameError, match=r"bad\\xff\.parquet"):
        vacuum(table, dry_run=True)


def test_non_utf8_file_name_in_a_directory_to_convert(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path / "plain"
    root.mkdir()
    pq.write_table(pa.table({"a": [1]}), str(root / "ok.parquet"))
    pq.write_table(pa.table({"a": [2]}), str(root / "x.parquet"))
    os.rename(os.fsencode(str(root / "x.parquet")), os.fsencode(str(root)) + b"/x\xfe.parquet")
    assert main(["convert", str(root)]) == 2
    assert "not valid UTF-8" in one_error(capsys)
    assert not (root / "_delta_log").exists()


@pytest.mark.parametrize(
    "args,needle",
    [
        (["compact", "{t}", "--target-size", "99999999999999999999999999"], "too large"),
        (["compact", "{t}", "--small-file-threshold", "99999999999999999999999999"], "too large"),
        (["snapshot", "{t}", "--timestamp", "-99999999999999999999999"], "out of range"),
        (["snapshot", "{t}", "--timestamp", "99999999999999999999999"], "out of range"),
        (["compact", "{t}", "--max-workers", "0"], "max_workers must be a positive integer, got 0"),
        (["vacuum", "{t}", "--max-workers", "0"], "max_workers must be a positive integer, got 0"),
        (["compact", "{t}", "--max-workers", "-3", "--plan-only"], "max_workers must be a positive integer"),
        (["discover", "{t}", "--workers", "0"], "--workers must be a positive integer, got 0"),
        (["health", "--root", "{t}", "--workers", "0"], "--workers must be a positive integer, got 0"),
        (["snapshot", "{t}/no\nsuch"], "no\\nsuch"),
    ],
)
def test_bad_arguments_are_one_error_exit_2(table, capsys, args, needle):
    before = (files_on_disk(table), log_files(table))
    assert cli([a.replace("{t}", table) for a in args]) == 2
    assert needle in one_error(capsys)
    assert (files_on_disk(table), log_files(table)) == before


def test_core_bounds_sizes_timestamps_and_workers(table):
    from deltalog.compaction import compact

    with pytest.raises(InvalidArgumentError, match="out of range"):
        DeltaTable(table).snapshot(timestamp=-(10**22))
    with pytest.raises(InvalidArgumentError, match="too large"):
        compact(table, target_size=10**26)
    with pytest.raises(InvalidArgumentError, match="max_workers"):
        compact(table, max_workers=0)
    from deltalog.fleet.ranking import fleet_health

    with pytest.raises(InvalidArgumentError, match="max_workers must be a positive integer, got 0"):
        fleet_health([table], max_workers=0)  # used to be quietly made 1


def test_a_commit_request_nested_100000_deep(table, tmp_path, capsys):
    before = (files_on_disk(table), log_files(table))
    deep = tmp_path / "deep.json"
    deep.write_text('{"operation": "WRITE", "add": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert main(["commit", table, "--request", str(deep)]) == 2
    assert "nested too deeply" in one_error(capsys)
    plan = tmp_path / "plan.json"
    plan.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["compact", table, "--plan", str(plan)]) == 2
    assert "nested too deeply" in one_error(capsys)
    assert (files_on_disk(table), log_files(table)) == before


@pytest.mark.parametrize(
    "prop,needle",
    [
        ("delta.logRetentionDuration=garbage", "delta.logRetentionDuration 'garbage' is not an interval"),
        ("delta.checkpointInterval=-4", "delta.checkpointInterval must be a positive integer, got '-4'"),
        ("delta.checkpointInterval=often", "delta.checkpointInterval must be a positive integer"),
        ("delta.deletedFileRetentionDuration=interval 1 month", "unsupported unit 'month'"),
        ("delta.appendOnly=yes", "delta.appendOnly must be true or false"),
        ("delta.targetFileSize=0", "delta.targetFileSize must be a positive size"),
    ],
)
def test_create_validates_known_properties_with_the_readers_parsers(table, tmp_path, capsys, prop, needle):
    schema_from = os.path.join(table, DeltaTable(table).snapshot().file_paths()[0])
    new = str(tmp_path / "new")
    assert main(["create", new, "--schema-from", schema_from, "--property", prop]) == 2
    assert needle in one_error(capsys)
    assert not os.path.exists(new)


def test_create_keeps_valid_and_unknown_properties(table, tmp_path):
    from deltalog.create import create_table

    schema = DeltaTable(table).snapshot().schema
    config = {"delta.checkpointInterval": "5", "delta.logRetentionDuration": "interval 2 days", "my.prop": "x"}
    create_table(str(tmp_path / "ok"), schema, configuration=config)
    assert DeltaTable(str(tmp_path / "ok")).snapshot().metadata.configuration == config


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_s3_endpoint_fails_fast_and_clearly():
    url = f"http://127.0.0.1:{_closed_port()}"
    options = {"endpoint_url": url, "key": "k", "secret": "s"}
    t0 = time.perf_counter()
    with pytest.raises(StorageError, match="cannot (reach|list) .*bucket/t.*Could not connect to the endpoint"):
        DeltaTable("s3://bucket/t", options).snapshot()
    assert time.perf_counter() - t0 < 5, "the error path must not retry for long"
    env = dict(os.environ, AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s")
    p = subprocess.run(
        [DELTALOG, "snapshot", "s3://bucket/t", "--storage-option", f"endpoint_url={url}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith("error: cannot ") and "Could not connect to the endpoint" in p.stderr


def test_s3_retry_settings_are_defaults_the_caller_can_override():
    mine = Storage("s3://bucket/t", {"endpoint_url": "http://127.0.0.1:1", "key": "k", "secret": "s"})
    assert mine.fs.config_kwargs["retries"] == S3_CONFIG_KWARGS["retries"]
    custom = {"retries": {"max_attempts": 9}}
    theirs = Storage("s3://bucket/u", {"endpoint_url": "http://127.0.0.1:1", "config_kwargs": custom})
    assert theirs.fs.config_kwargs == custom


def test_errors_are_one_printable_line():
    assert one_line("a\nb\tc\udcff") == "a\\nb\\tc\\xff"
    assert one_line("plain é") == "plain é"


def test_human_output_with_a_non_utf8_table_name_is_printed_escaped(tmp_path):
    append(make_table(str(tmp_path / "t")), rows(2))
    table = os.fsencode(str(tmp_path)) + b"/t\xff"
    os.rename(os.fsencode(str(tmp_path / "t")), table)
    p = subprocess.run([DELTALOG, "vacuum", table, "--dry-run"], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert b"t\\udcff" in p.stdout or b"t\\xff" in p.stdout
    p = subprocess.run([DELTALOG, "snapshot", table, "--json"], capture_output=True, timeout=120)
    assert p.returncode == 0 and json.loads(p.stdout)["version"] == 1


def test_the_fsync_storage_option_is_true_or_false_never_a_guess(table, capsys):
    assert Storage(table, {"fsync": "TRUE"}).fsync and not Storage(table, {"fsync": "no"}).fsync
    assert Storage(table, {"fsync": True}).fsync
    with pytest.raises(InvalidArgumentError, match="fsync must be true or false, got 'maybe'"):
        Storage(table, {"fsync": "maybe"})
    assert main(["snapshot", table, "--storage-option", "fsync=maybe"]) == 2
    assert "fsync must be true or false" in one_error(capsys)


def test_an_unknown_s3_storage_option_is_refused_naming_it(capsys):
    """s3fs passes unknown keywords to botocore's session, a TypeError at the first request."""
    with pytest.raises(InvalidArgumentError, match="unknown S3 storage option 'delta.logRetentionDuration'"):
        Storage("s3://bucket/table", {"key": "k", "delta.logRetentionDuration": "garbage"})
    argv = ["snapshot", "s3://bucket/table", "--storage-option", "regoin_name=us-east-1"]
    assert main(argv) == 2
    assert "unknown S3 storage option 'regoin_name'" in one_error(capsys)
    # What s3fs, fsspec and the botocore session take still goes through, and deltalog's own options.
    Storage("s3://bucket/table", {"anon": True, "profile": "p", "use_listings_cache": True, "fsync": True})


#: A value each known property's reader accepts, and one it refuses.
PROPERTY_CASES = {
    "delta.logRetentionDuration": ("interval 30 days", "soon"),
    "delta.deletedFileRetentionDuration": ("interval 1 week", "interval 1 year"),
    "delta.checkpointInterval": ("10", "0"),
    "delta.targetFileSize": ("128m", "-1"),
    "delta.dataSkippingNumIndexedCols": ("-1", "-2"),
    "delta.checkpointPolicy": ("v2", "v3"),
    "delta.parquet.compression.codec": ("snappy", "zip"),
    "delta.isolationLevel": ("WriteSerializable", "serializable!"),
    "delta.columnMapping.mode": ("name", "names"),
    "delta.appendOnly": ("true", "1"),
    "delta.setTransactionRetentionDuration": ("interval 2 days", "two days"),
}


def test_every_known_property_has_a_working_check():
    """Each check runs its reader's parser (imported lazily: a moved parser would break only here)."""
    from deltalog.protocol.properties import CHECKS, validate_table_properties

    assert set(PROPERTY_CASES) <= set(CHECKS)
    for key in CHECKS:
        good, bad = PROPERTY_CASES.get(key, ("false", "maybe"))
        validate_table_properties({key: good})
        with pytest.raises(InvalidArgumentError, match=f"table property {key}"):
            validate_table_properties({key: bad})
