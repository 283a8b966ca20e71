"""One canonical form of a file action's ``path``: what makes an add and a remove name the same file.

PROTOCOL.md: a path is a URI (RFC 2396), relative to the table root or absolute. The
same absolute file has many spellings: ``/t/x.parquet``, ``file:/t/x.parquet``,
``file:///t/x.parquet``, percent-encoded or not. A log that adds a file under one
spelling and removes it under another must leave it removed; keeping it live would make
compaction rewrite deleted rows back into the table and a checkpoint write that wrong
state down.

Delta Spark is the reference (``DeltaLog.CanonicalPathFunction`` before its log replay,
then ``java.net.URI`` equality): an absolute path without a scheme is qualified with
the default filesystem, ``file:``, its percent-encoding decoded and redone; a path with
a scheme is kept as written up to URI equality (the scheme's case, an empty authority,
the case of ``%xx`` escapes, ``.``/``..`` segments); a relative path is kept as written
and is never equal to an absolute one, even under the table root. Following it exactly
matters both ways: equating two paths Delta Spark keeps apart would let vacuum delete a
file it still reads, and keeping apart two it equates would resurrect removed rows.

Used by every place that matches file actions: snapshot replay (commits and
checkpoints, vectorised there by :func:`deltalog.log.replay.file_keys`), a
transaction's own adds and removes, the conflict checks against winning commits.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["ABSOLUTE_PATH", "canonical_path", "needs_canonical_form"]

#: A URI scheme (RFC 2396: a letter, then letters, digits, ``+``, ``-``, ``.``) and its colon.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_ESCAPE = re.compile(r"%[0-9a-fA-F]{2}")
_DOT_SEGMENT = re.compile(r"(^|/)\.{1,2}(/|$)")
#: ASCII characters ``java.net.URI`` leaves unquoted in a path (unreserved, punctuation allowed in a path).
_PATH_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!~*'();:@&=+$,/")


#: What :func:`canonical_path` may change, as one regular expression (for vectorised filters).
ABSOLUTE_PATH = r"^/|^[A-Za-z][A-Za-z0-9+.-]*:"


def needs_canonical_form(path: str) -> bool:
    """Whether :func:`canonical_path` may change ``path``: it is absolute (a leading ``/`` or a scheme)."""
    return path.startswith("/") or _SCHEME.match(path) is not None


def _quote(path: str) -> str:
    """Percent-encode what ``java.net.URI``'s component constructor encodes in a path (non-ASCII letters stay)."""
    out = []
    for ch in path:
        if ch in _PATH_SAFE or (ord(ch) > 127 and ch.isprintable() and not ch.isspace()):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode())
    return "".join(out)


def _remove_dot_segments(path: str) -> str:
    """RFC 2396 normalisation (``java.net.URI.normalize``): ``.`` segments dropped, ``x/..`` pairs removed."""
    if not _DOT_SEGMENT.search(path):
        return path
    absolute = path.startswith("/")
    out: list[str] = []
    segments = path.split("/")
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == ".":
            if last:
                out.append("")
            continue
        if segment == ".." and out and out[-1] not in ("", ".."):
            out.pop()
            if last:
                out.append("")
            continue
        out.append(segment)
    result = "/".join(out)
    return result if not absolute or result.startswith("/") else "/" + result


def canonical_path(path: str) -> str:
    """The form of ``path`` under which Delta Spark's log replay matches file actions (see the module docstring)."""
    if not needs_canonical_form(path):
        return path
    scheme = _SCHEME.match(path)
    if scheme is None:
        # Qualified with the default filesystem: decoded, doubled slashes collapsed, encoded again.
        physical = re.sub(r"/{2,}", "/", unquote(path))
        if len(physical) > 1:
            physical = physical.rstrip("/")
        return "file:" + _quote(_remove_dot_segments(physical))
    rest = path[scheme.end() :]
    authority = ""
    if rest.startswith("//"):
        authority, slash, tail = rest[2:].partition("/")
        rest = slash + tail
    rest = _ESCAPE.sub(lambda m: m.group(0).upper(), _remove_dot_segments(rest))
    return f"{scheme.group(1).lower()}:" + (f"//{authority.lower()}" if authority else "") + rest
