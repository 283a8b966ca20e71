"""Log cleanup per PROTOCOL.md "Metadata Cleanup": what goes, what stays, and that every kept version still reads.

Old logs are made by setting modification times (or in-commit timestamps) in the past;
after every cleanup the earliest kept version and the latest are read by deltalog and
by deltalake and their file sets compared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.cli import main
from deltalog.errors import UnsupportedProtocolError, VersionNotFoundError
from deltalog.log.actions import Metadata
from deltalog.log_maintenance import create_checkpoint
from deltalog.log_maintenance.checkpoint import _CheckpointWriter
from deltalog.log_maintenance.log_cleanup import cleanup_log
from deltalog.protocol.schema import arrow_schema_to_schema_string
from deltalog.protocol.table_protocol import Protocol
from helpers import append, make_table, rows

DAY_MS = 86_400_000
HERE = os.path.dirname(os.path.abspath(__file__))
V2 = Protocol(3, 7, ("v2Checkpoint",), ("v2Checkpoint",))


def now_ms() -> int:
    return int(time.time() * 1000)


def log_dir(path: str) -> str:
    return os.path.join(path, "_delta_log")


def log_files(path: str) -> set[str]:
    return {n for n in os.listdir(log_dir(path)) if n != "_sidecars"}


def commit_path(path: str, v: int) -> str:
    return os.path.join(log_dir(path), f"{v:020d}.json")


def set_mtime(path: str, ms: int) -> None:
    os.utime(path, (ms / 1000, ms / 1000))


def age_commits(path: str, through: int, days: int = 40) -> None:
    """Commits 0..through get modification times ``days`` ago (one second apart, still increasing)."""
    base = now_ms() - days * DAY_MS
    for v in range(through + 1):
        if os.path.exists(commit_path(path, v)):
            set_mtime(commit_path(path, v), base + v * 1000)


def readable_versions_agree(path: str, versions: list[int]) -> None:
    for v in versions:
        mine = set(DeltaTable(path).snapshot(v).file_paths())
        d = deltalake.DeltaTable(path, version=v)
        assert set(d.get_add_actions(flatten=True).column("path").to_pylist()) == mine, v


def history_table(
    path: str, commits: int = 12, checkpoints: tuple[int, ...] = (4, 8), old_through: int = 9, **kw
) -> DeltaTable:
    """A table with ``commits`` appends, our checkpoints at ``checkpoints`` and commits 0..old_through aged 40 days."""
    conf = {"delta.checkpointInterval": "1000", **kw.pop("configuration", {})}
    t = make_table(path, partition_by=["part"], configuration=conf, **kw)
    for i in range(commits):
        append(t, rows(2, i * 2, part=f"p{i % 3}"), partition={"part": f"p{i % 3}"})
    for v in checkpoints:
        create_checkpoint(t, version=v, **({"sidecar_max_actions": 3} if kw.get("protocol") == V2 else {}))
    age_commits(path, old_through)
    return t


def commit_timestamps(path: str) -> dict[int, int]:
    return {r.version: r.timestamp for r in DeltaTable(path).history()}


# --- the rules --------------------------------------------------------------------------------


def test_cleanup_keeps_the_newest_checkpoint_before_the_cutoff_and_everything_after(table_path):
    history_table(table_path)
    for name in (f"{2:020d}.crc", f"{9:020d}.crc", f"{1:020d}.{3:020d}.compacted.json"):
        with open(os.path.join(log_dir(table_path), name), "w") as fh:
            fh.write("{}\n")
    stamps_before = commit_timestamps(table_path)
    result = cleanup_log(table_path)
    assert (result.cutoff_commit, result.cutoff_checkpoint, result.oldest_version_kept) == (9, 8, 8)
    assert result.by_kind == {"commit": 8, "checkpoint": 1, "crc": 1, "compacted": 1}
    assert result.num_deleted == result.num_files == 11 and result.skipped_reason is None
    left = log_files(table_path)
    assert f"{8:020d}.json" in left and f"{8:020d}.checkpoint.parquet" in left and f"{9:020d}.crc" in left
    assert not any(n.startswith(f"{v:020d}.") for v in range(8) for n in left)
    readable_versions_agree(table_path, [8, 10, 12])
    with pytest.raises(VersionNotFoundError):
        DeltaTable(table_path).snapshot(7)
    # Time travel by timestamp sees the same commit times for every kept version.
    stamps_after = commit_timestamps(table_path)
    assert stamps_after == {v: ts for v, ts in stamps_before.items() if v >= 8}
    again = cleanup_log(table_path)
    assert again.num_deleted == 0 and "nothing has expired" in again.skipped_reason


def test_dry_run_returns_the_plan_and_deletes_nothing(table_path):
    history_table(table_path)
    before = {n: os.path.getsize(os.path.join(log_dir(table_path), n)) for n in log_files(table_path)}
    plan = cleanup_log(table_path, dry_run=True)
    assert plan.dry_run and plan.num_deleted == 0
    assert plan.files == [f"{v:020d}.json" for v in range(5)] + [f"{4:020d}.checkpoint.parquet"] + [
        f"{v:020d}.json" for v in range(5, 8)
    ]
    assert plan.bytes == sum(before[n] for n in plan.files)
    assert plan.oldest_version_kept == 8 and plan.cutoff_time.endswith("T00:00:00.000+00:00")
    assert {n: os.path.getsize(os.path.join(log_dir(table_path), n)) for n in log_files(table_path)} == before


def test_nothing_is_deleted_when_no_checkpoint_precedes_the_cutoff(table_path):
    # delta-rs#3692: a checkpoint only after the cutoff commit must not license deleting anything.
    history_table(table_path, commits=9, checkpoints=(9,), old_through=5)
    before = log_files(table_path)
    result = cleanup_log(table_path)
    assert result.cutoff_commit == 5 and result.cutoff_checkpoint is None
    assert "no checkpoint at or before the cutoff commit 5" in result.skipped_reason
    assert log_files(table_path) == before
    readable_versions_agree(table_path, [0, 9])


def test_nothing_is_deleted_when_no_commit_is_old_enough(table_path):
    history_table(table_path, old_through=-1)
    result = cleanup_log(table_path)
    assert result.cutoff_commit is None and "no commit is older than the cutoff" in result.skipped_reason


def test_disabled_by_table_property(table_path):
    history_table(table_path, configuration={"delta.enableExpiredLogCleanup": "false"})
    before = log_files(table_path)
    result = cleanup_log(table_path)
    assert not result.enabled and result.skipped_reason == "delta.enableExpiredLogCleanup is false"
    assert log_files(table_path) == before


def test_log_retention_duration_property_moves_the_cutoff(table_path):
    history_table(table_path, configuration={"delta.logRetentionDuration": "interval 60 days"})
    assert "no commit is older" in cleanup_log(table_path).skipped_reason
    age_commits(table_path, 9, days=70)
    assert cleanup_log(table_path).oldest_version_kept == 8


# --- checkpoint kinds ---------------------------------------------------------------------------


def split_into_parts(path: str, version: int, parts: int, keep: int | None = None) -> None:
    """Turn our classic checkpoint at ``version`` into a multi-part one (optionally only ``keep`` parts)."""
    classic = os.path.join(log_dir(path), f"{version:020d}.checkpoint.parquet")
    table = pq.read_table(classic)
    os.unlink(classic)
    step = -(-table.num_rows // parts)
    for i in range(keep or parts):
        name = f"{version:020d}.checkpoint.{i + 1:010d}.{parts:010d}.parquet"
        pq.write_table(table.slice(i * step, step), os.path.join(log_dir(path), name))


def test_multi_part_checkpoints_and_incomplete_sets_are_deleted(table_path):
    history_table(table_path, checkpoints=(2, 4, 8))
    split_into_parts(table_path, 4, 2)
    split_into_parts(table_path, 2, 3, keep=1)  # an incomplete set: readers ignore it
    result = cleanup_log(table_path)
    assert result.oldest_version_kept == 8
    assert sorted(f for f in result.files if "checkpoint" in f) == sorted(
        [f"{2:020d}.checkpoint.0000000001.0000000003.parquet"]
        + [f"{4:020d}.checkpoint.{i:010d}.0000000002.parquet" for i in (1, 2)]
    )
    readable_versions_agree(table_path, [8, 12])


def test_a_multi_part_cutoff_checkpoint_is_kept_whole(table_path):
    history_table(table_path, checkpoints=(4,), old_through=6)
    split_into_parts(table_path, 4, 2)
    result = cleanup_log(table_path)
    assert result.oldest_version_kept == 4 and result.by_kind == {"commit": 4}
    assert sum(".checkpoint.00000000" in n for n in log_files(table_path)) == 2
    readable_versions_agree(table_path, [4, 12])


def test_v2_checkpoints_and_unreferenced_sidecars(table_path):
    history_table(table_path, protocol=V2, checkpoints=(3, 6), old_through=7)
    sidecars = os.path.join(log_dir(table_path), "_sidecars")
    listing = DeltaTable(table_path).list_log()
    (cp3,), (cp6,) = listing.checkpoints[3], listing.checkpoints[6]
    refs = {
        v: [json.loads(x)["sidecar"]["path"] for x in open(cp.files[0].path) if '"sidecar"' in x]
        for v, cp in ((3, cp3), (6, cp6))
    }
    old_orphan, new_orphan = f"{uuid.uuid4()}.parquet", f"{uuid.uuid4()}.parquet"
    for name in (old_orphan, new_orphan):
        pq.write_table(pa.table({"add": pa.nulls(0, pa.struct([("path", pa.string())]))}), os.path.join(sidecars, name))
    old = now_ms() - 40 * DAY_MS
    for name in refs[3] + refs[6] + [old_orphan]:
        set_mtime(os.path.join(sidecars, name), old)
    result = cleanup_log(table_path)
    assert result.oldest_version_kept == 6
    deleted_sidecars = {f.split("/", 1)[1] for f in result.files if f.startswith("_sidecars/")}
    assert deleted_sidecars == set(refs[3]) | {old_orphan}
    assert set(os.listdir(sidecars)) == set(refs[6]) | {new_orphan}
    assert result.files[-len(deleted_sidecars) :] == sorted(f"_sidecars/{n}" for n in deleted_sidecars)  # last
    assert cp3.files[0].name in result.files
    readable_versions_agree(table_path, [6, 12])


# --- timestamps ---------------------------------------------------------------------------------


def ict_history(path: str, old_commits: int, monkeypatch: pytest.MonkeyPatch) -> DeltaTable:
    """Versions 0..old_commits carry in-commit timestamps 40 days old (with recent file times), then 3 more."""
    real = time.time
    with monkeypatch.context() as m:
        if old_commits:
            m.setattr(time, "time", lambda: real() - 40 * 86400)
        t = make_table(
            path,
            configuration={"delta.enableInCommitTimestamps": "true", "delta.checkpointInterval": "1000"},
            protocol=Protocol(1, 7, None, ("inCommitTimestamp",)),
        )
        for i in range(old_commits):
            append(t, rows(1, i))
    for i in range(3):
        append(t, rows(1, 100 + i))
    return t


def test_in_commit_timestamps_decide_the_cutoff(table_path, monkeypatch):
    t = ict_history(table_path, 6, monkeypatch)  # versions 0..6 have old ICTs, recent file times
    create_checkpoint(t, version=4)
    result = cleanup_log(t)
    assert (result.cutoff_commit, result.oldest_version_kept) == (6, 4)
    assert result.by_kind == {"commit": 4}
    readable_versions_agree(table_path, [4, 9])


def test_old_file_times_do_not_count_when_in_commit_timestamps_are_recent(table_path, monkeypatch):
    t = ict_history(table_path, 0, monkeypatch)
    create_checkpoint(t, version=2)
    age_commits(table_path, 3)
    result = cleanup_log(t)
    assert result.num_files == 0 and "no commit is older than the cutoff" in result.skipped_reason


def test_commits_a_kept_timestamp_depends_on_are_kept(table_path):
    history_table(table_path, checkpoints=(3, 6))
    # Commits 5 and 6 were written with clocks behind commit 4's: time travel sees them at 4's time + 1 and + 2 ms.
    base = now_ms() - 40 * DAY_MS
    set_mtime(commit_path(table_path, 5), base + 2500)
    set_mtime(commit_path(table_path, 6), base + 2600)
    stamps_before = commit_timestamps(table_path)
    assert stamps_before[6] == stamps_before[4] + 2
    result = cleanup_log(table_path)
    assert result.oldest_version_kept == 6 and result.commits_kept_for_timestamps == 2
    assert result.by_kind == {"commit": 4, "checkpoint": 1}
    assert {f"{v:020d}.json" for v in (4, 5)} <= log_files(table_path)
    after = commit_timestamps(table_path)
    assert {v: after[v] for v in range(6, 13)} == {v: stamps_before[v] for v in range(6, 13)}
    readable_versions_agree(table_path, [6, 12])
    with pytest.raises(VersionNotFoundError):
        DeltaTable(table_path).snapshot(5)  # kept only for its timestamp


# --- protocol and checkpointProtection ------------------------------------------------------------


def write_commit(path: str, version: int, actions: list[dict], mtime: int | None = None) -> None:
    os.makedirs(log_dir(path), exist_ok=True)
    with open(commit_path(path, version), "w") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")
    if mtime is not None:
        set_mtime(commit_path(path, version), mtime)


def test_unsupported_protocol_is_refused_before_deleting(table_path):
    history_table(table_path, commits=4, checkpoints=(2,), old_through=4)
    md = DeltaTable(table_path).snapshot().metadata
    # Catalog-managed: log cleanup belongs to the catalog (PROTOCOL.md), so deltalog refuses it.
    write_commit(
        table_path,
        5,
        [{"protocol": Protocol(3, 7, ("catalogManaged",), ("catalogManaged", "inCommitTimestamp")).to_dict()}],
    )
    before = log_files(table_path)
    for dry in (True, False):
        with pytest.raises(UnsupportedProtocolError, match="catalogManaged"):
            cleanup_log(table_path, dry_run=dry)
    assert log_files(table_path) == before and md.id


def protected_history(path: str, boundary: int, early_features: tuple[str, ...]) -> None:
    """Versions 0..4 with ``early_features``, then a protocol without them; checkpointProtection before ``boundary``."""
    schema = arrow_schema_to_schema_string(pa.schema([("id", pa.int64())]))
    conf = {"delta.requireCheckpointProtectionBeforeVersion": str(boundary), "delta.checkpointInterval": "1000"}
    md = {"metaData": Metadata("t", schema, [], conf).to_action()}
    base = now_ms() - 40 * DAY_MS
    early = Protocol(1, 7, None, ("checkpointProtection", *early_features)).to_dict()
    write_commit(path, 0, [{"protocol": early}, md], base)
    for v in range(1, 10):
        actions = [
            {"add": {"path": f"f{v}", "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": True}}
        ]
        if v == 5:
            actions.append({"protocol": Protocol(1, 7, None, ("checkpointProtection",)).to_dict()})
        write_commit(path, v, actions, base + v * 1000)
    storage = DeltaTable(path).storage
    # Checkpoints at 4 (older protocol: written with the internal writer, the API refuses) and 8.
    _CheckpointWriter(storage, DeltaTable(path).snapshot(4), now_ms(), []).write_classic()
    create_checkpoint(path, version=8)


def test_checkpoint_protection_blocks_partial_truncation_of_unsupported_history(table_path):
    protected_history(table_path, boundary=6, early_features=("someFutureFeature",))
    for v in range(6, 10):
        set_mtime(commit_path(table_path, v), now_ms())  # cutoff commit 5: cutoff checkpoint 4 < 6
    before = log_files(table_path)
    result = cleanup_log(table_path)
    assert result.cutoff_checkpoint == 4 and result.num_files == 0
    assert "checkpointProtection" in result.skipped_reason and "someFutureFeature" in result.skipped_reason
    assert log_files(table_path) == before
    # Once the cleanup can reach past the boundary in one go (checkpoint 8), it proceeds.
    age_commits(table_path, 9)
    result = cleanup_log(table_path)
    assert result.oldest_version_kept == 8 and result.num_deleted == 9
    assert set(DeltaTable(table_path).snapshot().file_paths()) == {f"f{v}" for v in range(1, 10)}


def test_checkpoint_protection_allows_partial_truncation_of_supported_history(table_path):
    protected_history(table_path, boundary=6, early_features=())
    for v in range(6, 10):
        set_mtime(commit_path(table_path, v), now_ms())
    result = cleanup_log(table_path)
    assert result.oldest_version_kept == 4 and result.num_deleted == 4
    readable_versions_agree(table_path, [4, 9])


# --- other files ------------------------------------------------------------------------------


def test_staged_commits_stale_hint_and_leftover_temp_files(table_path):
    history_table(table_path)
    staged = os.path.join(log_dir(table_path), "_staged_commits")
    os.makedirs(staged)
    for v in (3, 9):
        open(os.path.join(staged, f"{v:020d}.{uuid.uuid4()}.json"), "w").close()
    old_tmp = os.path.join(log_dir(table_path), f".{3:020d}.json.{uuid.uuid4().hex}.tmp")
    new_tmp = os.path.join(log_dir(table_path), f".{12:020d}.json.{uuid.uuid4().hex}.tmp")
    for p in (old_tmp, new_tmp):
        open(p, "w").close()
    set_mtime(old_tmp, now_ms() - 40 * DAY_MS)
    hint = os.path.join(log_dir(table_path), "_last_checkpoint")
    with open(hint, "w") as fh:
        json.dump({"version": 4, "size": 1}, fh)  # a hint naming a checkpoint about to go
    result = cleanup_log(table_path)
    assert result.by_kind["staged"] == 1 and result.by_kind["temp"] == 1
    assert [n.split(".")[0] for n in os.listdir(staged)] == [f"{9:020d}"]
    assert not os.path.exists(old_tmp) and os.path.exists(new_tmp)
    assert json.load(open(hint))["version"] == 8
    readable_versions_agree(table_path, [8, 12])


# --- crashes, the hook, the CLI ---------------------------------------------------------------

CRASH_SCRIPT = """
import os, sys
sys.path.insert(0, {here!r})
import deltalog.storage.filesystem as storage_mod
from deltalog.log_maintenance.log_cleanup import cleanup_log
real = storage_mod.Storage.delete
done = []
def delete(self, path):
    if len(done) == 4:
        os._exit(9)
    done.append(path)
    return real(self, path)
storage_mod.Storage.delete = delete
cleanup_log({table!r})
"""


def test_crash_mid_cleanup_leaves_a_readable_table_and_a_rerun_completes(table_path):
    history_table(table_path)
    expected = set(DeltaTable(table_path).snapshot().file_paths())
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CRASH_SCRIPT.format(here=HERE, table=table_path))],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 9, proc.stderr
    assert f"{4:020d}.json" in log_files(table_path) and f"{0:020d}.json" not in log_files(table_path)
    readable_versions_agree(table_path, [8, 12])
    result = cleanup_log(table_path)
    assert result.oldest_version_kept == 8 and result.num_deleted == 5
    assert not any(n.startswith(f"{v:020d}.") for v in range(8) for n in log_files(table_path))
    readable_versions_agree(table_path, [8, 12])
    assert set(DeltaTable(table_path).snapshot().file_paths()) == expected


def test_hook_cleans_up_after_an_automatic_checkpoint(table_path):
    t = make_table(table_path, configuration={"delta.checkpointInterval": "5"})
    for i in range(4):
        append(t, rows(1, i))
    create_checkpoint(t, version=2)
    age_commits(table_path, 4)
    result = append(t, rows(1, 99))
    hooks = {h.name: h for h in result.hooks}
    assert result.version == 5 and hooks["checkpoint"].ok and hooks["log_cleanup"].ok
    detail = hooks["log_cleanup"].detail
    assert detail["oldest_version_kept"] == 2 and detail["num_deleted"] == 2 and "files" not in detail
    assert f"{0:020d}.json" not in log_files(table_path)
    readable_versions_agree(table_path, [2, 5])
    # A commit that is not due for a checkpoint runs no cleanup at all.
    assert "log_cleanup" not in {h.name for h in append(t, rows(1, 100)).hooks}


def test_cli_cleanup_log_dry_run_json(table_path, capsys):
    history_table(table_path)
    assert main(["cleanup-log", table_path, "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dry_run"] and out["num_files"] == 9 and out["oldest_version_kept"] == 8 and len(out["files"]) == 9
    assert out["bytes"] > 0
    assert f"{0:020d}.json" in log_files(table_path)
    assert main(["cleanup-log", table_path]) == 0
    assert "deleted 9 files" in capsys.readouterr().out
    assert main(["cleanup-log", os.path.join(table_path, "missing")]) == 2
    assert capsys.readouterr().err.startswith("error: no table at")


# --- on S3 (moto server): checkpoint, cleanup and manifests over real HTTP ---------------------


@pytest.mark.s3
@pytest.mark.slow
@pytest.mark.parametrize("v2", [False, True])
def test_checkpoint_cleanup_and_manifest_on_s3(s3_table_uri, s3_storage_options, s3_deltalake_options, v2):
    from deltalog.commit.transaction import Transaction
    from deltalog.log_maintenance.manifest import generate_manifest
    from deltalog.storage.filesystem import Storage

    # In-commit timestamps: S3 keeps file times to the second, so commits made within one second
    # would share them (and the cleanup would keep the chain); ICT makes the cutoff exact.
    storage = Storage(s3_table_uri, s3_storage_options)
    txn = Transaction(storage, None, operation="CREATE TABLE", run_hooks=False)
    ict = ("inCommitTimestamp",)
    txn.update_protocol(Protocol(3, 7, ("v2Checkpoint",), ("v2Checkpoint", *ict)) if v2 else Protocol(1, 7, None, ict))
    schema = arrow_schema_to_schema_string(pa.schema([("id", pa.int64()), ("part", pa.string())]))
    conf = {"delta.checkpointInterval": "1000", "delta.enableInCommitTimestamps": "true"}
    txn.update_metadata(Metadata("s3t", schema, ["part"], conf))
    txn.commit()
    table = DeltaTable(s3_table_uri, s3_storage_options)
    for v in range(1, 5):
        txn = Transaction(storage, table.snapshot(), operation="WRITE", run_hooks=False)
        add = {
            "path": f"part=p{v % 2}/f{v}.parquet",
            "partitionValues": {"part": f"p{v % 2}"},
            "size": 10,
            "modificationTime": 1,
            "dataChange": True,
            "stats": '{"numRecords":1}',
        }
        txn.add([add])
        txn.commit()
    result = create_checkpoint(table, sidecar_max_actions=3)
    assert (
        result.version == 4 and result.kind == ("v2" if v2 else "classic") and len(result.sidecars) == (2 if v2 else 0)
    )
    # A clock 60 days ahead puts every commit before the cutoff: everything before version 4 goes.
    cleaned = cleanup_log(table, now_ms=now_ms() + 60 * DAY_MS)
    assert cleaned.oldest_version_kept == 4 and cleaned.by_kind == {"commit": 4}
    expected = {f"part=p{v % 2}/f{v}.parquet" for v in range(1, 5)}
    assert set(DeltaTable(s3_table_uri, s3_storage_options).snapshot().file_paths()) == expected
    theirs = deltalake.DeltaTable(s3_table_uri, storage_options=s3_deltalake_options)
    assert set(theirs.get_add_actions(flatten=True).column("path").to_pylist()) == expected
    manifests = generate_manifest(table)
    assert sorted(manifests.manifests_written) == [f"_symlink_format_manifest/part=p{i}/manifest" for i in (0, 1)]
    lines = storage.read_bytes(storage.join("_symlink_format_manifest/part=p1/manifest")).decode().splitlines()
    assert lines == [f"{s3_table_uri}/part=p1/f1.parquet", f"{s3_table_uri}/part=p1/f3.parquet"]
