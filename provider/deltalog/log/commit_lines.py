"""The one rule for a line of a JSON commit, and a vectorised check of many lines against it.

Every non-blank line of a commit file must be one complete JSON object with exactly one
member, the action kind, whose value is an object. A torn line, two actions merged onto
one line (``{"commitInfo":{...},"add":{...}}``, or two adds, of which ``json.loads``
would silently keep the second), a non-object or trailing garbage is a corrupt log: a
reader that skipped such a line, or read half of it, would see a shorter, valid looking
commit, and a checkpoint, a vacuum or a new commit would then build on a state no other
reader agrees with.

:func:`parse_action` is the rule (it names the file and line). Readers that need only
some lines check the others with :func:`lines_pass`, which parses many lines in one
``pyarrow.json`` call: it never clears a line the rule refuses, and when it cannot clear
a batch the caller applies :func:`parse_action` line by line, which reports the first
bad line exactly.
"""

from __future__ import annotations

import array
import itertools
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from deltalog.errors import CorruptLogError

__all__ = ["JSON_SPACE", "check_commits", "is_blank", "is_utf8", "lines_pass", "parse_action", "parse_commit"]

#: JSON whitespace around a line's object (``\n`` separates the lines).
JSON_SPACE = b" \t\r"
#: Action kinds the vectorised check recognises by their ``{"kind":`` prefix; a line of
#: any other kind or spelling is left to :func:`parse_action`.
KNOWN_KINDS = (
    "add",
    "remove",
    "commitInfo",
    "metaData",
    "protocol",
    "txn",
    "cdc",
    "domainMetadata",
    "checkpointMetadata",
    "sidecar",
)
_SHAPE = r'^\{"(?:' + "|".join(KNOWN_KINDS) + r')":\{.*\}$'
_PREFIX = r'^\{"[A-Za-z]+":'
#: Lines whose brackets could nest deeper than this are left to the exact parser, which
#: refuses nesting beyond Python's recursion limit (pyarrow.json has no such limit).
_MAX_BRACKETS = 500
#: Bytes of lines per pyarrow.json call (bounds the memory of one check).
_BATCH_BYTES = 64 << 20
_EMPTY_SCHEMA = pa.schema([])
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _text_array(lines: Sequence[bytes]) -> pa.Array:
    """``lines`` as a large_string array built from buffers (not validated).

    ``pa.array`` of Python objects imports pandas on first use (0.3 s and 40 MB, more
    than loading a small table costs; see arrow_replay), so neither it nor Python
    scalars are used here.
    """
    offsets = array.array("q", itertools.accumulate(map(len, lines), initial=0))
    return pa.Array.from_buffers(
        pa.large_string(), len(lines), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(lines))]
    )


_NEWLINE = _text_array([b"\n"])[0]
_EMPTY = _text_array([b""])[0]


def is_blank(line: bytes) -> bool:
    return not line.strip(JSON_SPACE)


def is_utf8(data: bytes | bytearray) -> bool:
    """Whether ``data`` is valid UTF-8, checked by Arrow without copying (about 1 ms per 20 MB).

    pyarrow.json passes invalid UTF-8 in object keys through unchecked (an unknown
    field is inferred, then dropped), so the bytes it parses are checked whole.
    """
    offsets = pa.py_buffer(array.array("q", [0, len(data)]))
    text = pa.Array.from_buffers(pa.large_string(), 1, [None, offsets, pa.py_buffer(data)])
    try:
        text.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _skip(text: str, i: int) -> int:
    """The index of the first non-blank character at or after ``i`` (``_WS`` also matches nothing)."""
    m = _WS.match(text, i)
    return m.end() if m else i


def _split_action(text: str) -> tuple[str, Any]:
    """``{"kind": value}`` parsed member by member, so a second member (even a repeated key) is seen.

    Raises ValueError (with the reason) for anything else.
    """
    i = _skip(text, 0)
    if text[i : i + 1] != "{":
        raise ValueError("not a JSON object")
    i = _skip(text, i + 1)
    if text[i : i + 1] != '"':
        raise ValueError("an object without an action key" if text[i : i + 1] == "}" else "expected a key")
    kind, i = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]  # C scanner, not in the stubs
    i = _skip(text, i)
    if text[i : i + 1] != ":":
        raise ValueError("expected ':' after the key")
    i = _skip(text, i + 1)
    body, i = _DECODER.raw_decode(text, i)
    i = _skip(text, i)
    if text[i : i + 1] == ",":
        raise ValueError("more than one action on one line")
    if text[i : i + 1] != "}":
        raise ValueError("the object is not closed after its action")
    i = _skip(text, i + 1)
    if i != len(text):
        raise ValueError("extra data after the action")
    return kind, body


def parse_action(line: bytes, name: str, lineno: int) -> dict[str, Any]:
    """One non-blank commit line as its single-key action object; CorruptLogError names the file and line.

    Every reader of commit lines (snapshot replay, conflict checks, history, vacuum,
    log cleanup, manifests, post-commit hooks) applies this rule, directly or through
    :func:`lines_pass`, so a damaged line is reported the same way everywhere.
    """
    try:
        kind, body = _split_action(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CorruptLogError(f"{name}: line {lineno} is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise CorruptLogError(f"{name}: line {lineno} is not valid JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:
        raise CorruptLogError(f"{name}: line {lineno} is not a single Delta action ({exc})") from None
    except RecursionError:
        raise CorruptLogError(f"{name}: line {lineno} is nested too deeply to be a Delta action") from None
    if not isinstance(body, dict):
        raise CorruptLogError(f"{name}: line {lineno}: the {kind!r} action is not a JSON object")
    return {kind: body}


def parse_commit(data: bytes, name: str) -> list[dict[str, Any]]:
    """All actions of one commit file, in order; CorruptLogError names the file and line."""
    return [
        parse_action(line, name, lineno)
        for lineno, line in enumerate(data.split(b"\n"), start=1)
        if line.strip(JSON_SPACE)
    ]


def lines_pass(lines: Sequence[bytes], prefix: bytes | None = None) -> bool:
    """Whether every one of ``lines`` (non-blank) certainly satisfies :func:`parse_action`.

    True only when each line is valid UTF-8 and ``{"<known kind>":`` + one JSON object +
    ``}`` (optionally followed by JSON whitespace): the objects are parsed by one
    ``pyarrow.json`` call, and exactly one row per line proves each is one complete
    object. False means "not proven" (a corrupt line, or a valid one spelled unusually):
    the caller then applies :func:`parse_action` to each line. ``prefix``: every line is
    already known to start with this ``{"kind":`` (the snapshot's commitInfo lines).
    """
    if not lines:
        return True
    text = _text_array(lines)
    try:
        text.validate(full=True)  # UTF-8
    except pa.ArrowInvalid:
        return False
    text = pc.utf8_rtrim(text, characters=JSON_SPACE.decode())
    if prefix is not None:
        if not pc.all(pc.ends_with(text, "}")).as_py():
            return False
        inner = pc.utf8_slice_codeunits(text, len(prefix), -1)  # the prefix is ASCII: code units are bytes
    else:
        if not pc.all(pc.match_substring_regex(text, _SHAPE)).as_py():
            return False
        inner = pc.utf8_slice_codeunits(pc.replace_substring_regex(text, _PREFIX, "", max_replacements=1), 0, -1)
    # Every line starts with an object: pyarrow.json must never see a document that does
    # not (it crashes on a leading bare ``null``).
    if not pc.all(pc.starts_with(inner, "{")).as_py():
        return False
    # bytes.count per line is a few times cheaper than Arrow's count_substring kernel.
    if any(len(line) > _MAX_BRACKETS and line.count(b"{") + line.count(b"[") > _MAX_BRACKETS for line in lines):
        return False
    # The inner objects, one per line: the string array's data buffer once each value
    # ends in a newline (joined with Arrow scalars built from buffers, see _text_array).
    joined = pc.binary_join_element_wise(inner, _NEWLINE, _EMPTY)
    offsets = pa.Array.from_buffers(pa.int64(), len(joined) + 1, [None, joined.buffers()[1]], offset=joined.offset)
    start, end = offsets[0].as_py(), offsets[len(joined)].as_py()
    data = joined.buffers()[2][start:end]
    longest = pc.max(pc.binary_length(joined)).as_py()
    try:
        table = pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(use_threads=True, block_size=max(1 << 20, longest + 2)),
            parse_options=pj.ParseOptions(explicit_schema=_EMPTY_SCHEMA, unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowException, ValueError):
        return False
    return table.num_rows == len(lines)


def check_commits(commits: Iterable[tuple[str, bytes]]) -> None:
    """Check every line of every commit ``(name, data)`` against the rule; CorruptLogError names the first bad one.

    For readers that parse only some lines themselves (history, vacuum, log cleanup,
    manifests, post-commit hooks): the lines are checked in vectorised batches, and
    line by line (oldest commit first) only when a batch cannot be cleared.
    """
    batch: list[tuple[str, bytes]] = []
    lines: list[bytes] = []
    size = 0
    for name, data in commits:
        batch.append((name, data))
        lines += [line for line in data.split(b"\n") if line.strip(JSON_SPACE)]
        size += len(data)
        if size >= _BATCH_BYTES:
            _check_batch(batch, lines)
            batch, lines, size = [], [], 0
    _check_batch(batch, lines)


def _check_batch(commits: list[tuple[str, bytes]], lines: list[bytes]) -> None:
    if lines_pass(lines):
        return
    for name, data in commits:
        parse_commit(data, name)
