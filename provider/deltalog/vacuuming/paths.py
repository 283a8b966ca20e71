"""Paths as the log writes them versus paths as storage lists them.

Vacuum compares two worlds: the log names files by URI (relative and
percent-encoded, sometimes absolute, deletion vectors only by a Z85-encoded
UUID), while a listing yields physical paths. Every reference is turned into a
table-relative physical path here; when a log path could be read two ways
(percent-decoded or literally), both forms are protected, since keeping a file
by mistake costs bytes while deleting one by mistake loses data.

The hidden-path rule (``HiddenRule``, re-exported here) lives in
:mod:`deltalog.write_checks.hidden_paths`, shared with commit requests and convert.
"""

from __future__ import annotations

import os
import posixpath
import re
import uuid
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc

from deltalog._arrow_utils import any_substring
from deltalog.errors import CorruptLogError, OperationRefusedError
from deltalog.protocol.deletion_vectors import z85_decode
from deltalog.storage.filesystem import Storage

__all__ = ["PathResolver", "dv_descriptor_path", "dv_file_path", "dv_paths_of"]

_Z85_UUID_LENGTH = 20

#: Log paths containing any of these need more than a plain comparison: percent-encoded,
#: absolute (a scheme, a leading slash) or not normalised.
_SPECIAL_SUBSTRINGS = ("%", ":", "//", "./", "/.")


def dv_file_path(storage_type: str | None, path_or_inline: str | None) -> str | None:
    """Where a deletion vector lives, per PROTOCOL.md (Deletion Vector Descriptor, absolutePath).

    ``u``: ``<random prefix>/deletion_vector_<uuid>.bin`` relative to the table root,
    the UUID being the last 20 Z85 characters; ``p``: the absolute path as given;
    ``i`` (inline): None. Raises CorruptLogError for a malformed descriptor.
    """
    if storage_type == "i" or not path_or_inline:
        return None
    if storage_type == "p":
        return path_or_inline
    if storage_type == "u":
        if len(path_or_inline) < _Z85_UUID_LENGTH:
            raise CorruptLogError(f"deletion vector id {path_or_inline!r} is shorter than a Z85-encoded UUID")
        prefix, encoded = path_or_inline[:-_Z85_UUID_LENGTH], path_or_inline[-_Z85_UUID_LENGTH:]
        name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
        return f"{prefix}/{name}" if prefix else name
    raise CorruptLogError(f"unknown deletion vector storage type {storage_type!r}")


def dv_paths_of(dv_column: pa.Array | pa.ChunkedArray) -> list[str]:
    """File paths (log-style) of the on-disk deletion vectors in a ``deletionVector`` struct column."""
    if len(dv_column) == 0 or dv_column.null_count == len(dv_column):
        return []  # (checked before combining: ten million rows without a deletion vector cost nothing)
    if isinstance(dv_column, pa.ChunkedArray):
        dv_column = dv_column.combine_chunks() if dv_column.num_chunks != 1 else dv_column.chunk(0)
    present = dv_column.filter(dv_column.is_valid())
    kinds = present.field("storageType")
    ids = present.field("pathOrInlineDv")
    on_disk = pc.fill_null(pc.not_equal(kinds, "i"), False)
    keys = pc.unique(pc.binary_join_element_wise(kinds.filter(on_disk), ids.filter(on_disk), "\x00"))
    out = []
    for key in keys.to_pylist():
        if key is None:
            continue
        kind, _, ident = key.partition("\x00")
        out.append(dv_descriptor_path({"storageType": kind, "pathOrInlineDv": ident}))
    return out


def dv_descriptor_path(dv: dict[str, Any]) -> str:
    """:func:`dv_file_path` for one on-disk descriptor dict."""
    path = dv_file_path(dv.get("storageType"), dv.get("pathOrInlineDv"))
    assert path is not None
    return path


class UnrelativisablePathError(OperationRefusedError):
    """A path the log references cannot be placed inside the table root, so vacuum cannot prove what is unreferenced."""


#: A ``.`` or ``..`` path segment: only the filesystem can say where such a path leads.
_DOT_SEGMENT = re.compile(r"(^|/)\.{1,2}(/|$)")
#: A URI: a scheme of two or more characters, a colon and a slash (``s3://b/k``, and Hadoop's ``file:/t``).
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/")


class PathResolver:
    """Turns paths as written in the log into table-relative physical paths, one rule for every spelling.

    A location has many spellings: ``file:/t``, ``file:///t``, ``/t``, a symlinked
    parent, ``..`` segments, percent-encoding, ``s3://`` vs ``s3a://``. On local
    storage both sides are compared as real paths (every link resolved), so any
    spelling of the root matches; on object stores (no links) paths are compared
    after normalisation, with the scheme's aliases. A path that no rule places
    inside the root is *unrelativisable*: :meth:`resolve` with ``strict`` refuses
    it, since its file might be a live one spelled differently.
    """

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.local = storage.is_local
        self.root = storage.root.rstrip("/") or "/"
        self.real_root = storage.real_root.rstrip("/") or "/"
        self.roots = tuple(dict.fromkeys((self.root, self.real_root)))
        parsed = urlparse(storage.uri)
        self.schemes = {"file", ""} if storage.is_local else {parsed.scheme, *_scheme_aliases(parsed.scheme)}
        self._real_dirs: dict[str, str] = {}

    @staticmethod
    def _under(absolute: str, root: str) -> str | None:
        prefix = root + "/" if root != "/" else "/"
        return absolute[len(prefix) :] if absolute.startswith(prefix) and len(absolute) > len(prefix) else None

    def _real_dir(self, directory: str) -> str:
        real = self._real_dirs.get(directory)
        if real is None:
            real = self._real_dirs[directory] = os.path.realpath(directory or "/")
        return real

    def _absolute(self, path: str) -> list[str]:
        """Table-relative forms of an absolute physical path without scheme (empty when outside the root)."""
        if not self.local:
            forms = [self._under(posixpath.normpath(path.lstrip("/")), self.root), self._under(path, self.root)]
            return [f for f in dict.fromkeys(forms) if f and not f.startswith("../")]
        if not _DOT_SEGMENT.search(path) and "//" not in path:
            for root in self.roots:
                rel = self._under(path, root)
                if rel:
                    return [rel]
        # Another spelling of the root (a symlinked parent, ``..``): ask the filesystem where the folder is.
        parent, _, name = path.rpartition("/")
        if name in ("", ".", ".."):
            return []
        rel = self._under(posixpath.join(self._real_dir(parent), name), self.real_root)
        return [rel] if rel else []

    def _relative(self, path: str) -> list[str]:
        """Table-relative forms of a relative log path (empty when it climbs out of the root)."""
        if path and not _DOT_SEGMENT.search(path) and "//" not in path:
            return [path]
        if self.local:
            rel = self.storage.real_relative(path) if path else None
            return [rel] if rel else []
        norm = posixpath.normpath(path) if path else "."
        if norm in (".", "..") or norm.startswith("../"):
            return []
        return list(dict.fromkeys([norm, path]))

    def literal_prefixes(self) -> list[str]:
        """Spellings of the root (with the trailing ``/``) that :meth:`relative_literal` strips as they are.

        A path made of one of these and a remainder without dot segments, doubled slashes
        or URL delimiters (``?#;``) is that remainder, relative to the table: the
        vectorised inventory reader relies on it.
        """
        if self.local:
            out = []
            for root in self.roots:
                base = root.rstrip("/")
                out += [f"{base}/", f"file:{base}/", f"file://{base}/", f"file://localhost{base}/"]
            return list(dict.fromkeys(out))
        return [f"{scheme}://{self.root}/" for scheme in sorted(self.schemes) if scheme]

    def relative_literal(self, absolute: str) -> str | None:
        """The table-relative form of a physical path (absolute, URI or dotted; no percent-decoding), or None."""
        if not absolute.startswith("/") and not _URI.match(absolute):
            forms = self._relative(absolute)  # a relative path with dot segments
            return forms[0] if forms else None
        parsed = urlparse(absolute)
        if len(parsed.scheme) > 1:
            if parsed.scheme not in self.schemes:
                return None
            if self.local and parsed.netloc not in ("", "localhost"):
                return None
            absolute = parsed.path if self.local else f"{parsed.netloc}{parsed.path}"
        forms = self._absolute(absolute)
        return forms[0] if forms else None

    def resolve_one(self, path: str) -> list[str]:
        """Every table-relative form ``path`` could denote (empty when it lies outside the table)."""
        out: list[str] = []
        parsed = urlparse(path)
        if (len(parsed.scheme) > 1 and "://" in path) or path.startswith("file:"):
            if parsed.scheme not in self.schemes:
                return []
            if self.local:
                if parsed.netloc not in ("", "localhost"):
                    return []
                spellings = (unquote(parsed.path), parsed.path)
            else:
                spellings = (f"{parsed.netloc}{unquote(parsed.path)}", f"{parsed.netloc}{parsed.path}")
            for c in dict.fromkeys(spellings):
                out += self._absolute(c)
        elif path.startswith("/"):
            for c in dict.fromkeys((unquote(path), path)):
                out += self._absolute(c)
        else:
            for c in dict.fromkeys((unquote(path), path)):
                out += self._relative(c)
        return list(dict.fromkeys(out))

    @staticmethod
    def needs_resolving(paths: pa.Array) -> pa.Array:
        """Which log paths are not plain relative paths (percent-encoded, absolute, dotted, doubled slashes, empty)."""
        return pc.or_(any_substring(paths, _SPECIAL_SUBSTRINGS, ("/", ".")), pc.equal(paths, ""))

    def resolve(self, raw: Iterable[str] | pa.Array, strict: bool = False) -> pa.Array:
        """Unique relative paths for a batch of log paths; plain relative paths stay vectorised.

        ``strict``: a path that cannot be relativised against the root raises
        :class:`UnrelativisablePathError` (Delta Spark's vacuum stops the same way)
        instead of being dropped.
        """
        arr = raw if isinstance(raw, pa.Array | pa.ChunkedArray) else pa.array(list(raw), pa.string())
        if isinstance(arr, pa.ChunkedArray):
            arr = (
                arr.combine_chunks()
                if arr.num_chunks != 1
                else (arr.chunk(0) if arr.num_chunks else pa.array([], pa.string()))
            )
        if arr.null_count:
            arr = arr.drop_null()
        arr = pc.unique(arr)
        if len(arr) == 0:
            return arr
        special = self.needs_resolving(arr)
        if not pc.any(special).as_py():
            return arr
        plain = arr.filter(pc.invert(special))
        resolved: list[str] = []
        unresolvable: list[str] = []
        for p in arr.filter(special).to_pylist():
            forms = self.resolve_one(p)
            if not forms:
                unresolvable.append(p)
            resolved += forms
        if strict and unresolvable:
            examples = ", ".join(repr(p) for p in sorted(unresolvable)[:3])
            raise UnrelativisablePathError(
                f"{len(unresolvable)} path(s) the log references cannot be relativised against the table root "
                f"{self.storage.uri} (e.g. {examples}): they may be live files under another spelling of this "
                "location, so vacuum cannot prove what is unreferenced and stops (as Delta Spark does). Open the "
                "table by the location its log names, or repair the log"
            )
        return pc.unique(pa.concat_arrays([plain, pa.array(resolved, pa.string())]))


def _scheme_aliases(scheme: str) -> tuple[str, ...]:
    groups = (("s3", "s3a", "s3n"), ("gs", "gcs"), ("abfs", "abfss", "az", "adl"), ("file", "local"))
    for g in groups:
        if scheme in g:
            return g
    return ()
