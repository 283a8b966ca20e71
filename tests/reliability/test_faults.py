"""Storage faults at every step of every operation: nothing lost, a rerun finishes.

For each operation (commit with its hooks, classic and V2 checkpoints, log
cleanup, full and lite vacuum, compaction, manifests, convert to Delta) the table is opened as ``faulty://`` (deltalog's remote
code paths over a local directory, see ``tests/faults.py``). A fault-free run
counts the operation's storage calls per kind; then, on fresh copies, the Nth
write, delete, list, read or stat fails (before it happens, or after it
happened with the response lost, or a write is truncated), for up to
``STEPS`` steps per kind spread from the first call to the last. After each:

1. the operation either finished or raised a deltalog error or an OSError
   (never another exception);
2. deltalog and deltalake read the latest version and every version that must
   stay readable, no file those versions reference is missing, and the rows
   are unchanged (commit: before or after the commit, nothing else; convert:
   untouched Parquet both readers refuse, or the whole converted table);
3. rerunning the operation without faults completes it (checkpoint present and
   used, nothing left to clean or vacuum, nothing left to compact, manifests
   equal the snapshot, the commit landed exactly once, commit 0 lists every
   data file).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections import Counter

import pytest
import reliability_recorder as recorder
from reliability_support import OPERATIONS, SCALE, TemplateCache, run_operation, verify_after

import faults
from deltalog.errors import DeltaLogError, StorageError
from faults import Fault, FaultPlan

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SUITE = "faults"
STEPS = 2 if SCALE == "small" else 6
ACTIONS = {
    "write": ("fail", "fail_after", "truncate"),
    "delete": ("fail", "fail_after"),
    "list": ("fail",),
    "read": ("fail",),
    "stat": ("fail",),
}


def sample_steps(count: int, k: int) -> list[int]:
    """Up to ``k`` distinct 1-based steps spread evenly over ``1..count``, first and last included."""
    if count <= k:
        return list(range(1, count + 1))
    return sorted({1 + round(i * (count - 1) / (k - 1)) for i in range(k)})


def run_case(templates: TemplateCache, name: str, fault: Fault) -> str:
    """Run the operation with one fault, check the table, rerun without faults, check again."""
    path, info = templates.copy(name, f"{name}-{fault.kind}-{fault.nth}-{fault.action}")
    plan = FaultPlan([fault])
    with faults.injecting(plan):
        try:
            run_operation(name, path, info)
            outcome = "completed"
        except DeltaLogError as exc:
            outcome = type(exc).__name__
        except OSError as exc:
            outcome = f"raw {type(exc).__name__}"
            recorder.add("raw_oserror", 1, SUITE)
    assert plan.injected, f"{name}: {fault.describe()} never triggered"
    recorder.add("scenarios", 1, SUITE)
    recorder.add("faults_injected", len(plan.injected), SUITE)
    verify_after(name, path, info, SUITE, f"{name} with {fault.describe()} ({outcome})")
    shutil.rmtree(path)
    return outcome


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_a_fault_at_any_step_loses_nothing_and_a_rerun_finishes(name: str, templates) -> None:
    """Every kind of storage call the operation makes gets faults at sampled steps."""
    counts = templates.counts(name, SUITE)
    # Every operation reads the log and changes storage (writes or deletes); the other kinds
    # depend on the operation (log cleanup writes nothing, a commit deletes nothing).
    assert counts.get("read", 0) and (counts.get("write", 0) or counts.get("delete", 0)), (
        f"{name}: the counting run saw {dict(counts)}"
    )
    for kind, actions in ACTIONS.items():
        total = counts.get(kind, 0)
        outcomes: Counter = Counter()
        for step in sample_steps(total, STEPS):
            for action in actions:
                outcomes[run_case(templates, name, Fault(kind, step, action))] += 1
        print(f"{name}: {total} {kind} calls; outcomes {dict(outcomes)}")


def test_sampled_steps_cover_first_and_last() -> None:
    assert sample_steps(3, 6) == [1, 2, 3]
    steps = sample_steps(100, 6)
    assert steps[0] == 1 and steps[-1] == 100 and len(steps) == 6


def test_the_wrapper_is_an_atomic_remote_filesystem(tmp_path) -> None:
    """What the suite relies on: remote code paths, atomic create, faults that fire when told."""
    from deltalog.storage.filesystem import Storage

    storage = Storage(faults.uri(str(tmp_path)))
    assert not storage.is_local and storage.supports_atomic_create and storage.root == str(tmp_path)
    target = storage.join("x.json")
    storage.put_if_absent(target, b"one")
    with pytest.raises(FileExistsError):
        storage.put_if_absent(target, b"two")
    assert open(target, "rb").read() == b"one"
    plan = FaultPlan([Fault("write", 2, "fail_after"), Fault("read", 1, "fail")])
    with faults.injecting(plan):
        storage.put_if_absent(storage.join("a"), b"a")
        with pytest.raises(StorageError, match="injected fault"):
            storage.put_if_absent(storage.join("b"), b"b")  # lands, then the response is lost
        with pytest.raises(DeltaLogError, match="injected fault"):
            storage.read_bytes(target)
        assert storage.read_bytes(target) == b"one"
    assert os.path.exists(storage.join("b")) and plan.counts == Counter(write=2, read=2)
    with faults.injecting(FaultPlan([Fault("write", 1, "truncate", fraction=0.25)])):
        with pytest.raises(OSError), storage.fs.open(storage.join("s.bin"), "wb") as fh:
            fh.write(b"x" * 100)
    assert os.path.getsize(storage.join("s.bin")) == 25, "a truncated stream leaves a partial file"
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".faulty-tmp")], "no temp file is left behind"


def test_kill_after_a_call_that_raises_still_kills(tmp_path) -> None:
    """A kill planned right after a call happens even when the call answered with an error.

    The crash tests draw their kill points from every call a clean run counts, and a clean
    vacuum reads ``_last_vacuum_info`` before it exists (FileNotFoundError): ``kill_after`` at
    that read used to let the child run on and finish.
    """
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {os.path.dirname(faults.__file__)!r})
        import faults
        from deltalog.storage.filesystem import Storage

        storage = Storage(faults.uri({str(tmp_path)!r}))
        faults.activate(faults.FaultPlan([faults.Fault("read", 2, "kill_after")]))
        for name in ("first", "second"):
            try:
                storage.read_bytes(storage.join("_delta_log", name))
            except FileNotFoundError:
                print("survived", name, flush=True)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, f"exit code {proc.returncode}: {proc.stdout}{proc.stderr}"
    assert proc.stdout.split() == ["survived", "first"], "killed right after the second read, not before"


# --- regressions found by the sweep ------------------------------------------------------------------


def test_a_commit_whose_response_is_lost_reports_the_version_it_landed_at(tmp_path) -> None:
    """The version file was written but the store's answer was lost: the commit succeeded, once."""
    from reliability_support import rows

    from deltalog import DeltaTable
    from deltalog.commit.transaction import Transaction
    from helpers import make_table, write_data_file

    make_table(str(tmp_path))
    add = write_data_file(str(tmp_path), rows(3))
    table = DeltaTable(faults.uri(str(tmp_path)))
    plan = FaultPlan([Fault("write", 1, "fail_after", match="_delta_log/")])
    with faults.injecting(plan):
        txn = Transaction(table.storage, table.snapshot(), operation="WRITE", run_hooks=False)
        txn.add([add])
        result = txn.commit()
    assert plan.injected and result.version == 1 and not result.noop
    assert sorted(DeltaTable(str(tmp_path)).list_log().commits) == [0, 1]
    assert DeltaTable(str(tmp_path)).snapshot().file_paths() == [add["path"]]


def test_compaction_keeps_its_new_files_when_its_commit_landed_unseen(templates) -> None:
    """Before the fix, a lost commit response made compaction delete the files the landed commit references."""
    from reliability_support import check_table, run_operation

    from deltalog import DeltaTable
    from deltalog.errors import CommitOutcomeUnknownError

    path, info = templates.copy("compaction", "regression-lost-response")
    landed = DeltaTable(path).version() + 1
    version_file = f"_delta_log/{landed:020d}.json"
    # The commit lands, its response is lost, and reading it back fails too: the outcome is unknown.
    plan = FaultPlan(
        [Fault("write", 1, "fail_after", match=version_file), Fault("read", 1, "fail", match=version_file)]
    )
    with faults.injecting(plan), pytest.raises(CommitOutcomeUnknownError):
        run_operation("compaction", path, info)
    assert len(plan.injected) == 2 and DeltaTable(path).version() == landed
    check_table(path, lambda latest: list(range(latest + 1)), info["rows"], SUITE, "an unknown commit outcome")


def test_convert_reports_an_unreadable_footer_as_a_storage_failure_not_as_bad_parquet(templates) -> None:
    """Before the fix, a failed footer read (a network error) said the file "is not a readable Parquet file".

    That error is not retryable and blames the data; a storage failure is retryable and the directory
    stays plain Parquet, which a rerun converts.
    """
    from reliability_support import check_convert, done_convert, run_operation

    from deltalog.errors import StorageError

    path, info = templates.copy("convert", "regression-footer-read")
    plan = FaultPlan([Fault("read", 2, "fail", match=".parquet")])
    with faults.injecting(plan), pytest.raises(StorageError, match="cannot read the footer of part=") as caught:
        run_operation("convert", path, info)
    assert plan.injected and "not a readable Parquet" not in str(caught.value)
    check_convert(path, info, SUITE, "a failed footer read")
    assert not os.path.exists(os.path.join(path, "_delta_log", f"{0:020d}.json"))
    run_operation("convert", path, info, faulty=False)
    done_convert(path, info)
