"""deltalake (delta-rs) as an independent reader, in a child process that cannot abort ours.

``deltalake.DeltaTable(...).to_pyarrow_table()`` scans a pyarrow dataset over a Python
filesystem handler. Arrow's I/O threads can still hold the handler's buffers when the
interpreter finalizes; releasing one then needs the GIL, the thread is torn down, and the
process dies with ``terminate called without an active exception`` (SIGABRT, exit 134) after
printing a correct result: about one process in eight here (the class of apache/arrow#34314; a
backtrace shows ``PyBuffer::~PyBuffer`` in ``ReadRangeCache`` on an I/O thread during
``Py_Finalize``). A main job, a tool or a test whose exit status is checked must not read that
way in its own process.

:func:`deltalake_table` keeps deltalake as the reader (what it reads is the point: a second
implementation of the protocol) and moves the read into a child process that is joined: the
child writes the table as an Arrow IPC file, flushes and closes it, and leaves with
``os._exit(0)``, skipping the interpreter finalization where the abort happens, so its exit
cannot turn a correct result into a failure. The parent takes the result only from a child that
exited 0 and left a complete IPC file (its footer read); a failed read, a crash during the read
or a time-out is an :class:`IsolatedReadError` with the child's stderr, so no real failure is
hidden.

Free of pytest: ``scripts/demo.py`` imports it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import pyarrow as pa

__all__ = ["IsolatedReadError", "deltalake_rows", "deltalake_table"]


class IsolatedReadError(RuntimeError):
    """The child's read failed (its exit status and stderr say how)."""


def deltalake_table(
    uri: str,
    *,
    columns: list[str] | None = None,
    version: int | None = None,
    storage_options: dict[str, str] | None = None,
    timeout: float = 300,
) -> pa.Table:
    """The table at ``uri`` (``version``: that version) as deltalake reads it, read in a child process."""
    spec = {"uri": uri, "columns": columns, "version": version, "storage_options": storage_options}
    with tempfile.TemporaryDirectory(prefix="deltalog-isolated-read-") as scratch:
        out = os.path.join(scratch, "table.arrow")
        try:
            proc = subprocess.run(
                [sys.executable, os.path.abspath(__file__), json.dumps(spec), out],
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise IsolatedReadError(f"deltalake's read of {uri} did not finish in {timeout:.0f} s") from None
        if proc.returncode != 0:
            raise IsolatedReadError(
                f"deltalake's read of {uri} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
            )
        try:
            with pa.memory_map(out) as source:
                return pa.ipc.open_file(source).read_all()
        except (OSError, pa.ArrowInvalid) as exc:
            raise IsolatedReadError(f"deltalake's read of {uri} left no complete result: {exc}") from None


def deltalake_rows(uri: str, **kwargs: Any) -> list[dict[str, Any]]:
    """:func:`deltalake_table` as Python rows."""
    return deltalake_table(uri, **kwargs).to_pylist()


class _NoPandas:
    """pyarrow imports pandas on first use of its dataset module when it is installed (a second of CPU here);
    deltalake's Arrow read needs none of it. A read that did would fail loudly in the child, never silently."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"{name} is left out of the isolated read", name=name)
        return None


def _child(spec_json: str, out: str) -> None:
    """The child: read with deltalake, write the IPC file whole, then leave without finalizing."""
    spec = json.loads(spec_json)
    sys.meta_path.insert(0, _NoPandas())  # type: ignore[arg-type]
    from deltalake import DeltaTable

    table = DeltaTable(spec["uri"], version=spec["version"], storage_options=spec["storage_options"])
    data = table.to_pyarrow_table(columns=spec["columns"])
    with pa.OSFile(out, "wb") as sink, pa.ipc.new_file(sink, data.schema) as writer:
        writer.write_table(data)


if __name__ == "__main__":
    try:
        _child(sys.argv[1], sys.argv[2])
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as the child's failure
        import traceback

        traceback.print_exception(exc)
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no interpreter finalization: Arrow's I/O threads cannot abort the exit
