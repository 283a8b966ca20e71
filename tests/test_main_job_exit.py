"""Issue 41 item 1: the main job (``scripts/demo.py``) exits 0 every time it succeeds.

It printed a whole, correct report and then died with ``terminate called without an active
exception`` (exit 134) in 2 of 5 runs: deltalake's ``to_pyarrow_table()`` in its own process left
Arrow I/O threads that abort the interpreter at exit (``tests/isolated_reads.py`` says how). The
demo keeps deltalake as its independent reader and reads in a joined child process instead.

Checked here without Airflow or Spark: the demo's read-back path (the rows and distinct ids it
checks after maintenance, the maintenance history it prints) run in fresh processes, each exiting
0 with the right answer and never importing deltalake itself; and a read the child cannot do is
the demo's one-line error, not a result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest

from helpers import append, make_table

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READ_BACK = """
import json, sys
sys.path[:0] = [{scripts!r}, {tests!r}]
import demo
rows, distinct = demo.deltalake_rows({table!r})
history = demo.deltalake_read({history!r}).to_pylist()
print(json.dumps({{"rows": rows, "distinct": distinct, "history": len(history),
                  "operations": sorted(r["operation"] for r in history),
                  "deltalake_in_this_process": "deltalake" in sys.modules}}))
"""


@pytest.fixture(scope="module")
def demo_tables(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A small events table (several files, as the demo's) and a maintenance history with two rows."""
    import datetime as dt

    from deltalog.journal import OperationSpan, RunContext, append_rows, make_row

    root = tmp_path_factory.mktemp("main_job")
    table = make_table(str(root / "events"), schema=pa.schema([("event_id", pa.int64())]))
    for i in range(6):
        append(table, pa.table({"event_id": pa.array(range(i * 50, i * 50 + 50), pa.int64())}), run_hooks=False)
    history = str(root / "_deltalog" / "history")
    now = dt.datetime.now(dt.UTC)
    context = RunContext()
    append_rows(
        history, [make_row(OperationSpan(context, table.uri, op, now, now), "done") for op in ("measure", "vacuum")]
    )
    return table.uri, history


def test_the_demos_read_back_exits_0_in_fresh_processes(demo_tables: tuple[str, str]) -> None:
    table, history = demo_tables
    code = READ_BACK.format(
        scripts=os.path.join(REPO, "scripts"), tests=os.path.join(REPO, "tests"), table=table, history=history
    )

    def once(_: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(once, range(8)))
    bad = [(p.returncode, p.stderr[-500:]) for p in runs if p.returncode != 0 or "terminate called" in p.stderr]
    assert not bad, f"{len(bad)} of {len(runs)} runs did not exit 0: {bad[:2]}"
    for p in runs:
        got = json.loads(p.stdout.strip().splitlines()[-1])
        assert (got["rows"], got["distinct"], got["history"]) == (300, 300, 2)
        assert got["operations"] == ["measure", "vacuum"]
        assert got["deltalake_in_this_process"] is False  # the demo's own process never scans with deltalake


def test_a_read_the_child_cannot_do_is_the_demos_error(tmp_path) -> None:
    sys.path[:0] = [os.path.join(REPO, "scripts")]
    try:
        import demo
    finally:
        sys.path.remove(os.path.join(REPO, "scripts"))
    with pytest.raises(demo.DemoError, match=r"deltalake's read of .*nothing failed \(exit 1\)"):
        demo.deltalake_rows(str(tmp_path / "nothing"))
