"""Reading the Delta log: ``_delta_log`` listed, its actions checked and replayed into one ``Snapshot``.

| module | job |
|---|---|
| ``listing`` | ``_delta_log`` naming, ``list_log(storage) -> LogListing``, ``build_segment`` |
| ``actions`` | the Arrow types of add/remove, ``Metadata``, ``file_key`` |
| ``commit_lines`` | the one rule for a commit line, and its vectorised check |
| ``action_checks`` | the types of every non-file action, checked once at snapshot load |
| ``replay`` | vectorised parsing of file actions and newest-per-key reconciliation |
| ``snapshot`` | ``load_snapshot(storage, segment) -> Snapshot``: checkpoints (classic, multi-part, V2) + commits |
| ``checkpoint_reader`` | a checkpoint's small actions and a version's protocol + metadata, without file actions |
| ``load`` | ``snapshot_at(storage, version=, timestamp=)``: the one loader, skipping an unreadable checkpoint |
| ``history`` | commitInfo per version, in-commit timestamps, timestamps -> versions |
| ``activity`` | recent commits: ``find_new_commit`` (what the version sensor waits for), ``last_vacuum`` (the last finished vacuum) |
| ``tail`` | the log's new end: ``read_tail(storage, position) -> LogTail`` (the commits after a version, one LIST from there, each read into a ``CommitSummary``) |
| ``commit_watch`` | ``CommitWatch``: a table's new commits as events (``CommitRange``), debounced, with one log line per problem (no I/O) |
| ``writer_activity`` | the writers beside maintenance: ``writer_activity(storage, snapshot) -> WriterActivity`` (kinds, DML scopes and rhythm, overlaps with deltalog's rewrites) |

Nothing here writes: the commit layer (``deltalog.commit``) and the post-commit work
(``deltalog.log_maintenance``) build on these readers.
"""

from deltalog.log.activity import NewCommit, VacuumSighting, find_new_commit, last_vacuum
from deltalog.log.commit_watch import CommitRange, CommitWatch, Notice, WatchSettings
from deltalog.log.history import HistoryEntry
from deltalog.log.listing import LogListing, list_log
from deltalog.log.load import snapshot_at
from deltalog.log.snapshot import Snapshot
from deltalog.log.tail import (
    CommitSummary,
    LogPosition,
    LogTail,
    TailProblem,
    access_problem,
    latest_position,
    read_tail,
)
from deltalog.log.writer_activity import WriterActivity, writer_activity

__all__ = [
    "CommitRange",
    "CommitSummary",
    "CommitWatch",
    "HistoryEntry",
    "LogListing",
    "LogPosition",
    "LogTail",
    "NewCommit",
    "Notice",
    "Snapshot",
    "TailProblem",
    "VacuumSighting",
    "WatchSettings",
    "WriterActivity",
    "access_problem",
    "find_new_commit",
    "last_vacuum",
    "latest_position",
    "list_log",
    "read_tail",
    "snapshot_at",
    "writer_activity",
]
