"""Writer-aware compaction: which small files to leave to the writers for now, and which commits must wait.

Delta Spark fails a DELETE, UPDATE or MERGE whose transaction a compaction commit lands in
when the compaction added files to a partition the DML's read predicates match, or removed
files it read or removes (:mod:`deltalog.log.writer_activity` has the rules). A compaction
cannot change what it adds and removes, so it chooses *where* and *when*:

* **cold first**: files in partitions no active DML writer touches are compacted at once (a
  DML writer pinned to other partitions cannot conflict with them; a one-off DML commit is no
  active writer);
* **hot, with quiet moments**: files where an active writer works (its partitions; every file
  when it reads the whole table) are compacted in commits of their own, one per partition
  (one for the whole table when its writers read all of it), each rewritten just before and
  committed at a *quiet moment*: right after that writer's commit, when its last cycles say no
  transaction of it is running yet (:mod:`deltalog.compaction.quiet_moment` waits for it);
* **moving writers**: a partition the table's DML writers pinned lately while they move between
  partitions (one statement per partition; with or without a rhythm of its own), waits
  behind one gate for all such partitions (:data:`MOVING_GATE`): right after any DML commit of
  the table, when their stream as a whole leaves quiet moments
  (:meth:`~deltalog.log.writer_activity.WriterActivity.moving_partitions`); it is never
  deferred at planning, since which partition they come back to is unknown;
* **deferred**, said in the plan, the result and the history, with the reason: every file
  where the writers leave no quiet moment (their next transaction was already running right
  after more than :data:`RISK_LIMIT` of their recent commits: any commit there would fail one
  of them), and, at commit time, a batch whose writers did not give one within the wait.

Files a writer touched themselves are not left out: at a quiet moment no transaction of it
runs, so compacting them fails nobody (at worst the writer's own next commit takes an input
first, and that bin alone is dropped).

Only writers with a rhythm count: a partition is hot while at least three DML commits in the
recent log touched it (a cycle seen twice: :data:`~deltalog.log.writer_activity.MIN_RHYTHM_PAIRS`)
and the last one is within twice their longest cycle. A lone DELETE/UPDATE/MERGE, or a
script's two, tells nothing of a writer that will come back, so it defers nothing and gates
nothing: a compaction right after a one-off correction compacts its partition at once (the
activity still reports the commits). A writer that stopped (no commit
for twice its longest cycle, or weeks) leaves its partitions cold again; a table without DML
writers compacts as before. A small file never waits longer
than :data:`MAX_DEFERRAL_MS` (by its modification time), and a breached objective
(``overriding_objective``) defers nothing: its commits still wait for a quiet moment, and
commit when the wait runs out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from deltalog.log.writer_activity import Cadence, DmlCommit, WriterActivity, cadence_of

__all__ = [
    "COMMIT_MS",
    "GATE_SCOPES",
    "LOCAL_POLL_SECONDS",
    "REMOTE_POLL_SECONDS",
    "MAX_DEFERRAL_MS",
    "MOVING_GATE",
    "RISK_LIMIT",
    "TABLE_GATE",
    "DeferredFile",
    "FileChoice",
    "WriterGate",
    "WriterPlan",
    "choose",
    "gate_key",
    "lead_ms",
    "poll_seconds",
]

#: The share of recent cycles with a transaction running at the moment a commit would land above
#: which a moment is not quiet.
RISK_LIMIT = 0.1
#: A small file is compacted after this long whatever the writers do (by its modification time).
MAX_DEFERRAL_MS = 24 * 3_600_000
#: The gate key of commits that wait for whole-table writers.
TABLE_GATE = "table"
#: The gate key of commits in partitions the table's DML writers move between (each statement pins one).
MOVING_GATE = "partitions the writers move between"
#: What a gate's commits wait for: writers of one partition, whole-table writers, or every DML writer
#: of the table (those moving between partitions).
GATE_SCOPES = ("partition", "table", "moving")

#: How often a wait for a quiet moment looks for a new commit file, on a local table and on an object store.
LOCAL_POLL_SECONDS = 0.05
REMOTE_POLL_SECONDS = 0.5
#: How long a compaction commit takes to land once decided (conflict check, one put), locally and remotely.
COMMIT_MS = {True: 250, False: 1000}

Partition = tuple[tuple[str, str | None], ...]


def poll_seconds(local: bool) -> float:
    return LOCAL_POLL_SECONDS if local else REMOTE_POLL_SECONDS


def lead_ms(local: bool) -> int:
    """How long after a writer's commit appears ours lands: half a poll to see it, then the commit."""
    return int(poll_seconds(local) * 500) + COMMIT_MS[local]


def gate_key(partition: Partition | None) -> str:
    """The name of the wait a partition's commits share: ``table``, or the partition as JSON."""
    if partition is None:
        return TABLE_GATE
    return "partition " + json.dumps(dict(partition), sort_keys=True)


@dataclass(frozen=True)
class WriterGate:
    """What a commit of the bins behind one gate waits for: a quiet moment of these writers."""

    key: str
    #: The partition whose writers it waits for (None: the whole table's, or every DML writer's).
    partition: dict[str, str | None] | None
    cadence: Cadence
    #: ``partition``, ``table`` or ``moving`` (:data:`GATE_SCOPES`); derived from ``partition`` when not given.
    scope: str = ""

    def __post_init__(self) -> None:
        if not self.scope:
            object.__setattr__(self, "scope", "table" if self.partition is None else "partition")
        if self.scope not in GATE_SCOPES:
            raise ValueError(f"a writers' gate scope is one of {', '.join(GATE_SCOPES)}, got {self.scope!r}")

    def stream_matches(self, dml: DmlCommit) -> bool:
        """Whether a new DML commit belongs to the writers this gate waits for."""
        if self.scope == "moving":
            return True  # the cadence is every DML commit's: any of them opens the quiet moment
        if self.partition is None:
            return dml.table_wide
        key = tuple(sorted(self.partition.items(), key=lambda kv: kv[0]))
        return dml.touches(key)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "partition": self.partition, "scope": self.scope, "cadence": self.cadence.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WriterGate:
        part = d.get("partition")
        return cls(
            str(d["key"]),
            None if part is None else dict(part),
            Cadence.from_dict(d["cadence"]),
            str(d.get("scope") or ""),
        )


@dataclass(frozen=True)
class DeferredFile:
    """A small file left out of this compaction for the writers, and why."""

    path: str
    size: int
    partition_values: dict[str, str | None]
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size": self.size,
            "partition_values": dict(self.partition_values),
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DeferredFile:
        return cls(str(d["path"]), int(d["size"]), dict(d.get("partition_values") or {}), str(d["reason"]))


@dataclass(frozen=True)
class WriterPlan:
    """What a plan says about the writers: whether it minded them, what it deferred, what waits."""

    aware: bool
    #: The breached objective that overrode the deferral (None: none did).
    overriding_objective: str | None = None
    #: :meth:`WriterActivity.to_dict` of the activity the plan was made from (None: not looked at).
    activity: dict[str, Any] | None = None
    gates: dict[str, WriterGate] = field(default_factory=dict)
    deferred: list[DeferredFile] = field(default_factory=list)

    @property
    def deferred_bytes(self) -> int:
        return sum(f.size for f in self.deferred)

    def reasons(self) -> list[str]:
        """The distinct reasons of the deferred files, commonest first, each with its count."""
        counts: dict[str, int] = {}
        for f in self.deferred:
            counts[f.reason] = counts.get(f.reason, 0) + 1
        return [f"{n} files: {why}" for why, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]

    def summary_line(self) -> str:
        """``writers: 3 files deferred (...); 2 commits wait for a quiet moment`` (or why nothing is)."""
        if not self.aware:
            return "writers: not minded (writer_aware is off)"
        if self.activity is not None and not self.activity.get("dml_commits"):
            return "writers: no DELETE/UPDATE/MERGE in the recent log"
        parts = []
        if self.deferred:
            parts.append(f"{len(self.deferred)} files deferred ({'; '.join(self.reasons()[:2])})")
        if self.gates:
            parts.append(f"{len(self.gates)} commit(s) wait for a quiet moment of the writers")
        if self.overriding_objective:
            parts.append(f"nothing deferred: {self.overriding_objective}")
        return "writers: " + ("; ".join(parts) if parts else "none active where the small files are")

    def to_dict(self) -> dict[str, Any]:
        return {
            "aware": self.aware,
            "overriding_objective": self.overriding_objective,
            "activity": self.activity,
            "gates": {k: g.to_dict() for k, g in self.gates.items()},
            "num_files_deferred": len(self.deferred),
            "bytes_deferred": self.deferred_bytes,
            "deferred_reasons": self.reasons(),
            "deferred": [f.to_dict() for f in self.deferred],
        }

    def summary(self) -> dict[str, Any]:
        """The plan's writer section without the file list (what a result line needs)."""
        d = self.to_dict()
        d.pop("deferred")
        d["gates"] = sorted(self.gates)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> WriterPlan | None:
        if not isinstance(d, dict):
            return None
        return cls(
            aware=d.get("aware") is True,
            overriding_objective=d.get("overriding_objective"),
            activity=d.get("activity"),
            gates={str(k): WriterGate.from_dict(g) for k, g in (d.get("gates") or {}).items()},
            deferred=[DeferredFile.from_dict(f) for f in d.get("deferred") or []],
        )


@dataclass(frozen=True)
class FileChoice:
    """What writer-aware planning decided for one candidate file: compact now (``gate`` None), behind a gate, or defer."""

    gate: str | None = None
    deferred: str | None = None


def _age(ms: int) -> str:
    s = max(0, ms) / 1000
    return f"{s:.0f} s" if s < 120 else (f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h")


def _where(partition: Partition) -> str:
    return ", ".join(f"{k}={v}" for k, v in partition) if partition else "the table"


def _moving_choice(cadence: Cadence, lead_ms: int, gates: dict[str, WriterGate]) -> FileChoice:
    """A file of a partition the table's DML writers move between: behind their gate when their moment
    after a commit is quiet; else compacted at once (which partition they come back to is unknown, and
    a partition without a rhythm of its own is never deferred)."""
    risk = cadence.risk(lead_ms)
    if risk is not None and risk > RISK_LIMIT:
        return FileChoice()
    if MOVING_GATE not in gates:
        gates[MOVING_GATE] = WriterGate(MOVING_GATE, None, cadence, scope="moving")
    return FileChoice(gate=MOVING_GATE)


def choose(
    activity: WriterActivity | None,
    files: list[tuple[str, int, Partition, int | None]],
    *,
    lead_ms: int,
    overriding_objective: str | None = None,
) -> tuple[list[FileChoice], dict[str, WriterGate]]:
    """A :class:`FileChoice` per candidate file ``(path, size, partition, modification time)``, and the gates.

    ``lead_ms``: how long after seeing a writer's commit ours lands (the poll interval plus a
    commit), the moment whose quiet matters. See the module docstring for the rules.
    """
    if activity is None or not activity.dml:
        return [FileChoice() for _ in files], {}
    now = activity.now_ms
    per_partition: dict[Partition, tuple[list[DmlCommit], Cadence | None]] = {}
    gates: dict[str, WriterGate] = {}
    choices = []
    moving = set(activity.moving_partitions())
    whole_cadence = activity.cadence(None)
    for _path, _size, partition, mtime in files:
        if partition not in per_partition:
            stream = activity.stream(partition)
            per_partition[partition] = (stream, cadence_of(stream))
        stream, cadence = per_partition[partition]
        if partition in moving and whole_cadence is not None:
            choices.append(_moving_choice(whole_cadence, lead_ms, gates))
            continue
        if cadence is None or not cadence.alive(now):
            choices.append(FileChoice())
            continue
        whole = all(d.table_wide for d in stream)
        key = gate_key(None if whole else partition)
        too_old = mtime is not None and now - mtime > MAX_DEFERRAL_MS
        reason = None
        if overriding_objective is None and not too_old:
            risk = cadence.risk(lead_ms)
            if risk is not None and risk > RISK_LIMIT:
                reason = (
                    f"the DELETE/UPDATE/MERGE writers of {_where(() if whole else partition)} leave no quiet "
                    f"moment ({cadence.describe()}; a transaction was running {lead_ms / 1000:.1f} s after "
                    f"{risk:.0%} of their commits, the last {_age(now - cadence.last_commit_ms)} ago)"
                )
        if reason is not None:
            choices.append(FileChoice(deferred=reason))
            continue
        if key not in gates:
            gates[key] = WriterGate(key, None if whole else dict(partition), cadence)
        choices.append(FileChoice(gate=key))
    return choices, gates
