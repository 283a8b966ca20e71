"""``--history URI``: the commands that change a table append a row per operation to the maintenance history.

The option (default: the ``DELTALOG_HISTORY`` environment variable) is added to the
commands that run an operation: ``compact``, ``convert``, ``commit``, ``checkpoint``,
``cleanup-log``, ``manifest``, ``vacuum`` and ``maintain``. The history is created or
checked before any work (a typo in the location fails the command before it touches
the table); dry runs and plans change nothing and record nothing. Run by an Airflow
task (a BashOperator passes ``AIRFLOW_CTX_*``), the rows carry the task's DAG, run,
task and try.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from deltalog.cli import key_values
from deltalog.errors import HistoryWriteError
from deltalog.journal import HistoryRecorder, RunContext
from deltalog.journal.record import OperationDraft

__all__ = ["ENV", "add_history_option", "recorded", "recorder_for"]

#: The environment variable naming the history when ``--history`` is not given.
ENV = "DELTALOG_HISTORY"


def add_history_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--history",
        metavar="URI",
        help=f"append what this command did to the maintenance history table at URI (created on first use; "
        f"default: ${ENV}); see docs/history.md",
    )
    p.add_argument(
        "--history-storage-option",
        action="append",
        metavar="KEY=VALUE",
        help="storage option of the history (repeatable; default: the --storage-option values)",
    )


def recorder_for(args: argparse.Namespace, *, prepare: bool = True) -> HistoryRecorder | None:
    """The command's recorder (None without ``--history`` or ``$DELTALOG_HISTORY``), its history checked
    (``prepare=False``: only read, as a dry run does: nothing is created)."""
    uri = getattr(args, "history", None) or os.environ.get(ENV) or None
    if uri is None:
        return None
    given = key_values(getattr(args, "history_storage_option", None), "--history-storage-option")
    options = given or args.storage_options
    recorder = HistoryRecorder(uri, storage_options=options, context=RunContext.from_environment())
    if prepare:
        recorder.prepare()
    return recorder


@contextmanager
def recorded(
    args: argparse.Namespace,
    table: str,
    operation: str,
    *,
    engine: str | None = None,
    skip: bool = False,
    measure_before: bool = True,
) -> Iterator[Any]:
    """Run the block as ``operation`` on ``table``, recorded when the command has a history (set ``.result``).

    ``skip``: a dry run or a plan (nothing to record).
    """
    recorder = None if skip else recorder_for(args)
    if recorder is None:
        yield OperationDraft(engine)
        return
    try:
        with recorder.operation(
            table, operation, engine=engine, storage_options=args.storage_options, measure_before=measure_before
        ) as op:
            yield op
    except HistoryWriteError as exc:
        raise HistoryWriteError(
            f"the {operation} of {table} is done, but the history row was not written: {exc}"
        ) from exc
