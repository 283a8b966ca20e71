"""Symbolic links inside a local table: vacuum never deletes one, nor anything reached through one.

A link in a table folder is usually deliberate: a partition folder moved to
another disk and linked back, a file shared with another table. Deleting the
link makes the table unreadable; deleting through it removes a file outside
the table, or one that a reader reaches by another name. The rule:

- listings record links but never list them as files and never walk into them
  (a link to a folder inside the root is listed at its real place anyway);
- a referenced path that passes through a link is also protected under its real
  path, when that lies inside the root (so the target is not "unreferenced");
  a link leading outside the root is left alone, and so are the files behind it;
- just before deleting (and when planning lite and inventory runs) every
  candidate must be a regular file reached from the real root without any link
  (:class:`LinkGuard`); anything else is skipped and reported.

Object stores have no links, so none of this applies to them.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.storage.filesystem import Storage

__all__ = ["LinkGuard", "describe", "scan_links", "through_links"]

#: Links named in a warning before "and N more".
MAX_NAMED = 5


def _prefixes(path: str) -> Iterable[str]:
    i = path.find("/")
    while i != -1:
        yield path[:i]
        i = path.find("/", i + 1)
    yield path


def through_links(
    storage: Storage, paths: pa.Array | pa.ChunkedArray, links: Iterable[str]
) -> tuple[list[str], list[str]]:
    """For the ``paths`` that pass through one of ``links``: their real paths inside the root, and those leaving it.

    ``links`` are table-relative paths of link entries; only paths with a link as
    themselves or as an ancestor are resolved (a ``realpath`` each), so a table
    without links costs nothing.
    """
    link_set = set(links)
    if not link_set or len(paths) == 0:
        return [], []
    inside: list[str] = []
    outside: list[str] = []
    for p in paths.to_pylist():
        if not any(prefix in link_set for prefix in _prefixes(p)):
            continue
        real = storage.real_relative(p)
        if real is None:
            outside.append(p)
        elif real != p:
            inside.append(real)
    return inside, outside


def scan_links(storage: Storage, paths: pa.Array | pa.ChunkedArray) -> list[str]:
    """Links in the folders holding ``paths`` and in their ancestors (a census for runs that list nothing).

    Lite vacuum lists no folder, yet a referenced path may reach a candidate
    through a link; the folders on the referenced paths are scanned for link
    entries (one ``scandir`` each, no ``stat`` per file).
    """
    dirs: set[str] = {""}
    parents: set[str] = set()
    for chunk in paths.chunks if isinstance(paths, pa.ChunkedArray) else [paths]:
        if not len(chunk):
            continue
        # One per folder, vectorised, a chunk at a time (the protected set can hold ten million paths).
        parts = pc.split_pattern(chunk, "/", max_splits=1, reverse=True)
        nested = pc.equal(pc.list_value_length(parts), 2)
        parents.update(pc.unique(pc.list_element(parts.filter(nested), 0)).to_pylist())
        del parts, nested
    for d in sorted(parents):
        while d and d not in dirs:
            dirs.add(d)
            d = d.rpartition("/")[0]
    found: list[str] = []
    for d in sorted(dirs):
        try:
            with os.scandir(os.path.join(storage.real_root, d)) as it:
                found += [f"{d}/{e.name}" if d else e.name for e in it if e.is_symlink()]
        except OSError:
            continue  # gone, or not a folder: nothing to protect there
    return found


def describe(storage: Storage, links: list[str]) -> str:
    """``a -> /target, b -> /other`` for the first few links, for warnings."""
    shown = []
    for rel in sorted(links)[:MAX_NAMED]:
        try:
            target = os.readlink(os.path.join(storage.real_root, rel))
        except OSError:
            target = "?"
        shown.append(f"{rel} -> {target}")
    more = f" and {len(links) - MAX_NAMED} more" if len(links) > MAX_NAMED else ""
    return ", ".join(shown) + more


class LinkGuard:
    """Proves on local storage that a table-relative path names a regular file reached without any link.

    Folders are resolved once each (``realpath``), the file itself with one ``lstat``.
    """

    OK = "ok"
    GONE = "gone"
    LINK = "link"

    def __init__(self, storage: Storage) -> None:
        self.root = storage.real_root
        self._dirs: dict[str, bool] = {"": True}

    def _plain_dir(self, rel_dir: str) -> bool:
        known = self._dirs.get(rel_dir)
        if known is None:
            full = os.path.join(self.root, rel_dir)
            known = self._dirs[rel_dir] = os.path.realpath(full) == full
        return known

    def check(self, rel: str) -> tuple[str, os.stat_result | None]:
        """(``OK``, lstat) for a plain file; (``GONE``, None); (``LINK``, None) for a link, a path through one, or a non-file."""
        if not rel or rel.startswith("/") or ".." in rel.split("/"):
            return self.LINK, None
        if not self._plain_dir(rel.rpartition("/")[0]):
            return self.LINK, None
        try:
            st = os.lstat(os.path.join(self.root, rel))
        except FileNotFoundError:
            return self.GONE, None
        except NotADirectoryError:
            return self.GONE, None
        if not stat.S_ISREG(st.st_mode):
            return self.LINK, None
        return self.OK, st

    def path(self, rel: str) -> str:
        """The physical path to delete for a checked ``rel`` (under the real root)."""
        return os.path.join(self.root, rel)
