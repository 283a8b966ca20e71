"""The adversarial sweep's machinery: run one generated input, judge its outcome.

An outcome is *unsafe* when the input made deltalog break a promise: a file a
retained version needs was deleted, the table can no longer be read (by deltalog or
by deltalake), a traceback or internal error reached the user, or the exit code is
not one the exit-code table of docs/cli.md allows for it (0, 1 or 2; 3 means a bug).
Each class of input in ``test_adversarial.py`` counts what it tried and what was
unsafe into the reliability report.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import urllib.parse
from dataclasses import dataclass, field

import deltalake
import pyarrow as pa

from deltalog import DeltaTable
from deltalog.cli import main

#: Exit codes a CLI run may end with (docs/cli.md); 3 (internal error) is a bug.
ALLOWED_EXITS = (0, 1, 2)


@dataclass
class Outcome:
    """What one input did, and the promises it broke (empty: safe)."""

    exit_code: int | None = None
    stderr: str = ""
    unsafe: list[str] = field(default_factory=list)


def live_files(path: str) -> set[str]:
    """Absolute paths of the files the latest version references."""
    snap = DeltaTable(path).snapshot()
    return {os.path.join(path, urllib.parse.unquote(p)) for p in snap.file_paths()}  # log paths are URI-encoded


def log_state(path: str) -> dict[str, float]:
    log = os.path.join(path, "_delta_log")
    return {name: os.path.getmtime(os.path.join(log, name)) for name in os.listdir(log)}


def table_problems(path: str, needed: set[str]) -> list[str]:
    """Files of ``needed`` that are gone, and whether either reader fails on the latest version."""
    problems = [f"live file deleted: {os.path.relpath(f, path)}" for f in sorted(needed) if not os.path.exists(f)]
    try:
        DeltaTable(path).snapshot()
    except Exception as exc:  # noqa: BLE001 - any failure is what this reports
        problems.append(f"deltalog cannot read the table: {type(exc).__name__}: {exc}")
    try:
        read_with_deltalake(path)
    except Exception as exc:  # noqa: BLE001
        problems.append(f"deltalake cannot read the table: {type(exc).__name__}: {exc}")
    return problems


#: How deltalake's pyarrow reader (1.x) misrenders a negative decimal partition value with a
#: fraction: ``-0.01`` as ``'0.-1'``, ``-1.01`` as ``'-1.-1'``. The value in the log is right.
_MISRENDERED_DECIMAL = re.compile(r"The string '-?\d*\.-\d+' is not a valid decimal")


def read_with_deltalake(path: str) -> pa.Table:
    """The latest version of a local table as deltalake reads it: its pyarrow reader, or its SQL
    engine (which parses partition values itself) when the pyarrow reader trips over its own
    misrendering of a negative decimal partition value. Any other failure is raised."""
    table = deltalake.DeltaTable(path)
    try:
        return table.to_pyarrow_table()
    except pa.ArrowInvalid as exc:
        if not _MISRENDERED_DECIMAL.search(str(exc)):
            raise
    return pa.table(deltalake.QueryBuilder().register("t", table).execute("select * from t").read_all())


def run_cli(args: list[str]) -> tuple[int, str, str]:
    """``deltalog ARGS`` in this process: (exit code, stdout, stderr); argparse's exits included."""
    # Streams as a UTF-8 terminal has them: stdout strict, stderr backslash-escaping.
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    texts = []
    for stream in (out, err):
        stream.flush()
        texts.append(stream.buffer.getvalue().decode("utf-8"))
    return code, texts[0], texts[1]


def cli_problems(code: int, stderr: str) -> list[str]:
    """Breaches of the CLI contract: exit code outside the table, tracebacks, not one error line."""
    problems = []
    if code not in ALLOWED_EXITS:
        problems.append(f"exit code {code} is outside the exit-code table")
    if "Traceback" in stderr or "internal error" in stderr:
        problems.append(f"traceback/internal error: {stderr.strip()[-300:]}")
    if code != 0:
        errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
        if len(errors) != 1:
            problems.append(f"expected one 'error: ...' line on stderr, got {len(errors)}: {stderr.strip()[-300:]}")
    return problems


def fresh_copy(pristine: str, workdir: str) -> str:
    if os.path.exists(workdir):
        shutil.rmtree(workdir)
    os.makedirs(workdir)
    path = os.path.join(workdir, "t")
    shutil.copytree(pristine, path, symlinks=True)
    return path
