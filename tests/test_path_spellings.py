"""An add and a remove of one file under two spellings of its path (issue 30, item 3).

A log that adds a file as ``/abs/path`` (or percent-encoded, ``.../with%20space/p@%23h``)
and removes it as ``file:/abs/path`` or ``file:///abs/path`` left the file live, and our
checkpoint wrote that wrong state down. Paths are now matched in one canonical form
(``deltalog.protocol.log_paths``), Delta Spark's, at snapshot replay (commits and
checkpoints, per line and vectorised), in a transaction, in the conflict checks and so
in everything built on them (checkpoint, compaction, vacuum).
"""

from __future__ import annotations

import os
import time
import uuid
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltalog import DeltaTable
from deltalog.commit.conflicts import ConcurrentDeleteReadError
from deltalog.commit.transaction import Transaction
from deltalog.log.replay import canonical_paths, file_keys
from deltalog.log_maintenance import create_checkpoint
from deltalog.protocol.log_paths import canonical_path
from handmade_logs import add_action, write_commit
from helpers import make_table

# --- the rule, case by case (Delta Spark: CanonicalPathFunction, then java.net.URI equality) ------------

SAME = [
    ("/t/x.parquet", "file:/t/x.parquet"),
    ("/t/x.parquet", "file:///t/x.parquet"),
    ("file:/t/x.parquet", "FILE:///t/x.parquet"),
    ("/t/with%20space/p@%23h", "file:///t/with%20space/p@%23h"),
    ("/t/with%20space/p@%23h", "file:/t/with%20space/p@%23h"),
    ("/t/p%40x", "/t/p@x"),  # an unqualified path is decoded and encoded again
    ("/t/caf%C3%A9", "file:/t/café"),
    ("file:/t/a%2fb", "file:/t/a%2Fb"),  # escapes compare without case
    ("s3://Bucket/k", "S3://bucket/k"),  # scheme and host compare without case
    ("file:/t/./a/../x", "file:/t/x"),
    ("/t//x/", "file:/t/x"),  # Hadoop's Path collapses doubled slashes and drops a trailing one
]
DIFFERENT = [
    ("x.parquet", "file:/t/x.parquet"),  # relative and absolute are never equal, even under the root
    ("file:/t/p%40x", "file:/t/p@x"),  # a qualified path is compared as written
    ("file://localhost/t/x", "file:/t/x"),  # an authority is part of the URI
    ("/t/x", "s3://t/x"),
    ("a%20b.parquet", "a b.parquet"),
]


@pytest.mark.parametrize(("a", "b"), SAME)
def test_spellings_of_one_file_have_one_canonical_form(a, b):
    assert canonical_path(a) == canonical_path(b), (canonical_path(a), canonical_path(b))


@pytest.mark.parametrize(("a", "b"), DIFFERENT)
def test_spellings_delta_spark_keeps_apart_stay_apart(a, b):
    assert canonical_path(a) != canonical_path(b)


PIECES = st.sampled_from(["/t/", "file:/t/", "file:///t/", "FILE:/t/", "s3://b/", "", "part=1/", "./", "a/../"])
NAMES = st.text(alphabet="ab %#@:é/.", min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(PIECES, NAMES), min_size=1, max_size=10))
def test_the_vectorised_form_is_the_scalar_one(parts):
    paths = [prefix + (quote(name, safe="/") if i % 2 else name) for i, (prefix, name) in enumerate(parts)]
    got = canonical_paths(pa.array(paths)).to_pylist()
    assert got == [canonical_path(p) for p in paths]
    chunks = [pa.array(paths[:1], pa.string()), pa.array(paths[1:], pa.string())]
    assert canonical_paths(pa.chunked_array(chunks)).to_pylist() == got
    keys = file_keys(pa.array(paths), None).to_pylist()
    assert keys == got


# --- a log that adds one spelling and removes another ---------------------------------------------------


def _put(root: str, rel: str, ids: list[int]) -> int:
    full = os.path.join(root, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "value": [str(i) for i in ids]}), full)
    return os.path.getsize(full)


def spelled(root: str, rel: str, how: str) -> str:
    encoded = quote(f"{root}/{rel}", safe="/@")
    return {"bare": encoded, "file:": f"file:{encoded}", "file://": f"file://{encoded}"}[how]


def added(root: str, rel: str, ids: list[int], how: str | None = None) -> dict:
    """Write ``rel`` holding ``ids``; its add action, the path spelled ``how`` (absolute) or as is (None)."""
    _put(root, rel, ids)
    action = add_action(root, rel)
    if how is not None:
        action["add"]["path"] = spelled(root, rel, how)
    return action


def removed(root: str, rel: str, how: str) -> dict:
    return {"remove": {"path": spelled(root, rel, how), "deletionTimestamp": 2, "dataChange": True}}


def two_spellings(path: str, add_as: str, remove_as: str, rel: str = "with space/p@#h.parquet") -> None:
    """v1 adds ``rel`` (absolute, spelled ``add_as``) and a relative file; v2 removes ``rel`` spelled ``remove_as``."""
    make_table(path)
    write_commit(
        path,
        1,
        [{"commitInfo": {"operation": "WRITE"}}, added(path, rel, [1, 2], add_as), added(path, "keep.parquet", [3])],
    )
    write_commit(path, 2, [{"commitInfo": {"operation": "DELETE"}}, removed(path, rel, remove_as)])


PAIRS = [("bare", "file:"), ("bare", "file://"), ("file:", "bare"), ("file://", "file:"), ("file:", "file://")]


@pytest.mark.parametrize(("add_as", "remove_as"), PAIRS)
@pytest.mark.parametrize("reader", ["arrow", "per-line"])
def test_a_file_removed_under_another_spelling_is_not_live(tmp_path, monkeypatch, add_as, remove_as, reader):
    if reader == "per-line":
        import deltalog.log.snapshot as snapshot_module

        monkeypatch.setattr(snapshot_module, "_replay_commits_arrow", lambda contents: None)
    path = str(tmp_path / "t")
    two_spellings(path, add_as, remove_as)
    snap = DeltaTable(path).snapshot()
    assert snap.file_paths() == ["keep.parquet"]
    assert snap.tombstones.column("path").to_pylist() == [spelled(path, "with space/p@#h.parquet", remove_as)]


def test_our_checkpoint_writes_the_reconciled_state_and_reads_back(tmp_path):
    path = str(tmp_path / "t")
    two_spellings(path, "bare", "file://")
    create_checkpoint(DeltaTable(path))
    (cp,) = [n for n in os.listdir(os.path.join(path, "_delta_log")) if ".checkpoint." in n]
    table = pq.read_table(os.path.join(path, "_delta_log", cp))
    adds = [a["path"] for a in table.column("add").to_pylist() if a]
    assert adds == ["keep.parquet"]
    for v in (0, 1):
        os.unlink(os.path.join(path, "_delta_log", f"{v:020d}.json"))
    assert DeltaTable(path).snapshot().file_paths() == ["keep.parquet"]


def test_a_remove_after_a_checkpoint_matches_the_checkpoints_add_spelled_otherwise(tmp_path):
    path = str(tmp_path / "t")
    make_table(path)
    rel = "with space/p@#h.parquet"
    write_commit(path, 1, [{"commitInfo": {}}, added(path, rel, [1], "file:")])
    create_checkpoint(DeltaTable(path))
    write_commit(path, 2, [{"commitInfo": {}}, removed(path, rel, "bare")])
    assert DeltaTable(path).snapshot().num_files == 0


def test_a_concurrent_remove_spelled_otherwise_conflicts_with_what_we_read(tmp_path):
    path = str(tmp_path / "t")
    make_table(path)
    write_commit(path, 1, [{"commitInfo": {}}, added(path, "x.parquet", [1], "bare")])
    t = DeltaTable(path)
    txn = Transaction(t.storage, t.snapshot(), operation="DELETE", run_hooks=False)
    txn.read_files(txn.snapshot.file_paths())  # spelled as the add spells it
    write_commit(path, 2, [{"commitInfo": {"operation": "DELETE"}}, removed(path, "x.parquet", "file://")])
    new = _put(path, "y.parquet", [2])
    txn.add([{"path": "y.parquet", "partitionValues": {}, "size": new, "modificationTime": 1, "dataChange": True}])
    with pytest.raises(ConcurrentDeleteReadError):
        txn.commit()


def test_compaction_does_not_rewrite_the_removed_file(tmp_path):
    from deltalog.compaction import compact

    path = str(tmp_path / "t")
    two_spellings(path, "bare", "file:")
    t = DeltaTable(path)
    txn = Transaction(t.storage, t.snapshot(), operation="WRITE", run_hooks=False)
    txn.add([added(path, "keep2.parquet", [4])["add"]])
    txn.commit()
    compact(path, target_size=1 << 20)
    snap = DeltaTable(path).snapshot()
    ids = sorted(i for p in snap.file_paths() for i in pq.read_table(os.path.join(path, p)).column("id").to_pylist())
    assert ids == [3, 4]  # rows 1 and 2 were deleted with the removed file


def test_vacuum_deletes_the_expired_file_under_any_spelling(tmp_path):
    from deltalog.vacuuming import vacuum

    path = str(tmp_path / "t")
    two_spellings(path, "bare", "file://")
    # Everything a minute old: commits written within one clock tick get times a millisecond
    # apart (made monotonic), which may put v2 after a cutoff taken at once.
    minute_ago = time.time() - 60
    for folder, _, names in os.walk(path):
        for name in names:
            os.utime(os.path.join(folder, name), (minute_ago, minute_ago))
    dry = vacuum(path, retention_hours=0, allow_short_retention=True, dry_run=True)
    assert dry.plan.files.column("path").to_pylist() == ["with space/p@#h.parquet"]


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize(("add_as", "remove_as"), PAIRS[:3])
def test_delta_spark_agrees(tmp_path, delta_spark, add_as, remove_as):
    path = str(tmp_path / f"t-{uuid.uuid4().hex[:6]}")
    two_spellings(path, add_as, remove_as)
    theirs = sorted(r.id for r in delta_spark.read.format("delta").load(path).collect())
    snap = DeltaTable(path).snapshot()
    ours = sorted(i for p in snap.file_paths() for i in pq.read_table(os.path.join(path, p)).column("id").to_pylist())
    assert ours == theirs == [3]
    dry = delta_spark.sql(f"VACUUM delta.`{path}` RETAIN 0 HOURS DRY RUN").collect()
    theirs_vacuum = sorted(os.path.relpath(r[0].removeprefix("file:"), path) for r in dry)
    from deltalog.vacuuming import vacuum

    ours_vacuum = vacuum(path, retention_hours=0, allow_short_retention=True, dry_run=True)
    assert ours_vacuum.plan.files.column("path").to_pylist() == theirs_vacuum
    create_checkpoint(DeltaTable(path))  # Delta Spark reads our checkpoint the same way
    delta_spark.catalog.clearCache()
    assert sorted(r.id for r in delta_spark.read.format("delta").load(path).collect()) == [3]
