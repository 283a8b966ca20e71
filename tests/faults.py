"""A fault-injecting fsspec filesystem: ``faulty:///abs/path`` over a local directory.

Why: deltalog treats every non-``file`` protocol as remote and goes through
fsspec (the code paths S3 uses), so a table opened as ``faulty:///tmp/t`` runs
those paths over a plain local directory that ``deltalake`` can read directly
(``/tmp/t``). A :class:`FaultPlan` then makes the Nth write, delete, list, read
or stat fail, lose its response, truncate, stall, or kill the process.

Semantics modelled on an object store (what the remote code paths are written for):

- ``pipe_file`` and ``put_file`` are atomic (temp file, then ``os.replace``);
  ``pipe_file(mode="create")`` is an atomic create-if-absent (temp file, then
  ``os.link``; FileExistsError when the target exists), so the class declares
  ``deltalog_atomic_create`` and ``Storage.put_if_absent`` uses it.
- Writes create missing parent directories (object stores have none).
- ``rm([...])`` is a bulk delete: paths already gone are skipped (DeleteObjects).
- Streamed writes (``open(path, "wb")``) are *not* atomic: the bytes land at
  the final path on close, so a ``truncate`` fault leaves a partial file there,
  the harshest case a non-atomic store can produce.

Counting: only the outermost call counts (``find`` listing through ``ls``,
``exists`` through ``info`` are one operation each), per thread.

Actions: ``fail`` (OSError before anything happens), ``fail_after`` (the
operation happens, then OSError: a lost response), ``truncate`` (streamed
writes keep only part of their bytes, then OSError; other writes fail
mid-upload, leaving nothing), ``slow`` (sleep, then proceed), ``kill``,
``kill_after`` and ``kill_during`` (SIGKILL before, after, or half-way
through the operation, "after" whether the operation returned or raised, e.g.
a read of a missing file; used by crash tests in subprocesses), ``hold``
(create the signal file ``announce``, then block before the operation until
every file in ``until`` exists: signals between processes, so a race test
puts other actors' commits exactly between this process's read and its
write, whatever the machine's load).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

PROTOCOL = "faulty"
KINDS = ("write", "delete", "list", "read", "stat")
ACTIONS = ("fail", "fail_after", "truncate", "slow", "kill", "kill_after", "kill_during", "hold")


class InjectedFault(OSError):
    """The error a planned fault raises (an OSError, as a network or disk failure would)."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EIO, message)


@dataclass
class Fault:
    """Hit the ``nth`` (1-based) operation of ``kind`` whose path contains ``match``.

    ``slow`` with ``every=True`` delays every such operation from the nth on.
    ``fraction`` is the share of bytes a truncated or killed streamed write keeps.
    ``hold`` creates ``announce`` (if set), then waits (at most ``timeout`` seconds, then fails)
    until every path in ``until`` exists.
    """

    kind: str
    nth: int
    action: str = "fail"
    match: str | None = None
    delay: float = 0.05
    every: bool = False
    fraction: float = 0.5
    until: tuple[str, ...] = ()
    announce: str | None = None
    timeout: float = 120.0
    seen: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown operation kind {self.kind!r}")
        if self.action not in ACTIONS:
            raise ValueError(f"unknown fault action {self.action!r}")
        if self.nth < 1:
            raise ValueError("nth counts from 1")
        self.until = tuple(self.until)
        if self.action == "hold" and not self.until:
            raise ValueError("a hold needs the signal files it waits for (until)")

    def describe(self) -> str:
        where = f" on paths containing {self.match!r}" if self.match else ""
        return f"{self.action} at {self.kind} #{self.nth}{where}"


@dataclass
class FaultPlan:
    """Faults to inject, and what happened: operation counts per kind and faults triggered."""

    faults: list[Fault] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    injected: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def hit(self, kind: str, path: str) -> Fault | None:
        """Count one operation; return the fault it triggers, if any."""
        with self._lock:
            self.counts[kind] += 1
            chosen = None
            for f in self.faults:
                if f.kind != kind or (f.match and f.match not in path):
                    continue
                f.seen += 1
                if chosen is None and (f.seen == f.nth or (f.every and f.seen >= f.nth)):
                    chosen = f
            if chosen is not None and chosen.action not in ("slow", "hold"):
                self.injected.append(
                    {"kind": kind, "nth": chosen.nth, "action": chosen.action, "path": path, "count": self.counts[kind]}
                )
            return chosen


_plan: FaultPlan | None = None
_local = threading.local()


def current_plan() -> FaultPlan | None:
    return _plan


@contextlib.contextmanager
def injecting(plan: FaultPlan) -> Iterator[FaultPlan]:
    """Make ``plan`` the active plan of this process for the duration of the block."""
    global _plan
    previous, _plan = _plan, plan
    try:
        yield plan
    finally:
        _plan = previous


def activate(plan: FaultPlan | None) -> None:
    """Set the active plan for the rest of the process (subprocess workers)."""
    global _plan
    _plan = plan


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10)  # never reached: SIGKILL cannot be caught


def _hold(fault: Fault, path: str) -> None:
    """Announce the hold, then block until every file of ``fault.until`` exists (InjectedFault after the timeout)."""
    if fault.announce:
        open(fault.announce, "w").close()
    deadline = time.monotonic() + fault.timeout
    while not all(os.path.exists(p) for p in fault.until):
        if time.monotonic() > deadline:
            missing = [p for p in fault.until if not os.path.exists(p)]
            raise InjectedFault(f"{fault.describe()}: no signal {missing} after {fault.timeout} s ({path})")
        time.sleep(0.002)


def _before(fault: Fault | None, kind: str, path: str) -> None:
    if fault is None:
        return
    if fault.action == "slow":
        time.sleep(fault.delay)
    elif fault.action == "hold":
        _hold(fault, path)
    elif fault.action == "kill":
        _die()
    elif fault.action == "fail" or (fault.action == "truncate" and kind != "write"):
        raise InjectedFault(f"injected fault: {fault.describe()} ({path})")
    elif fault.action == "fail_after" and kind in ("list", "read", "stat"):
        raise InjectedFault(f"injected fault: {fault.describe()} ({path})")


def _after(fault: Fault | None, path: str) -> None:
    if fault is None:
        return
    if fault.action == "fail_after":
        raise InjectedFault(f"injected fault (response lost): {fault.describe()} ({path})")
    if fault.action == "kill_after":
        _die()


class _StreamWriter(io.RawIOBase):
    """A file opened for writing: bytes land at the final path on close (not atomically)."""

    def __init__(self, path: str, fault: Fault | None) -> None:
        super().__init__()
        self.path = path
        self.fault = fault
        self.buf = io.BytesIO()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return self.buf.write(data)

    def tell(self) -> int:
        return self.buf.tell()

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        data = self.buf.getvalue()
        fault = self.fault
        keep = len(data)
        if fault is not None and fault.action in ("truncate", "kill_during"):
            keep = int(len(data) * fault.fraction)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path, "wb") as fh:
            fh.write(data[:keep])
        if fault is not None and fault.action == "kill_during":
            _die()
        if fault is not None and fault.action == "truncate":
            raise InjectedFault(
                f"injected fault: {fault.describe()}: {keep} of {len(data)} bytes written ({self.path})"
            )
        _after(fault, self.path)


class FaultyFileSystem(LocalFileSystem):
    """LocalFileSystem under the ``faulty`` protocol, every operation counted and open to faults."""

    protocol = (PROTOCOL,)
    root_marker = "/"
    #: ``pipe_file(mode="create")`` is an atomic create-if-absent (see the module docstring).
    deltalog_atomic_create = True

    # --- counting --------------------------------------------------------------------

    @contextlib.contextmanager
    def _op(self, kind: str, path: Any) -> Iterator[Fault | None]:
        depth = getattr(_local, "depth", 0)
        plan = _plan
        if depth or plan is None:
            _local.depth = depth + 1
            try:
                yield None
            finally:
                _local.depth = depth
            return
        p = str(path)
        fault = plan.hit(kind, p)
        _local.depth = depth + 1
        try:
            _before(fault, kind, p)
            yield fault
        except BaseException:
            # A call that answered with an error (a read of a missing optional file: FileNotFoundError)
            # still happened and was counted: a kill planned right after it happens all the same.
            if fault is not None and fault.action == "kill_after":
                _die()
            raise
        finally:
            _local.depth = depth
        if kind != "write" or fault is None or fault.action not in ("truncate", "kill_during"):
            _after(fault, p)

    # --- list --------------------------------------------------------------------------

    def ls(self, path, detail=False, **kwargs):
        with self._op("list", path):
            return super().ls(path, detail=detail, **kwargs)

    def find(self, path, maxdepth=None, withdirs=False, detail=False, **kwargs):
        with self._op("list", path):
            return super().find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail, **kwargs)

    def walk(self, path, maxdepth=None, topdown=True, on_error="omit", **kwargs):
        with self._op("list", path):
            entries = list(super().walk(path, maxdepth=maxdepth, topdown=topdown, on_error=on_error, **kwargs))
        yield from entries

    def glob(self, path, maxdepth=None, **kwargs):
        with self._op("list", path):
            return super().glob(path, maxdepth=maxdepth, **kwargs)

    def du(self, path, *args, **kwargs):
        with self._op("list", path):
            return super().du(path, *args, **kwargs)

    # --- stat ----------------------------------------------------------------------------

    def info(self, path, **kwargs):
        with self._op("stat", path if not isinstance(path, os.DirEntry) else path.path):
            return super().info(path, **kwargs)

    def exists(self, path, **kwargs):
        with self._op("stat", path):
            return super().exists(path, **kwargs)

    def lexists(self, path, **kwargs):
        with self._op("stat", path):
            return super().lexists(path, **kwargs)

    def isfile(self, path):
        with self._op("stat", path):
            return super().isfile(path)

    def isdir(self, path):
        with self._op("stat", path):
            return super().isdir(path)

    def size(self, path):
        with self._op("stat", path):
            return super().size(path)

    def modified(self, path):
        with self._op("stat", path):
            return super().modified(path)

    def created(self, path):
        with self._op("stat", path):
            return super().created(path)

    # --- read --------------------------------------------------------------------------

    def cat_file(self, path, start=None, end=None, **kwargs):
        with self._op("read", path):
            return super().cat_file(path, start=start, end=end, **kwargs)

    def get_file(self, path1, path2, callback=None, **kwargs):
        with self._op("read", path1):
            return super().get_file(path1, path2, callback=callback, **kwargs)

    def _open(self, path, mode="rb", block_size=None, **kwargs):
        path = self._strip_protocol(path)
        if "r" in mode and "+" not in mode:
            with self._op("read", path):
                return super()._open(path, mode, block_size=block_size, **kwargs)
        if mode not in ("wb", "xb"):
            raise NotImplementedError(f"{type(self).__name__} does not model mode {mode!r}")
        if mode == "xb" and os.path.exists(path):
            raise FileExistsError(path)
        depth = getattr(_local, "depth", 0)
        plan = _plan
        fault = None
        if not depth and plan is not None:
            fault = plan.hit("write", path)
            _before(fault, "write", path)
        return _StreamWriter(path, fault)

    # --- write -------------------------------------------------------------------------

    def _temp_for(self, path: str) -> str:
        directory, name = os.path.split(path)
        os.makedirs(directory, exist_ok=True)
        return os.path.join(directory, f".{name}.{uuid.uuid4().hex}.faulty-tmp")

    def _upload(self, path: str, data: bytes, fault: Fault | None, create: bool) -> None:
        """One atomic PUT of ``data`` (temp file, then link or rename), honouring the fault's mid-way actions."""
        tmp = self._temp_for(path)
        try:
            with open(tmp, "wb") as fh:
                if fault is not None and fault.action in ("truncate", "kill_during"):
                    fh.write(data[: int(len(data) * fault.fraction)])
                    fh.flush()
                    if fault.action == "kill_during":
                        _die()
                    raise InjectedFault(f"injected fault: {fault.describe()}: upload interrupted ({path})")
                fh.write(data)
            if create:
                os.link(tmp, path)
            else:
                os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        path = self._strip_protocol(path)
        with self._op("write", path) as fault:
            self._upload(path, bytes(value), fault, create=mode == "create")

    def put_file(self, lpath, rpath, callback=None, mode="overwrite", **kwargs):
        rpath = self._strip_protocol(rpath)
        with open(lpath, "rb") as fh:
            data = fh.read()
        with self._op("write", rpath) as fault:
            self._upload(rpath, data, fault, create=mode == "create")

    def cp_file(self, path1, path2, **kwargs):
        path2 = self._strip_protocol(path2)
        with self._op("write", path2) as fault:
            with open(self._strip_protocol(path1), "rb") as fh:
                data = fh.read()
            self._upload(path2, data, fault, create=False)

    def mv(self, path1, path2, recursive: bool = True, **kwargs):
        path1, path2 = self._strip_protocol(path1), self._strip_protocol(path2)
        with self._op("write", path2):
            os.makedirs(os.path.dirname(path2), exist_ok=True)
            shutil.move(path1, path2)

    def touch(self, path, truncate=True, **kwargs):
        with self._op("write", path):
            os.makedirs(os.path.dirname(self._strip_protocol(path)), exist_ok=True)
            return super().touch(path, truncate=truncate, **kwargs)

    # --- delete ------------------------------------------------------------------------

    def rm_file(self, path):
        with self._op("delete", path):
            return super().rm_file(path)

    def rm(self, path, recursive=False, maxdepth=None):
        """A bulk delete: one operation per path, paths already gone skipped (as S3's DeleteObjects)."""
        for p in path if isinstance(path, list) else [path]:
            p = self._strip_protocol(p)
            with self._op("delete", p):
                if os.path.isdir(p) and not os.path.islink(p):
                    if not recursive:
                        raise ValueError("Cannot delete directory, set recursive=True")
                    shutil.rmtree(p)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(p)

    def rmdir(self, path):
        with self._op("delete", path):
            return super().rmdir(path)


def register() -> None:
    """Make ``faulty://`` known to fsspec in this process (idempotent)."""
    fsspec.register_implementation(PROTOCOL, FaultyFileSystem, clobber=True)


def uri(local_path: str) -> str:
    """The ``faulty://`` URI of a local directory."""
    return f"{PROTOCOL}://{os.path.abspath(local_path)}"


register()
