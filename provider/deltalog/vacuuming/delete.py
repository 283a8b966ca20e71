"""Deleting files with a bounded pool of workers, and removing the directories left empty.

Work is handed out in chunks (one bulk ``DeleteObjects`` request per chunk on object
stores); the first failure stops every worker, and the counters say how far the
run got, so ``VACUUM END`` can record it and a rerun finishes the job.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

from deltalog.storage.filesystem import Storage
from deltalog.vacuuming.links import LinkGuard
from deltalog.write_checks.hidden_paths import HiddenRule

__all__ = ["Progress", "ancestors", "delete_files", "remove_empty_dirs"]

log = logging.getLogger(__name__)

#: Files per unit of work handed to a delete worker (object stores: one bulk request).
LOCAL_CHUNK = 256
REMOTE_CHUNK = 1000
PROGRESS_EVERY_S = 5.0


class Progress:
    """Thread-safe counters with a log line every few seconds."""

    def __init__(self, total: int, cancel: threading.Event | None = None) -> None:
        self.total = total
        #: The caller's cancel event (e.g. an Airflow on_kill): workers stop at the next file or chunk.
        self.cancel = cancel
        self.deleted = 0
        self.gone = 0
        #: Files not deleted because they turned out to be links or to lie behind one (see deltalog.vacuuming.links).
        self.refused = 0
        self.lock = threading.Lock()
        self.last = time.monotonic()
        #: Set by the first failing worker so the others stop instead of deleting on.
        self.stop = threading.Event()

    def halted(self) -> bool:
        """Whether workers should stop: a worker failed, or the caller cancelled."""
        return self.stop.is_set() or (self.cancel is not None and self.cancel.is_set())

    @property
    def cancelled(self) -> bool:
        """The caller cancelled before every file was handled."""
        done = self.deleted + self.gone + self.refused
        return self.cancel is not None and self.cancel.is_set() and done < self.total

    def add(self, deleted: int, gone: int, refused: int = 0) -> None:
        with self.lock:
            self.deleted += deleted
            self.gone += gone
            self.refused += refused
            now = time.monotonic()
            if now - self.last >= PROGRESS_EVERY_S:
                self.last = now
                log.info("vacuum: %d of %d files deleted (%d already gone)", self.deleted, self.total, self.gone)


def _unlink(path: str) -> None:
    os.unlink(path)


def _delete_chunk_local(guard: LinkGuard, chunk: list[str], progress: Progress) -> None:
    """Delete each file after proving it a regular file reached from the real root without a link."""
    deleted = gone = refused = 0
    try:
        for rel in chunk:
            if progress.halted():
                return
            status, _ = guard.check(rel)
            if status == LinkGuard.GONE:
                gone += 1
                continue
            if status == LinkGuard.LINK:
                refused += 1
                continue
            try:
                _unlink(guard.path(rel))
                deleted += 1
            except FileNotFoundError:
                gone += 1
    except BaseException:
        progress.stop.set()
        raise
    finally:
        progress.add(deleted, gone, refused)


def _delete_chunk_remote(storage: Storage, chunk: list[str], progress: Progress) -> None:
    if progress.halted():
        return
    try:
        storage.fs.rm([storage.join(rel) for rel in chunk])
    except FileNotFoundError:
        pass
    except BaseException:
        progress.stop.set()
        raise
    progress.add(len(chunk), 0)


def delete_files(storage: Storage, paths: list[str], max_workers: int, progress: Progress) -> None:
    """Delete table-relative ``paths`` with at most ``max_workers`` concurrent workers.

    Stops at the first failure (the exception propagates once the running chunks
    have finished); ``progress`` says how far it got either way.
    """
    if not paths:
        return
    size = LOCAL_CHUNK if storage.is_local else REMOTE_CHUNK
    chunks = [paths[i : i + size] for i in range(0, len(paths), size)]
    work: Callable[[list[str]], None]
    if storage.is_local:
        guard = LinkGuard(storage)
        work = lambda c: _delete_chunk_local(guard, c, progress)  # noqa: E731
    else:
        work = lambda c: _delete_chunk_remote(storage, c, progress)  # noqa: E731
    workers = max(1, min(max_workers, len(chunks)))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vacuum-delete")
    try:
        futures = [pool.submit(work, c) for c in chunks]
        wait(futures, return_when=FIRST_EXCEPTION)
        for f in futures:
            if f.done() and f.exception() is not None:
                for other in futures:
                    other.cancel()
                raise f.exception()  # type: ignore[misc]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def remove_empty_dirs(storage: Storage, dirs: list[str], rule: HiddenRule) -> int:
    """Remove the directories that are empty now, deepest first; a non-empty one is left alone."""
    if not storage.is_local:
        return 0  # object stores have no directories to leave behind
    removed = 0
    for d in sorted(set(dirs), key=lambda p: (-p.count("/"), p)):
        if not d or rule.hidden_path(d):
            continue
        try:
            os.rmdir(os.path.join(storage.root, d))
            removed += 1
        except OSError:
            continue  # not empty (a hidden .crc, a new file) or already gone
    return removed


def ancestors(paths: list[str]) -> list[str]:
    out: set[str] = set()
    for p in paths:
        d = p.rpartition("/")[0]
        while d and d not in out:
            out.add(d)
            d = d.rpartition("/")[0]
    return list(out)
