"""What vacuum must keep: every file that a version inside the retention window references.

The retained versions are all versions committed at or after the cutoff plus the
version just before the oldest of them (the state a reader at the cutoff time
sees). The union of the files they reference is computed without replaying each
version: a file live in any retained version V is either still live at the latest
version or was removed by a commit after V, so

    retained files = live files at latest
                     + every path an add/remove/cdc action of a commit after the
                       window start names (and their deletion vectors).

The snapshot is a projection (:data:`VACUUM_COLUMNS`): paths, deletion vectors, sizes
and times, never the statistics, partition values or tags, which are two thirds of
the state at ten million files. The protected set is built chunk by chunk from the
snapshot's own path buffers (only log paths that need resolving are copied), so
it costs no more memory than the paths themselves.

The snapshot's tombstones are *not* trusted for this: a checkpoint writer may
already have dropped tombstones the window still needs (a shorter retention at
checkpoint time, clock skew), so the commits of the window are read from the
log. Unexpired tombstones (``deletionTimestamp`` at or after the cutoff) are
protected on top, as Delta Spark does, which covers removes whose commit time
and deletion time disagree.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.errors import CorruptLogError, VersionNotFoundError
from deltalog.log.action_checks import check_file_action, check_protocol, check_table_metadata
from deltalog.log.actions import FileColumns
from deltalog.log.commit_lines import JSON_SPACE, lines_pass, parse_action, parse_commit
from deltalog.log.history import CommitTimestamps, format_ms, ict_enablement_version
from deltalog.log.listing import LogListing
from deltalog.log.snapshot import Snapshot, read_commit_files
from deltalog.storage.filesystem import FileInfo, Storage
from deltalog.vacuuming.paths import PathResolver, dv_descriptor_path, dv_paths_of

__all__ = ["VACUUM_COLUMNS", "RetainedState", "protected_paths", "retained_state", "scan_commits"]

log = logging.getLogger(__name__)

FILE_ACTIONS = ("add", "remove", "cdc")

#: What vacuum reads of the file actions: paths and deletion vectors (what is referenced), sizes
#: (an add's required field), modification times (the plausible window of an inventory) and
#: deletion timestamps (which tombstones are unexpired).
VACUUM_COLUMNS = FileColumns.of(
    add=("path", "size", "modificationTime", "deletionVector"),
    remove=("path", "deletionTimestamp", "deletionVector"),
)


@dataclass
class CommitRefs:
    """The file references found in a range of commit files (paths as the log writes them)."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    cdc: list[str] = field(default_factory=list)
    added_dvs: list[str] = field(default_factory=list)
    removed_dvs: list[str] = field(default_factory=list)
    protocol: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    commits: int = 0

    def all_paths(self) -> list[str]:
        return self.added + self.removed + self.cdc + self.added_dvs + self.removed_dvs


def scan_commits(storage: Storage, files: list[FileInfo], kinds: tuple[str, ...] = FILE_ACTIONS) -> CommitRefs:
    """Collect the ``kinds`` file actions' paths, their deletion vectors and the newest protocol/metaData.

    Lines of other kinds (commitInfo above all, or adds when only removes matter) are
    recognised by their ``{"kind"`` prefix and not used, but still checked against the
    line rule, all in one vectorised pass: a torn or merged line stops vacuum, since the
    commit may reference files it does not seem to. A line written in another JSON
    layout is parsed in full, so nothing is missed.
    """
    wanted = {k.encode() for k in (*kinds, "protocol", "metaData")}
    refs = CommitRefs()
    protocol_at = metadata_at = ""
    # A batch of commits at a time: the raw bytes and the unused lines of one batch only are held
    # (lite vacuum with no earlier vacuum reads every commit since version 0).
    for batch in _batches(files):
        contents = read_commit_files(storage, batch)
        unused: list[bytes] = []
        for f, data in zip(batch, contents):
            refs.commits += 1
            for lineno, line in enumerate(data.split(b"\n"), start=1):
                if line.startswith(b'{"'):
                    if line[2 : line.find(b'"', 2)] not in wanted:
                        unused.append(line)
                        continue
                elif not line.strip(JSON_SPACE):
                    continue
                ((kind, body),) = parse_action(line, f.name, lineno).items()
                if kind in kinds:
                    path = body.get("path") if isinstance(body, dict) else None
                    if not isinstance(path, str):
                        raise CorruptLogError(f"{f.name}: line {lineno}: {kind} action without a string 'path'")
                    if kind != "cdc":  # the checks a snapshot load makes (a malformed deletion vector above all)
                        check_file_action(kind, body, f"{f.name}: line {lineno}")
                    {"add": refs.added, "remove": refs.removed, "cdc": refs.cdc}[kind].append(path)
                    dv = body.get("deletionVector") if kind != "cdc" else None
                    if isinstance(dv, dict) and dv.get("storageType") != "i":
                        (refs.added_dvs if kind == "add" else refs.removed_dvs).append(dv_descriptor_path(dv))
                elif kind == "protocol":
                    refs.protocol, protocol_at = body, f"{f.name}: line {lineno}"
                elif kind == "metaData":
                    refs.metadata, metadata_at = body, f"{f.name}: line {lineno}"
        if not lines_pass(unused):
            for f, data in zip(batch, contents):
                parse_commit(data, f.name)  # names the first bad line
        del contents, unused
    # The newest of each is what the commits leave in force (older ones govern older versions only).
    if refs.protocol is not None:
        check_protocol(refs.protocol, protocol_at)
    if refs.metadata is not None:
        check_table_metadata(refs.metadata, metadata_at)
    return refs


#: Bytes of commit files read at once by :func:`scan_commits`.
SCAN_BATCH_BYTES = 256 * 1024 * 1024


def _batches(files: list[FileInfo]) -> Iterator[list[FileInfo]]:
    """``files`` in order, in runs of about :data:`SCAN_BATCH_BYTES` of commit bytes."""
    batch: list[FileInfo] = []
    size = 0
    for f in files:
        batch.append(f)
        size += max(f.size, 1 << 10)
        if size >= SCAN_BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def oldest_readable_version(listing: LogListing, latest: int, fallback: int) -> int:
    """The oldest version the log can still rebuild with contiguous commits up to ``latest``.

    Commit 0 when the whole log is there; otherwise the oldest complete checkpoint
    from which every later commit still exists (log cleanup removes the oldest
    commits first). ``fallback`` (the latest snapshot's checkpoint) if none fits.
    """
    if latest in listing.commits:
        run_start = latest
        while run_start - 1 in listing.commits:
            run_start -= 1
    else:
        run_start = latest + 1
    if run_start == 0:
        return 0
    usable = [c for c in listing.checkpoints if run_start - 1 <= c <= latest]
    return min(usable) if usable else fallback


@dataclass
class RetainedState:
    """The protected set for one cutoff, and which versions it keeps whole.

    ``window_start`` is the newest version committed before the cutoff (the state a
    reader at the cutoff sees), None when every commit still in the log is newer.
    Every version from ``fully_readable_from`` to ``snapshot.version`` keeps all of
    its files. ``protected`` holds table-relative paths (percent-decoded and literal forms),
    chunk by chunk and possibly more than once (a set lookup does not mind).
    """

    snapshot: Snapshot
    listing: LogListing
    cutoff_ms: int
    window_start: int | None
    fully_readable_from: int
    protected: pa.ChunkedArray
    expired_tombstones: pa.Array
    commits_read: int
    warnings: list[str] = field(default_factory=list)


def _window_start(storage: Storage, listing: LogListing, snapshot: Snapshot, cutoff_ms: int) -> int | None:
    stamps = CommitTimestamps(storage, listing, ict_enablement_version(snapshot.metadata.configuration))
    if not stamps.versions:
        return None
    try:
        return stamps.version_at(cutoff_ms - 1)
    except VersionNotFoundError:
        return None


def protected_paths(resolver: PathResolver, parts: list[pa.Array | pa.ChunkedArray]) -> pa.ChunkedArray:
    """Table-relative paths for log paths, chunk by chunk: plain ones as they are (no copy), the rest resolved.

    Raises :class:`~deltalog.vacuuming.paths.UnrelativisablePathError` for a path that
    cannot be placed inside the root (``strict``, as everywhere vacuum protects).
    """
    chunks: list[pa.Array] = []
    for part in parts:
        for chunk in part.chunks if isinstance(part, pa.ChunkedArray) else [part]:
            if chunk.null_count:
                chunk = chunk.drop_null()
            if not len(chunk):
                continue
            special = resolver.needs_resolving(chunk)
            if not pc.any(special).as_py():
                chunks.append(chunk)
                continue
            chunks.append(chunk.filter(pc.invert(special)))
            chunks.append(resolver.resolve(chunk.filter(special), strict=True))
    return pa.chunked_array(chunks, pa.string())


def retained_state(snapshot: Snapshot, listing: LogListing, cutoff_ms: int) -> RetainedState:
    """Compute the protected set for ``cutoff_ms`` from the latest snapshot and the window's commits."""
    storage = snapshot.storage
    latest = snapshot.version
    fallback = snapshot.segment.checkpoint.version if snapshot.segment.checkpoint else 0
    oldest = oldest_readable_version(listing, latest, fallback)
    window_start = _window_start(storage, listing, snapshot, cutoff_ms)
    warnings: list[str] = []
    if window_start is None:
        first = oldest
    else:
        first = max(window_start, oldest)
        if window_start < oldest:
            warnings.append(
                f"versions {window_start}..{oldest - 1} are inside the retention window but their commits were "
                "already removed by log cleanup, so they cannot be read whatever vacuum does"
            )
    window_files = [listing.commits[v] for v in range(first + 1, latest + 1)]
    refs = scan_commits(storage, window_files)
    log.info(
        "retention window: cutoff %s, versions %d..%d stay fully readable (%d commits read)",
        format_ms(cutoff_ms),
        first,
        latest,
        refs.commits,
    )

    files = snapshot.files
    tombstones = snapshot.tombstones
    deletion_ts = pc.fill_null(tombstones.column("deletionTimestamp"), 0)
    live_tomb = pc.greater_equal(deletion_ts, cutoff_ms)
    kept_tombstones = tombstones.filter(live_tomb)
    expired = tombstones.filter(pc.invert(live_tomb))

    raw_parts = [
        files.column("path"),
        kept_tombstones.column("path"),
        pa.array(refs.all_paths(), pa.string()),
        pa.array(dv_paths_of(files.column("deletionVector")), pa.string()),
        pa.array(dv_paths_of(kept_tombstones.column("deletionVector")), pa.string()),
    ]
    resolver = PathResolver(storage)
    protected = protected_paths(resolver, raw_parts)
    expired_paths = resolver.resolve(expired.column("path"))
    return RetainedState(
        snapshot=snapshot,
        listing=listing,
        cutoff_ms=cutoff_ms,
        window_start=window_start,
        fully_readable_from=first,
        protected=protected,
        expired_tombstones=expired_paths,
        commits_read=refs.commits,
        warnings=warnings,
    )
