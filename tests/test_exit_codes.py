"""Issue 13 items 11 and 12: the exit-code table in docs/cli.md is the truth, and the CLI always exits with it.

* The table is checked against the code: every deltalog error class maps, through the
  nearest class the table names, to the row of its own ``exit_code``.
* Real runs (a success, a refusal, a protocol refusal, bad input) exit with the row the
  table gives them; the README and docs/vacuum.md promise the same.
* The console script exits with its own status even when interpreter teardown would
  abort (pyarrow's threads made ``cleanup-log`` exit 134 about once in 30 runs).
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from deltalog.cli import main
from deltalog.errors import DeltaLogError
from helpers import append, make_table, rows
from vacuum_helpers import commit_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Modules that define DeltaLogError subclasses (the walk below finds them once imported).
ERROR_MODULES = ("deltalog.errors", "deltalog.commit.conflicts", "deltalog.vacuuming.plan")


def exit_table() -> dict[int, set[str]]:
    """{exit code: class names in its 'raised as' column} from the one table in docs/cli.md."""
    text = open(os.path.join(ROOT, "docs", "cli.md")).read()
    out: dict[int, set[str]] = {}
    for line in text.splitlines():
        m = re.match(r"\|\s*(\d+)\s*\|(.*)\|\s*$", line)
        if m:
            out[int(m.group(1))] = set(re.findall(r"`(\w+)`", m.group(2).split("|")[-1]))
    return out


def all_error_classes() -> list[type]:
    for name in ERROR_MODULES:
        importlib.import_module(name)
    seen, todo = [], [DeltaLogError]
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo.extend(cls.__subclasses__())
    return seen


def test_the_table_has_the_documented_codes():
    table = exit_table()
    assert set(table) == {0, 1, 2, 3, 4, 130}


def test_every_error_class_exits_with_the_row_that_names_it_or_its_nearest_ancestor():
    table = exit_table()
    row_of = {name: code for code, names in table.items() for name in names}
    classes = all_error_classes()
    assert {c.__name__ for c in classes} >= set(row_of) - {"KeyboardInterrupt"}, "the table names a class that is gone"
    for cls in classes:
        listed = next(base for base in cls.__mro__ if base.__name__ in row_of)
        assert cls.exit_code == row_of[listed.__name__], (cls.__name__, listed.__name__, cls.exit_code)


def test_readme_and_vacuum_doc_promise_the_same_codes():
    readme = open(os.path.join(ROOT, "README.md")).read()
    vacuum_doc = open(os.path.join(ROOT, "docs", "vacuum.md")).read()
    assert "exit 2 for bad input" in readme and "1 for a refused" in readme
    assert "1 for a refusal" in vacuum_doc and "an unsupported protocol feature" in vacuum_doc
    assert "docs/cli.md" in readme


def _future_feature(path: str) -> None:
    """Rewrite version 0's protocol to need a writer feature deltalog does not implement."""
    v0 = commit_path(path, 0)
    actions = [json.loads(line) for line in open(v0) if line.strip()]
    for a in actions:
        if "protocol" in a:
            a["protocol"] = {
                "minReaderVersion": 1,
                "minWriterVersion": 7,
                "writerFeatures": ["someFutureFeature"],
            }
    with open(v0, "w") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")


def test_real_runs_exit_with_the_table_codes(tmp_path, capsys):
    table = exit_table()
    path = str(tmp_path / "t")
    append(make_table(path), rows(2))
    cases = [
        (["snapshot", path], 0),
        (["manifest", path, "--full", "--dry-run"], 0),
        (["vacuum", path, "--retention-hours", "0"], 1),  # short retention: a refusal
        (["vacuum", path, "--retention-hours", "-1"], 2),  # bad input
        (["snapshot", str(tmp_path / "nothing")], 2),  # not a table
        (["vacuum", path, "--allow-short-retention", "--retention-hours", "0", "--max-workers", "0"], 2),
    ]
    for args, code in cases:
        assert main(args) == code, args
        assert code in table
    err = capsys.readouterr().err
    assert "refusing to vacuum with a retention of 0 hours" in err

    other = str(tmp_path / "future")
    append(make_table(other), rows(2))
    _future_feature(other)
    for args in (["vacuum", other, "--dry-run"], ["checkpoint", other], ["cleanup-log", other, "--dry-run"]):
        assert main(args) == 1, args  # a protocol refusal is a refusal, as the docs promise
        assert "someFutureFeature" in capsys.readouterr().err


DELTALOG = os.path.join(os.path.dirname(sys.executable), "deltalog")


def _console(args: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([DELTALOG, *args], capture_output=True, text=True, timeout=120, **kw)


def test_console_script_exits_with_its_status_even_if_teardown_aborts(tmp_path):
    """A teardown crash is simulated deterministically: an atexit handler that aborts (exit 134)."""
    path = str(tmp_path / "t")
    append(make_table(path), rows(2))
    code = (
        "import atexit, os, sys\n"
        "atexit.register(os.abort)\n"
        "from deltalog.cli import run\n"
        "sys.argv[1:] = {args!r}\n"
        "run()\n"
    )
    for args, want in ((["cleanup-log", path], 0), (["snapshot", str(tmp_path / "none")], 2), (["--version"], 0)):
        p = subprocess.run([sys.executable, "-c", code.format(args=args)], capture_output=True, text=True, timeout=120)
        assert p.returncode == want, (args, p.returncode, p.stderr)
    p = subprocess.run([sys.executable, "-c", code.format(args=["cleanup-log", path])], capture_output=True, text=True)
    assert "nothing deleted" in p.stdout or "deleted" in p.stdout  # the output was flushed before exiting


def _inventory(table: str, folder: str) -> None:
    """The table's files as a storage inventory: a folder of two Parquet files (and a ``_SUCCESS`` marker)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    found = []
    for here, _, names in os.walk(table):
        for name in names:
            full = os.path.join(here, name)
            st = os.stat(full)
            found.append((os.path.relpath(full, table), st.st_size, int(st.st_mtime * 1000)))
    os.makedirs(folder)
    half = len(found) // 2
    for i, part in enumerate((found[:half], found[half:])):
        pq.write_table(
            pa.table({n: [f[k] for f in part] for k, n in enumerate(("path", "size", "modificationTime"))}),
            os.path.join(folder, f"part-{i}.parquet"),
        )
    open(os.path.join(folder, "_SUCCESS"), "w").close()


@pytest.mark.slow
def test_commands_exit_with_their_documented_status_every_time(tmp_path):
    """Every kind of command, run again and again in its own process: the status docs/cli.md gives it, each
    time, its output whole, never an abort (pyarrow's threads made ``cleanup-log`` exit 134 about once in 30
    runs; reading a Python file through a dataset scan aborts about one process in twenty here)."""
    from deltalog.journal import OperationSpan, RunContext, append_rows, make_row

    path = str(tmp_path / "t")
    table = make_table(path)
    for i in range(4):
        append(table, rows(2, start=2 * i))
    _inventory(path, str(tmp_path / "inventory"))
    history = str(tmp_path / "history")
    now = dt.datetime.now(dt.UTC)
    span = OperationSpan(RunContext(), table.uri, "measure", now, now)
    append_rows(history, [make_row(span, "done")])
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"defaults": {"max_small_files": 1}}))
    cases = [  # (arguments, status, what stdout must hold)
        (["snapshot", path, "--json"], 0, '"version": 4'),
        (["health", path, "--json"], 0, '"num_files": 4'),
        (["history", path], 0, "WRITE"),
        (["cleanup-log", path], 0, "nothing deleted"),
        (["vacuum", path, "--dry-run", "--inventory", str(tmp_path / "inventory")], 0, "0 files"),
        (["objectives", path, "--settings", str(settings), "--history", history, "--json"], 4, '"met": false'),
        (["vacuum", path, "--retention-hours", "0"], 1, ""),
        (["snapshot", str(tmp_path / "nothing")], 2, ""),
    ]
    runs = [case for _ in range(3) for case in cases]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda case: (case, _console(case[0])), runs))
    bad = [
        (args, p.returncode, p.stderr[-300:])
        for (args, status, shows), p in results
        if p.returncode != status or shows not in p.stdout or "terminate called" in p.stderr
    ]
    assert not bad, f"{len(bad)} of {len(runs)} runs: {bad[:3]}"
    for (_, status, _), p in results:  # a failure says one line, never a traceback
        assert (p.stderr.count("\n"), p.stderr.startswith("error: ")) == ((1, True) if status else (0, False)), p.stderr


def maintain_table_codes() -> dict[int, str]:
    """{exit code: its 'when' text} from the `deltalog maintain` table of docs/cli.md."""
    text = open(os.path.join(ROOT, "docs", "cli.md")).read().split("## `deltalog maintain`", 1)[1].split("\n## ")[0]
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| `(\d+)` \| ([^|]+)\|", text, re.M)}


def test_maintain_exits_with_its_worst_table(tmp_path, capsys):
    """Issue 28: a fleet run with a failed table exits non-zero; a refused one is refused, not failed."""
    from fleet_helpers import healthy_table, refused_protocol_table, small_files_table

    codes = maintain_table_codes()
    assert set(codes) == {0, 1, 2} and "refused" in codes[1] and "failed" in codes[2]
    lake = tmp_path / "lake"
    small_files_table(str(lake / "a"))
    healthy_table(str(lake / "b"))
    assert main(["maintain", "--root", str(lake), "--json"]) == 0
    assert not [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]

    refused_protocol_table(str(lake / "c"))
    small_files_table(str(lake / "a2"))
    assert main(["maintain", "--root", str(lake), "--json"]) == 1
    out = capsys.readouterr()
    statuses = {t["uri"].rsplit("/", 1)[-1]: t["status"] for t in json.loads(out.out)["tables"]}
    assert statuses == {"a2": "done", "c": "refused"} and "1 refused" in out.err and "failed" not in out.err

    broken = small_files_table(str(lake / "d"))
    # Garbage where a data file should be: compaction cannot read it (a missing file is refused instead:
    # the table is missing a file, MissingDataFileError, exit 1).
    with open(os.path.join(broken.storage.root, broken.snapshot().file_paths()[0]), "wb") as fh:
        fh.write(b"not parquet at all")
    assert main(["maintain", "--root", str(lake), "--json"]) == 2
    out = capsys.readouterr()
    statuses = {t["uri"].rsplit("/", 1)[-1]: t["status"] for t in json.loads(out.out)["tables"]}
    assert statuses == {"c": "refused", "d": "failed"}, statuses
    assert "error: not every table was maintained: 1 failed, 1 refused (see the summary)" in out.err.splitlines()
