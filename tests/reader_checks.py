"""The readers beside Delta Spark: DuckDB's ``delta_scan`` and deltalake read every version of the tables we
maintain, and must read the rows expected of it.

Delta Spark checks the corpus tables by content hash (tests/oracle_checks.py); these two readers are
in-process and cheap (milliseconds a version), so they read every version an operation may have
changed right after the operation, with no JVM. Rows are compared in the form of
``table_rows.Rows`` (its docstring says which representations are normalised and why).

What a reader reads of the untouched corpus table is the baseline: the expected rows of every
version are deltalake's reads of it (DuckDB's where deltalake cannot read the table), each read's
row count must be Delta Spark's, and every other reader must read the same rows, up to its
recorded limitations (:data:`LIMITS`). A limitation is the reader's own: it shows on the table
as Delta Spark wrote it, before we touched it, and the baseline check holds it both ways (the
limitation must still occur; a reader that starts reading such tables fails the check until its
entry goes). After each of our operations, each reader must read every re-read version with the
rows expected of it (a commit request's version: the previous rows plus the copied file's); a
reader that read the untouched table and cannot read ours, or reads other rows, is our defect.

Kept free of pytest (the oracle checks import it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from duckdb_readers import duckdb_delta_rows
from table_rows import Rows, deltalake_rows

__all__ = [
    "COST",
    "DELTALAKE",
    "DUCKDB",
    "DUCKDB_ICEBERG",
    "LIMITS",
    "READERS",
    "Limit",
    "ReaderCheck",
    "TableShape",
    "Untouched",
    "corpus_untouched",
    "delta_readers_agree",
    "expected_for",
    "read_as_expected",
    "uniform_readers_agree",
    "untouched_reads",
]

DELTALAKE = "deltalake"
DUCKDB = "DuckDB delta_scan"

#: Each reader: (path, version) -> the rows it reads.
READERS: dict[str, Callable[[str, int], Rows]] = {DELTALAKE: deltalake_rows, DUCKDB: duckdb_delta_rows}

UNREADABLE = "cannot read the table"
NULL_PARTITIONS = "reads every partition column as NULL"


@dataclass(frozen=True)
class Limit:
    """A reader's own limitation on tables with ``feature`` (a protocol feature name)."""

    reader: str
    feature: str
    effect: str  # UNREADABLE | NULL_PARTITIONS
    why: str
    says: str = ""  # UNREADABLE: a part of the reader's error


#: The limitations of the pinned readers (requirements.lock), each seen on the untouched corpus table.
LIMITS: tuple[Limit, ...] = (
    Limit(
        DUCKDB,
        "geospatial",
        UNREADABLE,
        "delta-kernel-rs parses no geometry or geography column type",
        says="Unsupported Delta table type: 'geometry",
    ),
    Limit(
        DUCKDB,
        "columnMapping",
        NULL_PARTITIONS,
        "duckdb/duckdb-delta#343: the partition values are looked up by logical name, the log keys them by "
        "physical name (PROTOCOL.md, Column Mapping); the other columns and the row count are right",
    ),
    Limit(
        DELTALAKE,
        "geospatial",
        UNREADABLE,
        "its kernel parses no geometry or geography column type",
        says="Unsupported Delta table type: 'geometry",
    ),
    Limit(
        DELTALAKE,
        "typeWidening",
        UNREADABLE,
        "deltalake 1.6 refuses the reader feature",
        says="Unsupported table features required: [TypeWidening]",
    ),
    Limit(
        DELTALAKE,
        "vacuumProtocolCheck",
        UNREADABLE,
        "deltalake 1.6 refuses the reader feature",
        says="Unsupported table features required: [VacuumProtocolCheck]",
    ),
)


@dataclass(frozen=True)
class TableShape:
    """What the limitations depend on: the table's features and partition columns (logical names)."""

    features: frozenset[str]
    partition_columns: tuple[str, ...]

    @classmethod
    def of(cls, protocol: dict[str, Any], partition_columns: list[str]) -> TableShape:
        from deltalog.protocol.table_protocol import Protocol

        p = Protocol.from_action(protocol)
        return cls(frozenset(p.effective_reader_features() | p.effective_writer_features()), tuple(partition_columns))

    @classmethod
    def of_entry(cls, entry: dict[str, Any]) -> TableShape:
        """A corpus table's shape at its latest version (from the entry Delta Spark recorded)."""
        state = entry["states"][str(entry["latest"])]
        return cls.of(state["protocol"], state["metadata"]["partitionColumns"])

    @classmethod
    def of_table(cls, path: str) -> TableShape:
        from deltalog import DeltaTable

        snap = DeltaTable(path).snapshot()
        return cls.of(snap.protocol.to_dict(), list(snap.metadata.partition_columns))

    def limits(self, reader: str) -> list[Limit]:
        return [
            limit
            for limit in LIMITS
            if limit.reader == reader
            and limit.feature in self.features
            and (limit.effect != NULL_PARTITIONS or self.partition_columns)
        ]


def expected_for(reader: str, rows: Rows, shape: TableShape) -> Rows | None:
    """What ``reader`` reads of a version whose rows are ``rows`` (None: it cannot read such a table)."""
    for limit in shape.limits(reader):
        if limit.effect == UNREADABLE:
            return None
        if limit.effect == NULL_PARTITIONS:
            rows = rows.with_nulls(set(shape.partition_columns))
    return rows


#: What the reads of this process cost: how many, and the CPU seconds of the process while they ran (the
#: readers' threads included; the JVM of the oracle is another process).
COST = {"reads": 0, "cpu_s": 0.0}


def _read(reader: str, path: str, version: int) -> Rows | str:
    return _timed(READERS[reader], path, version)


def _timed(read: Callable[..., Rows], *args: Any) -> Rows | str:
    """``read(*args)``, or the first line of its error; counted in :data:`COST`."""
    t0 = time.process_time()
    try:
        return read(*args)
    except Exception as exc:  # noqa: BLE001 - a reader's error is the finding (its first line)
        return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:240]
    finally:
        COST["reads"] += 1
        COST["cpu_s"] += time.process_time() - t0


@dataclass
class Untouched:
    """Every reader's reads of every version of an untouched table, the expected rows and the findings."""

    name: str
    shape: TableShape
    reads: dict[str, dict[int, Rows | str]]
    reference: str | None
    expected: dict[int, Rows]
    findings: list[str] = field(default_factory=list)

    def readers(self) -> list[str]:
        """The readers that read this table (every one without an UNREADABLE limitation on it)."""
        return [r for r in READERS if not any(limit.effect == UNREADABLE for limit in self.shape.limits(r))]


_UNTOUCHED: dict[tuple[str, int], Untouched] = {}


def untouched_reads(name: str, path: str, shape: TableShape, counts: dict[int, Any]) -> Untouched:
    """Every reader reads every version of the untouched table at ``path`` (``counts``: Delta Spark's row count
    per version, or its "unreadable: ..." text), once per path and process; the findings say where a reader
    is not what :data:`LIMITS` records (both ways)."""
    key = (path, max(counts))
    if key in _UNTOUCHED:
        return _UNTOUCHED[key]
    versions = sorted(counts)
    reads = {reader: {v: _read(reader, path, v) for v in versions} for reader in READERS}
    readable = [r for r in READERS if all(isinstance(x, Rows) for x in reads[r].values())]
    reference = next((r for r in READERS if r in readable), None)  # deltalake first
    expected: dict[int, Rows] = {}
    if reference is not None:
        expected = {v: rows for v, rows in reads[reference].items() if isinstance(rows, Rows)}
    found = Untouched(name, shape, reads, reference, expected)
    found.findings = _findings(found, counts)
    _UNTOUCHED[key] = found
    return found


def corpus_untouched(entry: dict[str, Any], path: str) -> Untouched:
    """:func:`untouched_reads` of a corpus table (its entry: Delta Spark's row counts and protocol)."""
    counts = {int(v): h[0] if isinstance(h, list) else h for v, h in entry["hashes"].items()}
    return untouched_reads(entry["name"], path, TableShape.of_entry(entry), counts)


def _findings(u: Untouched, counts: dict[int, Any]) -> list[str]:
    out = []
    for reader, reads in u.reads.items():
        limits = u.shape.limits(reader)
        unreadable = [limit for limit in limits if limit.effect == UNREADABLE]
        if unreadable:
            limit = unreadable[0]
            read = [v for v, r in reads.items() if isinstance(r, Rows)]
            if read:
                out.append(
                    f"{u.name}: {reader} now reads v{read[0]}.. of a {limit.feature} table, recorded as unreadable "
                    f"({limit.why}): take the entry out of LIMITS and let the checks read it"
                )
            out += [
                f"{u.name} v{v}: {reader} fails otherwise than recorded ({limit.says!r}): {e}"
                for v, e in reads.items()
                if isinstance(e, str) and limit.says not in e
            ]
            continue
        for v, r in reads.items():
            if isinstance(r, str):
                out.append(
                    f"{u.name} v{v}: {reader} cannot read the untouched table: {r} (if it is the reader's own "
                    "limitation, record it in LIMITS)"
                )
                continue
            spark = counts.get(v)
            if isinstance(spark, int | float) and len(r) != int(spark):
                out.append(f"{u.name} v{v}: {reader} reads {len(r)} rows, Delta Spark {int(spark)}")
            if v not in u.expected or reader == u.reference:
                continue
            want = expected_for(reader, u.expected[v], u.shape)
            if r == want:
                continue
            if r == u.expected[v]:
                limit = next(limit for limit in limits if limit.effect != UNREADABLE)
                out.append(
                    f"{u.name} v{v}: {reader} reads the table now despite its recorded limitation on "
                    f"{limit.feature} ({limit.why}): take the entry out of LIMITS"
                )
            else:
                out.append(
                    f"{u.name} v{v}: {reader} and {u.reference} read the untouched table differently: "
                    f"{r.difference(u.expected[v])}"
                )
    return out


@dataclass
class ReaderCheck:
    """The rows expected of each version of one maintained copy, and the readers' reads of it."""

    untouched: Untouched
    expected: dict[int, Rows] = field(default_factory=dict)
    reads: int = 0

    def __post_init__(self) -> None:
        if not self.expected:
            self.expected = dict(self.untouched.expected)

    @property
    def readers(self) -> list[str]:
        return self.untouched.readers() if self.untouched.reference else []

    def committed(self, path: str, old_latest: int, latest: int, added: int | None, after: str) -> list[str]:
        """The expected rows of versions ``old_latest`` + 1 .. ``latest`` our operation committed: those of the
        version before, or with ``added`` rows (a commit request: its first version), which must be rows the
        version before has (a copy of a live file) as the reference reader reads them."""
        if not self.readers or old_latest not in self.expected:
            return []
        problems = []
        for v in range(old_latest + 1, latest + 1):
            before = self.expected[v - 1]
            if not added or v != old_latest + 1:
                self.expected[v] = before
                continue
            reference = self.untouched.reference
            assert reference is not None
            got = _read(reference, path, v)
            self.reads += 1
            if isinstance(got, str):
                problems.append(f"{self.untouched.name} after {after}: {reference} cannot read v{v}: {got}")
                continue
            new = got.minus(before)
            if len(new) != added or new.minus(before) != Rows.of(before.columns, []) or got.minus(new) != before:
                problems.append(
                    f"{self.untouched.name} after {after}: {reference} v{v} is not v{v - 1} plus {added} of its rows: "
                    f"{got.difference(before)}"
                )
            self.expected[v] = got
        return problems

    def check(self, path: str, versions: list[int], after: str) -> list[str]:
        """Each reader reads ``versions`` of ``path``; the problems (a version it cannot read or reads otherwise)."""
        problems = []
        for v in versions:
            if v in self.expected:
                label = f"{self.untouched.name} after {after}"
                problems += read_as_expected(path, v, self.expected[v], self.untouched.shape, label, self.readers)
                self.reads += len(self.readers)
        return problems


def read_as_expected(
    path: str, version: int, rows: Rows, shape: TableShape, label: str, readers: list[str] | None = None
) -> list[str]:
    """Each reader (default: every one) reads ``version`` of ``path``, where the rows are ``rows``, as
    :func:`expected_for` says; the problems (a version it cannot read, or reads otherwise)."""
    problems = []
    for reader in READERS if readers is None else readers:
        want = expected_for(reader, rows, shape)
        if want is None:
            continue
        got = _read(reader, path, version)
        if isinstance(got, str):
            problems.append(f"{label}: {reader} cannot read v{version}: {got}")
        elif got != want:
            problems.append(f"{label}: {reader} v{version}: {got.difference(want)}")
    return problems


# --- one version of a table a test made: the readers against deltalake's rows ---------------------------

DUCKDB_ICEBERG = "DuckDB iceberg_scan"


def delta_readers_agree(path: str, version: int, shape: TableShape | None = None) -> list[str]:
    """DuckDB's ``delta_scan`` of ``version`` against deltalake's rows (up to DuckDB's recorded limitations on
    such a table); the differences, empty when they agree."""
    theirs = _read(DELTALAKE, path, version)
    if isinstance(theirs, str):
        return [f"{path} v{version}: deltalake cannot read it: {theirs}"]
    return read_as_expected(path, version, theirs, shape or TableShape.of_table(path), path, [DUCKDB])


def uniform_readers_agree(path: str, version: int, snapshot_id: int | None = None) -> list[str]:
    """A UniForm table's Iceberg snapshot for Delta ``version`` (``snapshot_id``; None: the current one its
    ``version-hint.text`` names) read by DuckDB's ``iceberg_scan``, and the Delta version by its ``delta_scan``,
    against deltalake's rows of the version."""
    from duckdb_readers import duckdb_iceberg_rows

    theirs = _read(DELTALAKE, path, version)
    if isinstance(theirs, str):
        return [f"{path} v{version}: deltalake cannot read it: {theirs}"]
    got = _timed(duckdb_iceberg_rows, path, snapshot_id)
    at = f"snapshot {snapshot_id}" if snapshot_id is not None else "the current snapshot"
    out = []
    if isinstance(got, str):
        out.append(f"{path} v{version}: {DUCKDB_ICEBERG} cannot read {at}: {got}")
    elif got != theirs:
        out.append(f"{path} v{version}: {DUCKDB_ICEBERG} of {at}: {got.difference(theirs)}")
    return out + delta_readers_agree(path, version)
