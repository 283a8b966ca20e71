"""Maintenance racing writers, in separate processes, on a local table and on the local S3 server.

Each scenario states the outcome Delta's conflict rules prescribe and checks it,
then the common guarantees: every commit landed once (versions contiguous, rows
add up as deltalake reads them), both readers read every version that must stay
readable, no referenced file is missing, no rewritten file is left orphaned.

- compaction with appenders: blind appends never conflict with OPTIMIZE
  (SnapshotIsolation), so every bin commits, after retrying past the appends;
- compaction with a deleter: a delete landing between planning and commit costs
  the compaction only that partition's bins; a compaction landing between the
  delete's read and its commit makes the delete fail with
  ConcurrentDeleteDeleteError, and its retry deletes the compacted file; free
  running, the final rows are the same either way;
- vacuum with a writer holding uncommitted files: they are newer than the
  cutoff, so they survive and the writer's commit reads back;
- checkpoints and log cleanup while writers commit (and their hooks checkpoint
  and clean up too);
- two compactions of one table: exactly one commits, the other's bins are
  conflicts and its files are deleted; no row is duplicated.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Any
from urllib.parse import unquote

import pytest
import reliability_recorder as recorder
from race_workers import put_data_file, run
from reliability_support import OPERATIONS, TableRef, check_table, child_context, row_multiset

from deltalog import DeltaTable
from deltalog.commit.transaction import Transaction
from deltalog.compaction import plan_compaction
from deltalog.log.actions import Metadata
from deltalog.log_maintenance import create_checkpoint
from deltalog.protocol.schema import arrow_schema_to_schema_string
from deltalog.protocol.table_protocol import Protocol
from deltalog.vacuuming import plan_vacuum
from helpers import DEFAULT_SCHEMA

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SUITE = "races"
WHERE = ["local", pytest.param("s3", marks=pytest.mark.s3)]


class Race:
    """Actors started in child processes against one table, and their results."""

    def __init__(self, ref: TableRef, sigdir: str) -> None:
        self.ref = ref
        self.sigdir = sigdir
        os.makedirs(sigdir, exist_ok=True)
        self.ctx = child_context()
        self.procs: dict[str, Any] = {}

    def start(self, name: str, role: str, **params: Any) -> None:
        args = (role, name, self.ref.uri, self.ref.options, params, self.sigdir)
        proc = self.ctx.Process(target=run, args=args)
        proc.start()
        self.procs[name] = proc

    def go(self) -> None:
        time.sleep(0.2)  # every actor is waiting on the signal
        open(os.path.join(self.sigdir, "go.signal"), "w").close()

    def finish(self, timeout: float = 180) -> dict[str, Any]:
        import json

        deadline = time.time() + timeout
        out = {}
        for name, proc in self.procs.items():
            proc.join(max(1.0, deadline - time.time()))
            if proc.is_alive():
                proc.kill()
                raise AssertionError(f"actor {name} hung")
            path = os.path.join(self.sigdir, f"{name}.json")
            assert os.path.exists(path), f"actor {name} died (exit code {proc.exitcode})"
            with open(path) as fh:
                doc = json.load(fh)
            assert doc["ok"], f"actor {name} failed: {doc['error']}\n{doc['traceback']}"
            out[name] = doc["result"]
        recorder.add("scenarios", 1, SUITE)
        recorder.add("races", 1, SUITE)
        return out


@pytest.fixture(params=WHERE)
def ref(request, tmp_path) -> TableRef:
    if request.param == "local":
        return TableRef(str(tmp_path / "table"))
    uri = request.getfixturevalue("s3_table_uri")
    return TableRef(uri, request.getfixturevalue("s3_storage_options"), request.getfixturevalue("s3_deltalake_options"))


@pytest.fixture
def local(tmp_path) -> TableRef:
    return TableRef(str(tmp_path / "table"))


def build_table(ref: TableRef, parts: dict[str, int], configuration: dict[str, str] | None = None) -> Counter:
    """A table partitioned by ``part`` with ``parts[p]`` small files in each partition.

    One commit per file locally; on S3, where every request costs, two files per commit.
    """
    table = ref.deltalog()
    txn = Transaction(table.storage, None, operation="CREATE TABLE", run_hooks=False)
    txn.update_protocol(Protocol(1, 2))
    conf = {"delta.checkpointInterval": "1000", **(configuration or {})}
    txn.update_metadata(Metadata("race", arrow_schema_to_schema_string(DEFAULT_SCHEMA), ["part"], conf))
    txn.commit()
    expected: Counter = Counter()
    adds = []
    per_commit = 2 if ref.options else 1
    for part, files in parts.items():
        for i in range(files):
            ids = list(range(len(expected), len(expected) + 4))
            adds.append(put_data_file(table.storage, part, f"init-{part}-{i}.parquet", ids))
            expected.update((x, f"v{x}", part) for x in ids)
    for i in range(0, len(adds), per_commit):
        t = Transaction(table.storage, table.snapshot(), operation="WRITE", run_hooks=False)
        t.add(adds[i : i + per_commit])
        t.commit()
    return expected


def rows_in(expected: Counter, *parts: str) -> Counter:
    """The (id, value) multiset of the given partitions (all when none given)."""
    return Counter({(i, v): c for (i, v, p), c in expected.items() if not parts or p in parts})


def appended(result: dict[str, Any]) -> Counter:
    return Counter(tuple(r) for r in result["rows"])


def every_version(ref: TableRef, step: int = 1) -> Any:
    """Versions to check: all of them locally, every ``step``-th (and the latest) on S3."""
    return lambda latest: list(range(0, latest + 1, step if ref.options else 1))


def files_on_storage(ref: TableRef) -> set[str]:
    storage = ref.deltalog().storage
    if not storage.is_local:
        storage.fs.invalidate_cache()
    out = set()
    for f in storage.walk_files():
        rel = storage.relative(f.path)
        if not any(part.startswith(("_", ".")) for part in rel.split("/")):
            out.add(rel)
    return out


def referenced_ever(ref: TableRef) -> set[str]:
    """Every data file the log has ever named: the live files and the (unexpired) tombstones."""
    snap = ref.deltalog().snapshot()
    return {unquote(p) for p in snap.file_paths() + snap.tombstones.column("path").to_pylist()}


def assert_commits_landed_once(ref: TableRef, *appenders: dict[str, Any]) -> None:
    versions = [c["version"] for a in appenders for c in a["commits"]]
    assert len(versions) == len(set(versions)), "no two appends share a version"
    listing = ref.deltalog().list_log()
    assert set(versions) <= set(listing.commits), "every append's version is in the log"


# --- compaction with appenders ----------------------------------------------------------------------------


def test_compaction_with_appenders_commits_every_bin(ref: TableRef, tmp_path) -> None:
    initial = build_table(ref, {"a": 5, "b": 5})
    appends = 5 if ref.options else 8
    race = Race(ref, str(tmp_path / "signals"))
    # On S3 the appends start once the compaction has planned and run freely. Locally the compaction's
    # first commit write announces itself (after it read the log), then waits until both appenders
    # have committed once (signal files, whatever the machine's load): appends land between its read
    # and its commit for sure, and the rest of them race its retries freely.
    landed = [f"landed{w}" for w in range(2)]
    until = [os.path.join(race.sigdir, f"{name}.signal") for name in landed]
    announce = os.path.join(race.sigdir, "committing.signal")
    hold = [{"kind": "write", "nth": 1, "action": "hold", "match": "_delta_log/", "until": until, "announce": announce}]
    race.start("compact", "compact", planned="planned", faults=None if ref.options else hold)
    for w in range(2):
        race.start(
            f"append{w}",
            "append",
            wait="planned" if ref.options else "committing",
            worker=w + 1,
            count=appends,
            parts=["a", "b"],
            pause=0.02,
            landed=landed[w],
        )
    out = race.finish()
    compacted = out["compact"]
    assert compacted["skipped"] == [], "blind appends never conflict with a compaction"
    assert sorted(b for c in compacted["commits"] for b in c["bins"]) == sorted(int(b) for b in compacted["bins"])
    if not ref.options:
        assert compacted["commits"][0]["attempts"] > 1, "the appends landed while the compaction was committing"
        firsts = [out[f"append{w}"]["commits"][0]["version"] for w in range(2)]
        assert compacted["commits"][0]["version"] > max(firsts), "both appenders' first commits came before it"
    assert_commits_landed_once(ref, out["append0"], out["append1"])
    expected = rows_in(initial) + appended(out["append0"]) + appended(out["append1"])
    check_table(ref, every_version(ref, 4), expected, SUITE, "compaction racing appenders")
    live = set(ref.deltalog().snapshot().file_paths())
    assert not {p for p in live if "/init-" in p}, "every original small file was compacted"


# --- compaction with deleters --------------------------------------------------------------------------------


def test_a_delete_between_planning_and_commit_costs_only_its_bins(local: TableRef, tmp_path) -> None:
    initial = build_table(local, {"a": 4, "b": 4})
    race = Race(local, str(tmp_path / "signals"))
    race.start("compact", "compact", planned="planned", commit_after=["deleted"])
    race.start("delete", "delete_partition", part="a", wait="planned", done="deleted")
    out = race.finish()
    bins = {int(b): pv["part"] for b, pv in out["compact"]["bins"].items()}
    skipped = {s["bin_id"]: s["kind"] for s in out["compact"]["skipped"]}
    assert skipped == {b: "conflict" for b, part in bins.items() if part == "a"}
    assert [b for c in out["compact"]["commits"] for b in c["bins"]] == [b for b, p in bins.items() if p == "b"]
    assert out["delete"]["conflicts"] == []
    check_table(local, every_version(local), rows_in(initial, "b"), SUITE, "a delete before the compaction's commit")
    assert files_on_storage(local) <= referenced_ever(local), "the dropped bin's new file was deleted"


def test_a_compaction_between_a_deletes_read_and_commit_makes_it_retry(local: TableRef, tmp_path) -> None:
    initial = build_table(local, {"a": 4, "b": 4})
    race = Race(local, str(tmp_path / "signals"))
    race.start("delete", "delete_partition", part="a", read_signal="read", commit_after="compacted")
    race.start("compact", "compact", wait="read", done="compacted")
    out = race.finish()
    assert out["compact"]["skipped"] == [] and len(out["compact"]["commits"]) == 1
    assert out["delete"]["conflicts"] == ["ConcurrentDeleteDeleteError"], "both removed the same files"
    assert out["delete"]["version"] > out["compact"]["commits"][0]["version"]
    check_table(local, every_version(local), rows_in(initial, "b"), SUITE, "a compaction before the delete's commit")


def test_compaction_deleter_and_appender_running_freely(ref: TableRef, tmp_path) -> None:
    initial = build_table(ref, {"a": 4, "b": 4})
    race = Race(ref, str(tmp_path / "signals"))
    race.start("compact", "compact", wait="go")
    race.start("delete", "delete_partition", part="a", wait="go")
    race.start("append", "append", wait="go", worker=7, count=6, parts=["c"], pause=0.01)
    race.go()
    out = race.finish()
    assert set(out["delete"]["conflicts"]) <= {"ConcurrentDeleteDeleteError"}
    assert {s["kind"] for s in out["compact"]["skipped"]} <= {"conflict"}
    bins = {int(b): pv["part"] for b, pv in out["compact"]["bins"].items()}
    for commit in out["compact"]["commits"]:
        if any(bins[b] == "a" for b in commit["bins"]):
            assert commit["version"] < out["delete"]["version"], "partition a was compacted only before the delete"
            assert out["delete"]["conflicts"], "a delete reading the compacted files must have retried"
    expected = rows_in(initial, "b") + appended(out["append"])
    check_table(ref, every_version(ref, 3), expected, SUITE, "compaction, delete and append running freely")
    assert files_on_storage(ref) <= referenced_ever(ref), "no orphaned compaction output"


# --- vacuum with a writer holding uncommitted files -------------------------------------------------------------


def test_vacuum_keeps_a_writers_uncommitted_files(ref: TableRef, tmp_path) -> None:
    if ref.options:  # S3 keeps its own modification times: nothing is old, nothing is deleted
        initial = rows_in(build_table(ref, {"a": 3}))
        doomed: set[str] = set()
        first_retained = 0
    else:
        info = OPERATIONS["vacuum"].build(ref.uri)
        initial, first_retained = info["rows"], info["first_retained"]
        doomed = set(plan_vacuum(ref.uri).files.column("path").to_pylist())
    race = Race(ref, str(tmp_path / "signals"))
    race.start("writer", "stage_then_commit", part="b", files=3, staged="staged", commit_after="vacuumed")
    race.start("vacuum", "vacuum", wait="staged", done="vacuumed")
    race.start("append", "append", wait="staged", worker=5, count=6, parts=["a"], pause=0.01)
    out = race.finish()
    run_ = out["vacuum"]["runs"][0]
    assert run_["status"] == "COMPLETED" and set(run_["planned"]) == doomed and run_["deleted"] == len(doomed)
    assert all(ref.exists(p) for p in out["writer"]["paths"]), "the uncommitted files survived"
    assert out["writer"]["version"] > run_["start"], "the writer committed after the vacuum started"
    expected = initial + appended(out["writer"]) + appended(out["append"])
    check_table(ref, lambda latest: list(range(first_retained, latest + 1)), expected, SUITE, "vacuum racing writers")


# --- checkpoints and log cleanup with writers -------------------------------------------------------------------


def aged_history(ref: TableRef) -> Counter:
    """A history (a checkpoint 3 commits before its end) dated 40 days back locally; then checkpoints every 4 commits."""
    initial = build_table(ref, {"a": 4, "b": 4, "c": 3}, {"delta.checkpointInterval": "4"})
    latest = ref.deltalog().version()
    create_checkpoint(ref.deltalog(), version=latest - 3)
    if not ref.options:
        base = int(time.time() * 1000) - 40 * 86_400_000
        for v in range(latest + 1):
            path = os.path.join(ref.uri, "_delta_log", f"{v:020d}.json")
            os.utime(path, ((base + v * 1000) / 1000,) * 2)
    return rows_in(initial)


def readable_from(ref: TableRef) -> int:
    """The oldest version the log can still build: a checkpoint with every later commit present."""
    listing = ref.deltalog().list_log()
    latest = listing.latest_version
    starts = [0] if 0 in listing.commits else []
    starts += sorted(listing.checkpoints)
    for start in sorted(starts):
        if all(v in listing.commits for v in range(start + 1, latest + 1)):
            return start
    raise AssertionError("no version can be built")


def test_checkpoints_and_cleanup_while_writers_commit(ref: TableRef, tmp_path) -> None:
    initial = aged_history(ref)
    race = Race(ref, str(tmp_path / "signals"))
    race.start("maintenance", "checkpoint_cleanup", wait="go", runs=4, pause=0.05)
    for w in range(2):
        count = 6 if ref.options else 10
        race.start(f"append{w}", "append", wait="go", worker=w + 1, count=count, parts=["a", "b", "c"], pause=0.01)
    race.go()
    out = race.finish()
    assert_commits_landed_once(ref, out["append0"], out["append1"])
    listing = ref.deltalog().list_log()
    assert sorted(listing.commits) == list(range(min(listing.commits), listing.latest_version + 1)), "no gap"
    if not ref.options:  # the expired commits went (to the maintenance rounds or to the writers' hooks)
        assert min(listing.commits) > 0
    first = readable_from(ref)
    expected = initial + appended(out["append0"]) + appended(out["append1"])
    step = 4 if ref.options else 1
    check_table(ref, lambda latest: list(range(first, latest + 1, step)), expected, SUITE, "checkpoints racing writers")


# --- two compactions of one table ------------------------------------------------------------------------------------


def test_two_compactions_of_one_table_commit_once(ref: TableRef, tmp_path) -> None:
    initial = build_table(ref, {"a": 4, "b": 4})
    before = ref.deltalog().version()
    race = Race(ref, str(tmp_path / "signals"))
    race.start("first", "compact", planned="planned-1", commit_after=["planned-1", "planned-2"])
    race.start("second", "compact", planned="planned-2", commit_after=["planned-1", "planned-2"])
    out = race.finish()
    winners = [name for name in ("first", "second") if out[name]["commits"]]
    assert len(winners) == 1, f"exactly one compaction commits, got {winners}"
    loser = out["second" if winners == ["first"] else "first"]
    assert {s["kind"] for s in loser["skipped"]} == {"conflict"} and len(loser["skipped"]) == len(loser["bins"])
    check_table(ref, every_version(ref, 2), rows_in(initial), SUITE, "two compactions")
    assert files_on_storage(ref) <= referenced_ever(ref), "the losing compaction's files were deleted"
    assert not plan_compaction(ref.deltalog()).bins
    assert row_multiset(ref) == rows_in(initial)
    assert DeltaTable(ref.uri, ref.options).version() == before + 1, "one OPTIMIZE commit"


# --- regressions found by these races ---------------------------------------------------------------------------


@pytest.mark.parametrize("vanishing", ["a checkpoint's temp file", "an expired commit"])
def test_cleanup_tolerates_log_files_vanishing_while_it_plans(templates, monkeypatch, vanishing: str) -> None:
    """A concurrent checkpoint renames its temp file, a concurrent cleanup deletes commits: plan again, finish."""
    from deltalog.log_maintenance.log_cleanup import cleanup_log

    path, info = templates.copy("log_cleanup", "vanishing")
    log_dir = os.path.join(path, "_delta_log")
    victim = os.path.join(log_dir, f".{13:020d}.checkpoint.parquet.{'0' * 32}.tmp")
    if vanishing.endswith("temp file"):
        open(victim, "wb").close()
    else:
        victim = os.path.join(log_dir, f"{0:020d}.json")
    import deltalog.log_maintenance.log_cleanup as cleanup_module

    real = cleanup_module.list_log
    calls = []

    def listing_then_vanish(storage):
        listing = real(storage)
        calls.append(1)
        if len(calls) == 1:
            os.unlink(victim)  # after the listing, before cleanup looks at the file
        return listing

    monkeypatch.setattr(cleanup_module, "list_log", listing_then_vanish)
    result = cleanup_log(path)
    assert result.num_deleted > 0 and result.oldest_version_kept == info["keep_from"]
    assert cleanup_log(path, dry_run=True).num_files == 0
    check_table(path, lambda latest: list(range(info["keep_from"], latest + 1)), info["rows"], SUITE, vanishing)
