"""What the writers beside maintenance did lately, learned from the table's recent commits.

Maintenance that never fails a pipeline has to know where the pipelines work and when. The
log tells a lot of it, without asking anyone:

* **who**: each commit's kind (:func:`classify_commit`): a blind or streaming ``append`` (never
  in conflict with a compaction, which commits at SnapshotIsolation), a ``dml`` (DELETE,
  UPDATE, MERGE, an overwrite: anything that removes data or read the table to write it),
  ``deltalog``'s own rewrites, another engine's ``maintenance`` (OPTIMIZE) and ``other``;
* **where**: the partitions and files a DML commit touched (its ``remove`` actions and the
  ``add`` actions it wrote, deletion-vector re-adds included), and whether its predicate pins
  partitions (``day = '2024-05-01'``) or reads the whole table (an unpartitioned table, a data
  predicate such as ``id = 7``, a MERGE whose ON condition compares columns to columns):
  Delta Spark's conflict checker fails a DELETE/UPDATE/MERGE when a concurrent commit added
  files to a partition its read predicates match (ConcurrentAppendException), removed a file
  it read (ConcurrentDeleteRead) or removed a file it removes (ConcurrentDeleteDelete), so a
  whole-table reader conflicts with any commit that lands while it runs, a partition-pinned
  one only with commits in its partitions;
* **when**: each DML transaction's span. Its end is the commit's timestamp (the in-commit
  timestamp where the table has them, else the commit file's time, made monotonic); its
  length is the writer's own ``operationMetrics.executionTimeMs`` (Delta Spark records it for
  DELETE, UPDATE and MERGE: a duration on one clock, so clock skew between writers does not
  enter), and no later than the commit that followed its ``readVersion`` (it read the table
  before that one landed: a timer may start well after the snapshot on a loaded driver).

From the spans, :class:`Cadence` estimates how likely a DML is in flight at a given time after
the last one committed: over the recent pairs of consecutive DML commits, the share whose
next transaction was already running at that offset. Right after a commit of a writer that
pauses between transactions the share is 0 (a *quiet moment*); a writer that runs back to
back leaves none. A stream of DML commits older than its own rhythm explains (twice its
longest cycle, at least a minute) is *stopped*: its partitions are cold again. A stream needs a
*rhythm* to count as working at all: a cycle seen at least twice (:data:`MIN_RHYTHM_PAIRS` pairs
of consecutive commits, three commits). A lone DML commit says nothing of a writer that will
come back (most DELETEs and UPDATEs are one-off corrections), and neither does one interval
between two (a script's UPDATE then DELETE: one sample, which would make the chance of a
running transaction 0 or 100 %); such a stream keeps no partition hot, and is still counted
and reported.

:func:`overlaps` finds what the log can show of the conflicts deltalog's commits caused: a
writer commit whose ``readVersion`` is older than a deltalog rewrite it landed after went
through Delta's conflict check against it (and passed). A writer attempt that failed leaves
no commit at all, so the log cannot count failures: docs/compaction.md says what is seen.

Everything here is pure over :class:`RecentCommit` records, except :func:`read_recent_commits`
(one listing's commits, newest first, bounded by count and age) and :func:`writer_activity`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from deltalog.log.commit_lines import parse_commit
from deltalog.log.history import ict_enablement_version
from deltalog.log.listing import LogListing
from deltalog.log.snapshot import Snapshot, read_commit_files
from deltalog.storage.filesystem import Storage

__all__ = [
    "DEFAULT_MAX_COMMITS",
    "DEFAULT_WINDOW_MS",
    "ENGINE_PREFIX",
    "KINDS",
    "MIN_RHYTHM_PAIRS",
    "MOVING_QUIET_OFFSET_MS",
    "MOVING_RISK_LIMIT",
    "Cadence",
    "DmlCommit",
    "RecentCommit",
    "TouchedFile",
    "WriterActivity",
    "WriterOverlap",
    "activity_from_commits",
    "cadence_of",
    "classify_commit",
    "overlaps",
    "partition_key",
    "pins_partitions",
    "predicate_texts",
    "read_recent_commits",
    "recent_commit",
    "writer_activity",
]

#: How many recent commits are read (newest first): enough for the rhythm of the writers of
#: the last hours, one small GET each on an object store.
DEFAULT_MAX_COMMITS = 100
#: Commits older than this are not read (their writers' partitions are cold whatever they did).
DEFAULT_WINDOW_MS = 24 * 3_600_000
#: deltalog's commits name it in ``engineInfo`` (``deltalog/<version>``).
ENGINE_PREFIX = "deltalog/"
#: The kinds :func:`classify_commit` gives.
KINDS = ("append", "dml", "deltalog", "maintenance", "other")
#: Operations that read the table to change it, even when a commit removes nothing (an insert-only MERGE).
DML_OPERATIONS = frozenset(
    {"DELETE", "UPDATE", "MERGE", "REPLACE TABLE AS SELECT", "CREATE OR REPLACE TABLE AS SELECT"}
)
#: A stream of DML commits counts as stopped after twice its longest cycle, and never sooner than this.
MIN_HORIZON_MS = 60_000
#: A stream has a rhythm (its partitions can be hot) from this many pairs of consecutive DML commits on:
#: a cycle seen twice. One commit, or one interval, is a one-off until the writer repeats it.
MIN_RHYTHM_PAIRS = 2
#: Pairs of consecutive DML commits the cadence keeps (the newest): the writers' rhythm of late.
CADENCE_PAIRS = 30
#: A transaction may have pinned its snapshot a little before its command's timer started
#: (Spark's analysis): its start is taken this much earlier.
START_SLACK_MS = 250
#: A stream of DML commits moving between partitions keeps them hot only when it leaves quiet moments: a
#: transaction running this long after at most this share of its commits (else several writers overlap).
MOVING_QUIET_OFFSET_MS = 500
MOVING_RISK_LIMIT = 0.1


@dataclass(frozen=True)
class TouchedFile:
    """A file a commit added or removed with ``dataChange=true``: its path and partition."""

    path: str
    partition: tuple[tuple[str, str | None], ...] = ()


@dataclass(frozen=True)
class RecentCommit:
    """One commit as the writer-activity rules read it (:func:`read_recent_commits` makes them from the log)."""

    version: int
    timestamp_ms: int
    operation: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    read_version: int | None = None
    is_blind_append: bool | None = None
    engine_info: str | None = None
    #: dataChange=true adds and removes (a deletion-vector re-add is both, under one path).
    adds: tuple[TouchedFile, ...] = ()
    removes: tuple[TouchedFile, ...] = ()
    #: File actions with dataChange=false (a compaction's rewrites).
    rearranged_files: int = 0

    @property
    def kind(self) -> str:
        return classify_commit(self)


def classify_commit(c: RecentCommit) -> str:
    """``append``, ``dml``, ``deltalog``, ``maintenance`` or ``other`` (see the module docstring).

    Data changes decide first, whoever wrote them: removing data, or an operation that reads the
    table to write (DELETE, UPDATE, MERGE, even one that matched nothing), is ``dml``; adding
    only is an ``append`` (a deltalog commit request is one too). A commit that only rearranges
    files (``dataChange=false``) is ``deltalog``'s when it names deltalog as its engine, else
    another engine's ``maintenance``. Anything else (metadata, vacuum markers) is ``other``.
    """
    op = (c.operation or "").upper()
    if c.removes or op in DML_OPERATIONS:
        return "dml"
    if c.adds:
        return "append"
    if c.rearranged_files:
        return "deltalog" if (c.engine_info or "").startswith(ENGINE_PREFIX) else "maintenance"
    return "other"


def partition_key(values: dict[str, Any] | None) -> tuple[tuple[str, str | None], ...]:
    """A file's partition as a sorted tuple of (column, value): one spelling for the log's maps."""
    return tuple(
        sorted(((str(k), None if v is None else str(v)) for k, v in (values or {}).items()), key=lambda kv: kv[0])
    )


# --- predicates --------------------------------------------------------------------------

_COMPARISON = re.compile(r"^(?P<left>.+?)\s*(?P<op><=>|==|=|<=|>=|<|>|!=|<>)\s*(?P<right>.+)$", re.S)
_IN = re.compile(r"^(?P<left>.+?)\s+IN\s*\((?P<items>.*)\)$", re.S | re.I)
_ATTRIBUTE_ID = re.compile(r"#\d+[A-Za-z]?$")
_NUMBER = re.compile(r"^[-+]?\d+(\.\d+)?([eE][-+]?\d+)?[LDSYBFdlsybf]?$")


def _strip_parens(text: str) -> str:
    text = text.strip()
    while text.startswith("(") and text.endswith(")") and _balanced_inside(text):
        text = text[1:-1].strip()
    return text


def _balanced_inside(text: str) -> bool:
    """Whether the outer parentheses of ``text`` enclose all of it (``(a) AND (b)`` is not enclosed)."""
    depth = 0
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
            continue
        if ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0 and i != len(text) - 1:
                return False
    return depth == 0


def _conjuncts(text: str) -> list[str]:
    """The top-level AND terms of a SQL predicate (parentheses and quotes respected)."""
    text = _strip_parens(text)
    parts, depth, quote, start, i = [], 0, None, 0, 0
    upper = text.upper()
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and upper.startswith(" AND ", i):
            parts.append(text[start:i])
            start = i + 5
            i += 5
            continue
        i += 1
    parts.append(text[start:])
    out: list[str] = []
    for p in parts:
        p = _strip_parens(p)
        if p != text:
            out.extend(_conjuncts(p))
        elif p:
            out.append(p)
    return out


def _column(token: str, columns: set[str]) -> str | None:
    """The lower-cased column a token names (``day#479``, ``t.day``, `` `day` ``, ``'day``), or None for a literal."""
    t = token.strip().lstrip("'")
    if not t or t[0] in '"' or (token.strip().startswith("'") and token.strip().endswith("'")):
        return None  # a quoted string
    resolved = bool(_ATTRIBUTE_ID.search(t))
    t = _ATTRIBUTE_ID.sub("", t)
    name = t.split(".")[-1].strip("`").lower()
    if resolved or "." in t or t.startswith("`") or name in columns:
        return name
    return None


def _is_literal(token: str, columns: set[str]) -> bool:
    t = token.strip()
    if not t:
        return False
    if t.startswith("'") and t.endswith("'") and len(t) > 1:
        return True
    if _NUMBER.match(t) or t.upper() in ("NULL", "TRUE", "FALSE"):
        return True
    if any(ch in t for ch in "()+-*/%"):
        return False
    # Delta Spark prints string literals unquoted (``day#479 = d1``): a bare word that names no column.
    return _column(t, columns) is None and bool(re.match(r"^[\w:.\-]+$", t))


def pins_partitions(texts: Iterable[str], partition_columns: Sequence[str], columns: Iterable[str] = ()) -> bool:
    """Whether some top-level conjunct of the predicates pins a partition column to literals.

    ``day = 'x'``, ``day#479 = x`` (Delta Spark's spelling), ``day IN ('a', 'b')``, ``day >= 3``
    pin; ``t.day = s.day`` (a MERGE comparing columns) and ``id = 7`` do not. ``columns``: the
    table's column names, which tell a bare column from Delta Spark's unquoted string literal.
    """
    parts = {c.lower() for c in partition_columns}
    if not parts:
        return False
    known = {c.lower() for c in columns} | parts
    for text in texts:
        for term in _conjuncts(text):
            m = _IN.match(term)
            if m and _column(m.group("left"), known) in parts:
                if all(_is_literal(x, known) for x in _split_items(m.group("items"))):
                    return True
                continue
            m = _COMPARISON.match(term)
            if not m:
                continue
            left, right = m.group("left"), m.group("right")
            if _column(left, known) in parts and _is_literal(right, known):
                return True
            if _column(right, known) in parts and _is_literal(left, known):
                return True
    return False


def _split_items(text: str) -> list[str]:
    items, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [i.strip() for i in items if i.strip()]


def predicate_texts(parameters: dict[str, Any]) -> list[str]:
    """The predicate strings of a commit's ``operationParameters`` (a JSON list, or one string)."""
    out: list[str] = []
    for key in ("predicate", "mergePredicate"):
        raw = parameters.get(key)
        if raw is None:
            continue
        value: Any = raw
        if isinstance(raw, str):
            try:
                value = json.loads(raw)
            except ValueError:
                value = raw
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, list):
            out.extend(str(v) for v in value if isinstance(v, str))
    return out


# --- DML transactions --------------------------------------------------------------------


@dataclass(frozen=True)
class DmlCommit:
    """One DELETE/UPDATE/MERGE (or other data-removing) commit: when its transaction ran and what it touched."""

    version: int
    operation: str
    commit_ms: int
    #: When its transaction took its snapshot (estimated; None: unknown).
    start_ms: int | None
    #: Partitions it touched (removes and data adds); empty on an unpartitioned table.
    partitions: frozenset[tuple[tuple[str, str | None], ...]]
    #: Its read covers the whole table (no partition pinned, or the table is unpartitioned).
    table_wide: bool
    #: Paths it removed or wrote (a deletion-vector re-add names the file it marked).
    paths: frozenset[str]

    @property
    def duration_ms(self) -> int | None:
        return None if self.start_ms is None else max(0, self.commit_ms - self.start_ms)

    def touches(self, partition: tuple[tuple[str, str | None], ...]) -> bool:
        """Whether a commit landing in ``partition`` while this transaction ran would conflict with it."""
        return self.table_wide or partition in self.partitions

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "operation": self.operation,
            "commit_ms": self.commit_ms,
            "duration_ms": self.duration_ms,
            "table_wide": self.table_wide,
            "partitions": [dict(p) for p in sorted(self.partitions, key=str)],
            "files": len(self.paths),
        }


def _dml_commit(
    c: RecentCommit, partition_columns: Sequence[str], columns: Sequence[str], stamp_of: dict[int, int]
) -> DmlCommit:
    touched = c.adds + c.removes
    partitions = frozenset(f.partition for f in touched if f.partition)
    params = c.parameters or {}
    if not partition_columns:
        table_wide = True
    else:
        mode = str(params.get("partitionOverwriteMode") or "").upper()
        table_wide = not (mode == "DYNAMIC" or pins_partitions(predicate_texts(params), partition_columns, columns))
        if str(params.get("mode") or "").lower() == "overwrite" and mode != "DYNAMIC" and not predicate_texts(params):
            table_wide = True
    start = None
    raw = (c.metrics or {}).get("executionTimeMs")
    try:
        elapsed = int(raw) if raw is not None else None
    except (TypeError, ValueError):
        elapsed = None
    # It read its read version, so it had its snapshot before the next commit landed (an upper bound of
    # the start): a writer's timer can start well after its snapshot (analysis, a loaded driver).
    bound = None
    if c.read_version is not None and c.read_version + 1 in stamp_of and c.read_version + 1 < c.version:
        bound = stamp_of[c.read_version + 1]
    if elapsed is not None and elapsed >= 0:
        start = c.timestamp_ms - elapsed - START_SLACK_MS
        if bound is not None:
            start = min(start, bound)
    else:
        start = bound
    return DmlCommit(
        version=c.version,
        operation=(c.operation or "?").upper(),
        commit_ms=c.timestamp_ms,
        start_ms=start,
        partitions=partitions,
        table_wide=table_wide,
        paths=frozenset(f.path for f in touched),
    )


@dataclass(frozen=True)
class Cadence:
    """The rhythm of one stream of DML commits (those a commit in one place would conflict with).

    ``pairs``: for the newest consecutive commits, (``gap_ms``, ``cycle_ms``) measured from the
    earlier commit: when the next transaction took its snapshot, when it committed. A gap is
    None when the next transaction's start is unknown (a writer that records no
    ``executionTimeMs``, whose ``readVersion`` is the earlier commit itself): then only its
    commits are known, and the quiet moment is taken to be right after one of them.
    """

    pairs: tuple[tuple[int | None, int], ...]
    last_version: int
    last_commit_ms: int
    commits: int
    #: The newest commit's duration (what a single commit tells of its writer; reported, never deciding).
    last_duration_ms: int | None = None

    @property
    def has_rhythm(self) -> bool:
        """A cycle seen twice (:data:`MIN_RHYTHM_PAIRS`): a writer that repeats. Fewer commits are a one-off until it does."""
        return len(self.pairs) >= MIN_RHYTHM_PAIRS

    @property
    def horizon_ms(self) -> int | None:
        """How long after its last commit the stream counts as alive (its partitions hot); None: no rhythm, never."""
        if not self.has_rhythm:
            return None
        return max(MIN_HORIZON_MS, int(2 * max(c for _, c in self.pairs)))

    def alive(self, now_ms: int) -> bool:
        """Whether the stream's writers are still working: a rhythm, and a last commit within its horizon."""
        horizon = self.horizon_ms
        return horizon is not None and now_ms - self.last_commit_ms <= horizon

    @property
    def longest_cycle_ms(self) -> int | None:
        return max(c for _, c in self.pairs) if self.pairs else None

    def quiet_ms(self) -> int | None:
        """How long the writers stay quiet after a commit: the lower decile of their recent known gaps (None: unknown)."""
        known = sorted(g for g, _ in self.pairs if g is not None)
        return max(0, known[len(known) // 10]) if known else None

    def overdue(self, offset_ms: float) -> bool:
        """No commit for ``offset_ms`` is past the stream's horizon: its rhythm is broken, the writer stopped.

        The same rule as :meth:`alive` (twice the longest recent cycle, at least a minute): a writer
        only somewhat later than in any recent cycle is far more likely in a longer transaction than
        usual (a loaded cluster, a bigger batch) than gone, and a commit landing then fails it.
        """
        horizon = self.horizon_ms
        return horizon is not None and offset_ms > horizon

    def risk(self, offset_ms: float) -> float | None:
        """The chance a transaction of the writers runs ``offset_ms`` after their last commit, given
        that no commit of theirs came since (None: no pair with a known start, the rhythm is unknown).

        Of the recent cycles that lasted longer than ``offset_ms`` (the others would have shown their
        commit by now), the share whose next transaction had started by then; when every recent cycle
        was shorter the writers are late, most likely inside a longer transaction: 1.0 (until the
        horizon says they stopped, :meth:`overdue`).
        """
        known = [(g, c) for g, c in self.pairs if g is not None]
        if not known:
            return None
        open_cycles = [(g, c) for g, c in known if c > offset_ms]
        if not open_cycles:
            return 1.0
        inside = sum(1 for gap, _ in open_cycles if gap <= offset_ms)
        return inside / len(open_cycles)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pairs": [list(p) for p in self.pairs],
            "last_version": self.last_version,
            "last_commit_ms": self.last_commit_ms,
            "commits": self.commits,
            "last_duration_ms": self.last_duration_ms,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Cadence:
        return cls(
            pairs=tuple((None if g is None else int(g), int(c)) for g, c in d.get("pairs") or []),
            last_version=int(d["last_version"]),
            last_commit_ms=int(d["last_commit_ms"]),
            commits=int(d.get("commits") or 0),
            last_duration_ms=None if d.get("last_duration_ms") is None else int(d["last_duration_ms"]),
        )

    def describe(self) -> str:
        """``7 commits, a cycle of 3.1 s, 2.0 s running, quiet for 0.9 s after each`` (median figures)."""
        if not self.pairs:
            d = self.last_duration_ms
            return f"{self.commits} commit" + (f" ({d / 1000:.1f} s running)" if d is not None else "")
        cycles = sorted(c for _, c in self.pairs)
        quiet = sorted(g for g, _ in self.pairs if g is not None)
        head = f"{self.commits} commits, a cycle of {cycles[len(cycles) // 2] / 1000:.1f} s"
        if not quiet:
            return head + " (median; their transactions' starts are not recorded)"
        return head + f", quiet for {max(0, quiet[len(quiet) // 2]) / 1000:.1f} s after each (median)"


def cadence_of(stream: Sequence[DmlCommit]) -> Cadence | None:
    """The cadence of DML commits in version order (None for none)."""
    if not stream:
        return None
    ordered = sorted(stream, key=lambda d: d.version)
    pairs = []
    for prev, nxt in zip(ordered, ordered[1:]):
        cycle = max(1, nxt.commit_ms - prev.commit_ms)
        gap = None if nxt.start_ms is None else int(min(nxt.start_ms - prev.commit_ms, cycle))
        pairs.append((gap, int(cycle)))
    last = ordered[-1]
    return Cadence(tuple(pairs[-CADENCE_PAIRS:]), last.version, last.commit_ms, len(ordered), last.duration_ms)


@dataclass(frozen=True)
class WriterOverlap:
    """A writer commit that landed after a deltalog rewrite it had not read: it checked its conflicts against ours."""

    version: int
    operation: str | None
    kind: str
    read_version: int
    deltalog_versions: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "operation": self.operation,
            "kind": self.kind,
            "read_version": self.read_version,
            "deltalog_versions": list(self.deltalog_versions),
        }


def overlaps(commits: Sequence[RecentCommit]) -> list[WriterOverlap]:
    """Writer commits (appends, DML) whose ``readVersion`` is older than a deltalog rewrite before them."""
    ours = sorted(c.version for c in commits if c.kind == "deltalog")
    out = []
    for c in commits:
        kind = c.kind
        if kind not in ("append", "dml") or c.read_version is None:
            continue
        between = tuple(v for v in ours if c.read_version < v < c.version)
        if between:
            out.append(WriterOverlap(c.version, c.operation, kind, c.read_version, between))
    return sorted(out, key=lambda o: o.version)


@dataclass(frozen=True)
class WriterActivity:
    """The writers of a table's recent commits (see the module docstring)."""

    partition_columns: tuple[str, ...]
    now_ms: int
    #: Versions read: (oldest, newest); None when no commit was in the window.
    versions: tuple[int, int] | None
    commits_read: int
    kinds: dict[str, int]
    dml: tuple[DmlCommit, ...]
    overlaps: tuple[WriterOverlap, ...] = ()
    #: deltalog rewrites in the window, and the bins their commits dropped for conflicts (operationMetrics).
    deltalog_commits: int = 0
    bins_dropped: int = 0

    @property
    def any_dml(self) -> bool:
        return bool(self.dml)

    def stream(self, partition: tuple[tuple[str, str | None], ...] | None) -> list[DmlCommit]:
        """The DML commits a commit in ``partition`` (None: anywhere, the whole table) would have conflicted with."""
        if partition is None:
            return list(self.dml)
        return [d for d in self.dml if d.touches(partition)]

    def cadence(self, partition: tuple[tuple[str, str | None], ...] | None) -> Cadence | None:
        return cadence_of(self.stream(partition))

    def table_wide_alive(self) -> bool:
        """Whether a whole-table DML writer is still active (every commit anywhere may meet it)."""
        c = cadence_of([d for d in self.dml if d.table_wide])
        return c is not None and c.alive(self.now_ms)

    def _pinned_partitions(self, commits: Iterable[DmlCommit]) -> dict[tuple[tuple[str, str | None], ...], int]:
        """The partitions partition-pinned ``commits`` touched, each with the newest version that did."""
        seen: dict[tuple[tuple[str, str | None], ...], int] = {}
        for d in commits:
            if d.table_wide:
                continue
            for p in d.partitions:
                seen[p] = max(seen.get(p, -1), d.version)
        return seen

    def moving_partitions(self) -> list[tuple[tuple[str, str | None], ...]]:
        """Partitions the table's DML writers move between (newest first; none when they stay in one).

        A corrections job that pins one of several partitions per statement (``WHERE day = 'd5'``,
        then ``d7``, then ``d4``) has a rhythm as a whole long before each partition has one of its
        own: its next transaction may pin any of them. So a partition touched by the newest
        :data:`CADENCE_PAIRS` + 1 DML commits is hot while the table's DML stream as a whole is
        alive and leaves quiet moments after its commits (one writer, or writers taking turns);
        when that stream has none (several writers overlapping), nothing says which of them will
        come back where, and such a partition stays cold, as before (or hot by a rhythm of its own).
        A partition with a rhythm of its own is listed too: the writer's rhythm as a whole is the one
        that tells when it stopped (a day it pinned three times long ago is not cold while the job
        that pinned it still runs and may pin it next).
        """
        whole = self.cadence(None)
        if whole is None or not whole.alive(self.now_ms):
            return []
        risk = whole.risk(MOVING_QUIET_OFFSET_MS)
        if risk is not None and risk > MOVING_RISK_LIMIT:
            return []
        recent = sorted(self.dml, key=lambda d: d.version)[-(CADENCE_PAIRS + 1) :]
        seen = self._pinned_partitions(recent)
        if len(seen) < 2:  # a writer that stays in one partition: that partition's own rhythm is the writer's
            return []
        return sorted(seen, key=lambda p: (-seen[p], str(p)))

    def hot_partitions(self) -> list[tuple[tuple[str, str | None], ...]]:
        """Partitions a partition-pinned DML writer still working touched (newest first): those with a
        rhythm of their own, and those the writers move between (:meth:`moving_partitions`)."""
        seen = self._pinned_partitions(self.dml)
        hot = {p for p in seen if (c := self.cadence(p)) is not None and c.alive(self.now_ms)}
        hot.update(self.moving_partitions())
        return sorted(hot, key=lambda p: (-seen[p], str(p)))

    def overlap_counts(self) -> dict[str, int]:
        """Writer commits that landed after a deltalog rewrite they had not read, by kind (``dml``, ``append``)."""
        out = {"dml": 0, "append": 0}
        for o in self.overlaps:
            out[o.kind] = out.get(o.kind, 0) + 1
        return out

    def summary_line(self) -> str:
        """One line: the DML writers seen, where they are working, and the overlaps with our commits."""
        if not self.commits_read:
            return "writers: no commit in the window"
        dml = len(self.dml)
        if not dml:
            return f"writers: {self.commits_read} recent commits, no DELETE/UPDATE/MERGE"
        cad = self.cadence(None)
        o = self.overlap_counts()
        if cad is not None and not cad.has_rhythm:
            state = f"no rhythm yet ({cad.describe()}): nothing deferred for them"
        else:
            where = "the whole table" if self.table_wide_alive() else f"{len(self.hot_partitions())} partitions"
            state = f"{'active' if cad is not None and cad.alive(self.now_ms) else 'stopped'}; working on {where}"
        return (
            f"writers: {dml} DELETE/UPDATE/MERGE commits of {self.commits_read} ({state}); "
            f"{o['dml']} of them and {o['append']} appends landed after a deltalog rewrite they had not read"
        )

    def to_dict(self) -> dict[str, Any]:
        cad = self.cadence(None)
        return {
            "versions": list(self.versions) if self.versions else None,
            "commits_read": self.commits_read,
            "kinds": dict(self.kinds),
            "dml_commits": len(self.dml),
            "dml_active": bool(cad is not None and cad.alive(self.now_ms)),
            "table_wide_dml_active": self.table_wide_alive(),
            "hot_partitions": [dict(p) for p in self.hot_partitions()],
            "moving_partitions": [dict(p) for p in self.moving_partitions()],
            "cadence": cad.describe() if cad is not None else None,
            "deltalog_commits": self.deltalog_commits,
            "writer_overlaps": self.overlap_counts(),
            "overlapping_commits": [o.to_dict() for o in self.overlaps[-20:]],
            "bins_dropped_for_conflicts": self.bins_dropped,
        }


def activity_from_commits(
    commits: Sequence[RecentCommit],
    partition_columns: Sequence[str] = (),
    columns: Sequence[str] = (),
    *,
    now_ms: int | None = None,
) -> WriterActivity:
    """What :class:`WriterActivity` the ``commits`` show (any order; ``columns``: the table's column names).

    ``now_ms`` (default: this machine's clock) is compared with the commits' timestamps; a commit
    that seems to come from the future (a writer's clock ahead of ours) counts as just now.
    """
    ordered = sorted(commits, key=lambda c: c.version)
    now = int(time.time() * 1000) if now_ms is None else int(now_ms)
    if ordered:
        now = max(now, ordered[-1].timestamp_ms)
    stamp_of = {c.version: c.timestamp_ms for c in ordered}
    kinds = {k: 0 for k in KINDS}
    dml = []
    dropped = 0
    for c in ordered:
        kind = c.kind
        kinds[kind] += 1
        if kind == "dml":
            dml.append(_dml_commit(c, partition_columns, columns, stamp_of))
        elif kind == "deltalog":
            try:
                dropped += int((c.metrics or {}).get("numBinsDroppedForConflicts") or 0)
            except (TypeError, ValueError):
                pass
    return WriterActivity(
        partition_columns=tuple(partition_columns),
        now_ms=now,
        versions=(ordered[0].version, ordered[-1].version) if ordered else None,
        commits_read=len(ordered),
        kinds=kinds,
        dml=tuple(dml),
        overlaps=tuple(overlaps(ordered)),
        deltalog_commits=kinds["deltalog"],
        bins_dropped=dropped,
    )


# --- reading the log ---------------------------------------------------------------------


def _touched(action: dict[str, Any]) -> TouchedFile:
    return TouchedFile(str(action.get("path")), partition_key(action.get("partitionValues")))


def recent_commit(version: int, timestamp_ms: int, actions: Sequence[dict[str, Any]]) -> RecentCommit:
    """One commit's record from its parsed actions (``timestamp_ms``: its commit time)."""
    info: dict[str, Any] = {}
    adds: list[TouchedFile] = []
    removes: list[TouchedFile] = []
    rearranged = 0
    for a in actions:
        if "commitInfo" in a and isinstance(a["commitInfo"], dict):
            info = a["commitInfo"]
        elif "add" in a and isinstance(a["add"], dict):
            if a["add"].get("dataChange", True) is False:
                rearranged += 1
            else:
                adds.append(_touched(a["add"]))
        elif "remove" in a and isinstance(a["remove"], dict):
            if a["remove"].get("dataChange", True) is False:
                rearranged += 1
            else:
                removes.append(_touched(a["remove"]))
    read_version = info.get("readVersion")
    blind = info.get("isBlindAppend")
    parameters, metrics = info.get("operationParameters"), info.get("operationMetrics")
    return RecentCommit(
        version=version,
        timestamp_ms=timestamp_ms,
        operation=info.get("operation") if isinstance(info.get("operation"), str) else None,
        parameters=parameters if isinstance(parameters, dict) else {},
        metrics=metrics if isinstance(metrics, dict) else {},
        read_version=read_version if isinstance(read_version, int) and not isinstance(read_version, bool) else None,
        is_blind_append=blind if isinstance(blind, bool) else None,
        engine_info=info.get("engineInfo") if isinstance(info.get("engineInfo"), str) else None,
        adds=tuple(adds),
        removes=tuple(removes),
        rearranged_files=rearranged,
    )


def read_recent_commits(
    storage: Storage,
    listing: LogListing,
    configuration: dict[str, str] | None = None,
    *,
    max_commits: int = DEFAULT_MAX_COMMITS,
    window_ms: int = DEFAULT_WINDOW_MS,
    now_ms: int | None = None,
    after_version: int | None = None,
) -> list[RecentCommit]:
    """The newest commits of ``listing`` (at most ``max_commits``, none older than ``window_ms``), oldest first.

    Commit files older than the window by the listing's times are not read at all. A
    commit's timestamp is its in-commit timestamp where the table has them (from its
    enablement version on), else the file's time, made monotonic over the commits read.
    ``after_version``: only commits after it (what a wait for a quiet moment polls).
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    versions = sorted((v for v in listing.commits if after_version is None or v > after_version), reverse=True)
    chosen = []
    for v in versions[: max(0, max_commits)]:
        f = listing.commits[v]
        try:
            mtime = f.modification_time
        except FileNotFoundError:  # removed by log cleanup since the listing
            continue
        if now - mtime > window_ms:
            break
        chosen.append((v, f, mtime))
    chosen.reverse()
    if not chosen:
        return []
    contents = read_commit_files(storage, [f for _, f, _ in chosen])
    ict_from = ict_enablement_version(configuration or {})
    out = []
    prev = -1
    for (v, f, mtime), data in zip(chosen, contents):
        actions = parse_commit(data, f.name)
        stamp = max(mtime, prev + 1)
        if ict_from is not None and v >= ict_from:
            for a in actions:
                ict = (
                    a.get("commitInfo", {}).get("inCommitTimestamp") if isinstance(a.get("commitInfo"), dict) else None
                )
                if isinstance(ict, int) and not isinstance(ict, bool):
                    stamp = ict
                    break
        prev = stamp
        out.append(recent_commit(v, stamp, actions))
    return out


def writer_activity(
    storage: Storage,
    snapshot: Snapshot,
    *,
    max_commits: int = DEFAULT_MAX_COMMITS,
    window_ms: int = DEFAULT_WINDOW_MS,
    now_ms: int | None = None,
) -> WriterActivity:
    """The writers of ``snapshot``'s table, from its newest commits (one small read each; see :func:`read_recent_commits`)."""
    listing = snapshot.segment.listing
    md = snapshot.metadata
    commits = read_recent_commits(
        storage, listing, md.configuration, max_commits=max_commits, window_ms=window_ms, now_ms=now_ms
    )
    commits = [c for c in commits if c.version <= snapshot.version]
    columns = [f.name for f in md.schema]
    return activity_from_commits(commits, md.partition_columns, columns, now_ms=now_ms)
