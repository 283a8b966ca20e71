"""The local compaction engine: rewrite bins with pyarrow, several bins at once.

Bins run in a thread pool (``max_workers``, default the cores); each is rewritten by a
:class:`~deltalog.compaction.bin_writer.BinWriter` (or, for a Z-order or a clustering,
the curve writer of :mod:`deltalog.compaction.zorder_writer`). Once fewer bins than cores
are left (one bin, or the last ones), a bin's reading moves to a thread of its own, so
both cores stay busy to the end: pyarrow releases the GIL while decoding, encoding and
compressing. A failing bin is reported and does not stop the others, except a bin whose
input file is missing: the table is missing files, any further bin would most likely fail
the same way (thousands of bins read in vain), so no further bin is started.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from deltalog.compaction.bin_writer import BinWriter, DictionaryChoice
from deltalog.compaction.engine_output import BinOutput, BinSkipped
from deltalog.compaction.options import LocalOptions
from deltalog.compaction.plan import Bin, CompactionPlan
from deltalog.compaction.zorder_writer import ZOrderWriter
from deltalog.errors import DeltaLogError, MissingDataFileError
from deltalog.storage.filesystem import Storage

log = logging.getLogger(__name__)


def run_local(
    storage: Storage,
    plan: CompactionPlan,
    bins: list[Bin] | None = None,
    options: LocalOptions | None = None,
    *,
    cancel: threading.Event | None = None,
) -> tuple[list[BinOutput], list[BinSkipped]]:
    """Rewrite ``bins`` (default: all of the plan's) in parallel; a failing bin does not stop the others.

    Once ``cancel`` is set, bins not started yet are skipped (``aborted``); those already
    being rewritten finish, so their files can still be committed or discarded whole. A bin
    whose input is missing is skipped as ``missing`` and no bin starts after it (the bins
    not started are ``aborted``, naming it).
    """
    options = options or LocalOptions()
    todo = plan.bins if bins is None else bins
    if not todo:
        return [], []
    cores = options.max_workers or os.cpu_count() or 2
    workers = max(1, min(len(todo), cores))
    unfinished = [len(todo)]  # bins not yet done; fewer than the cores: a core is idle
    lock = threading.Lock()

    def core_idle() -> bool:
        return unfinished[0] < cores

    dictionaries = DictionaryChoice()

    writer_class = ZOrderWriter if plan.zorder_by or plan.clustering is not None else BinWriter

    missing: list[int] = []  # the bin whose input was found missing first

    def one(b: Bin) -> BinOutput | BinSkipped:
        if cancel is not None and cancel.is_set():
            return BinSkipped(b.id, "cancelled before this bin was rewritten", "aborted")
        if missing:
            return BinSkipped(b.id, f"not attempted: bin {missing[0]}'s input is missing", "aborted")
        try:
            return writer_class(storage, plan, options, workers, core_idle, dictionaries).rewrite(b)
        except MissingDataFileError as exc:
            with lock:
                missing.append(b.id)
            log.warning("bin %d was not rewritten: %s; no further bin is started", b.id, exc)
            return BinSkipped(b.id, str(exc), "missing", [f.path for f in b.files])
        except DeltaLogError as exc:
            log.info("bin %d was not rewritten: %s", b.id, exc)  # reported in the result
            return BinSkipped(b.id, f"rewrite failed: {exc}", "error", [f.path for f in b.files])
        except Exception as exc:  # noqa: BLE001 - one bad bin must not lose the others' work
            log.info("bin %d was not rewritten: %s", b.id, exc, exc_info=log.isEnabledFor(logging.DEBUG))
            return BinSkipped(b.id, f"rewrite failed: {type(exc).__name__}: {exc}", "error", [f.path for f in b.files])
        finally:
            with lock:
                unfinished[0] -= 1

    if workers == 1:
        results = [one(b) for b in todo]
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="deltalog-compact") as pool:
            results = list(pool.map(one, todo))
    outputs = [r for r in results if isinstance(r, BinOutput)]
    skipped = [r for r in results if isinstance(r, BinSkipped)]
    return outputs, skipped


__all__ = ["run_local"]
