"""A maintenance history at fleet scale, made in seconds: Arrow columns written through the history writer.

The fleet view's scale tests and its benchmark need 10,000 to 1,000,000 history rows over a
thousand tables. Real maintenance rounds (``tests/history_helpers.py``) make a few hundred
rows a minute; here the rows are drawn with numpy, as a fleet run would record them (per
table and run: a ``measure`` row, then the operations it found due, each done, found nothing,
deferred, refused or failed), and written with :func:`deltalog.journal.append_arrow`: one
Parquet file per day, one commit per batch.

The shape is fixed by the arguments and the seed, and written down in :class:`FleetShape`
(what the tests assert against): ``tables`` tables under team and schema prefixes (last path
segments repeat: ``.../sales/raw/history`` and ``.../ml/raw/history``), a ``busy_share`` of
the rows on one table, the rows spread over the last ``days`` days (today included), some
failures with long messages, the ``policy`` of each measurement as a fleet run writes it,
service-level objectives judged on two tables in three (small files against the fleet's 1,500
or a per-table 3,000, versions since checkpoint against a path rule's 10; met, at risk or
breached as the values fall), and the fleet run's own row each night with its ``finish_by``
(missed now and then).

:func:`cached_history` keeps a generated history under ``~/.cache/deltalog/fleet-histories``
keyed by its arguments, today's date and this module's :data:`GENERATOR_VERSION`: a session
that asks for the same history again copies nothing and writes nothing.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltalog.journal.schema import HISTORY_SCHEMA
from deltalog.journal.write import append_arrow

#: Bump when the rows drawn change: cached histories of another version are not reused.
GENERATOR_VERSION = 6
CACHE = Path(os.environ.get("DELTALOG_CACHE_DIR", Path.home() / ".cache" / "deltalog")) / "fleet-histories"

TEAMS = ("sales", "marketing", "finance", "ops", "ml", "risk", "growth", "support")
SCHEMAS = ("raw", "clean", "mart", "features", "audit")
NAMES = (
    "orders",
    "events",
    "customers",
    "history",
    "payments",
    "sessions",
    "clicks",
    "invoices",
    "inventory",
    "shipments",
    "refunds",
    "accounts",
    "ledger",
    "profiles",
    "scores",
)
#: The operations a fleet run may find due, with (done, nothing_due, deferred, refused, failed) odds.
OPERATIONS = {
    "compaction": (0.70, 0.18, 0.06, 0.02, 0.04),
    "checkpoint": (0.80, 0.17, 0.0, 0.0, 0.03),
    "vacuum": (0.75, 0.15, 0.03, 0.03, 0.04),
    "log_cleanup": (0.85, 0.13, 0.0, 0.0, 0.02),
    "purge": (0.70, 0.20, 0.05, 0.0, 0.05),
}
STATUSES = ("done", "nothing_due", "deferred", "refused", "failed")
#: A failure message of this many characters now and then (the issue's 1 MB message, smaller in bulk).
LONG_MESSAGE = 20_000


@dataclass(frozen=True)
class FleetShape:
    """What was generated: the history's location and the facts tests check pages against."""

    history: str
    rows: int
    tables: tuple[str, ...]
    busy: str
    busy_rows: int
    days: int
    #: Tables whose newest row of some operation failed (an open failure on the fleet page).
    failing: tuple[str, ...]
    #: Tables whose newest successful measurement breached an objective, and those it found all met.
    breached: tuple[str, ...] = ()
    met: tuple[str, ...] = ()
    #: Nights whose fleet run missed its finish_by.
    missed_nights: int = 0


def table_uris(tables: int) -> list[str]:
    """``tables`` URIs: team / schema / name, with the last segment repeating across prefixes."""
    out = []
    for i in range(tables):
        team, schema = TEAMS[i % len(TEAMS)], SCHEMAS[(i // len(TEAMS)) % len(SCHEMAS)]
        name = NAMES[(i // (len(TEAMS) * len(SCHEMAS))) % len(NAMES)]
        block = i // (len(TEAMS) * len(SCHEMAS) * len(NAMES))
        out.append(f"s3://lake/{team}/{schema}/{name}" + (f"_{block}" if block else ""))
    return out


def _policy(target: int) -> str:
    return json.dumps(
        {
            "target_file_size": {"value": target, "source": "fleet defaults", "detail": None},
            "vacuum_retention_hours": {"value": 168.0, "source": "default", "detail": None},
            "checkpoint_interval": {"value": 10, "source": "table property", "detail": "delta.checkpointInterval"},
        }
    )


def generate(
    uri: str, *, rows: int, tables: int = 1000, busy_share: float = 0.25, days: int = 30, seed: int = 0
) -> FleetShape:
    """Write ``rows`` history rows (about; whole runs) to a new history at ``uri`` (see the module doc)."""
    rng = np.random.default_rng(seed)
    uris = table_uris(tables)
    busy = uris[0]
    # A run is a measurement and the operations it found due (1 to 4): about 3.5 rows.
    runs = max(1, int(rows / 3.5))
    busy_runs = int(runs * busy_share)
    run_table = np.concatenate([np.zeros(busy_runs, np.int64), rng.integers(1, tables, runs - busy_runs)])
    rng.shuffle(run_table)
    today = dt.datetime.now(dt.UTC).date()
    first = dt.datetime.combine(today - dt.timedelta(days=days - 1), dt.time(), dt.UTC)
    now = dt.datetime.now(dt.UTC)
    span_us = int((now - first).total_seconds() * 1e6) - 3_600_000_000
    run_start = np.sort(rng.integers(0, max(span_us, 1), runs)) + int(first.timestamp() * 1e6)
    ops_names = list(OPERATIONS)
    n_ops = rng.integers(1, 5, runs)  # operations after the measurement
    total = int(runs + n_ops.sum())
    if total > rows:  # whole runs, at most ``rows``
        keep = np.searchsorted(np.cumsum(n_ops + 1), rows, side="right")
        run_table, run_start, n_ops, runs = run_table[:keep], run_start[:keep], n_ops[:keep], keep
        total = int(runs + n_ops.sum())
    row_run = np.repeat(np.arange(runs), n_ops + 1)
    first_of_run = np.concatenate([[0], np.cumsum(n_ops + 1)[:-1]])
    pos = np.arange(total) - first_of_run[row_run]  # 0: the measurement
    op_index = (pos - 1 + row_run) % len(ops_names)
    operation = np.where(pos == 0, "measure", np.array(ops_names, dtype=object)[op_index])
    table = run_table[row_run]
    started = run_start[row_run] + pos * 20_000_000
    duration = rng.gamma(2.0, 8.0, total).round(3)
    ended = started + (duration * 1e6).astype(np.int64)
    status = np.array(["done"] * total, dtype=object)
    for name in ops_names:
        mask = operation == name
        status[mask] = rng.choice(STATUSES, int(mask.sum()), p=OPERATIONS[name])
    measure = operation == "measure"
    status[measure] = rng.choice(["done", "failed", "refused"], int(measure.sum()), p=[0.97, 0.02, 0.01])
    # The table's state: grows over time, small files pile up between compactions.
    growth = (run_start[row_run] - run_start[0]) / max(span_us, 1)
    base_files = 200 + (table * 37) % 5000
    live = (base_files * (1 + growth) + rng.integers(0, 50, total)).astype(np.int64)
    small = (live * rng.uniform(0.0, 0.4, total)).astype(np.int64)
    table_bytes = live * (64 << 20) // 4
    version = (10 + growth * 500 + pos).astype(np.int64)
    since_checkpoint = rng.integers(0, 12, total)  # commits since the last checkpoint: 11 now and then
    compacting = (operation == "compaction") | (operation == "purge")
    done = status == "done"
    files_read = np.where(compacting & done, rng.integers(10, 400, total), 0)
    files_written = np.where(compacting & done, np.maximum(1, files_read // 20), 0)
    files_written = np.where((operation == "checkpoint") & done, 1, files_written)
    bytes_read = files_read * (4 << 20)
    bytes_written = np.where(compacting, (bytes_read * 0.93).astype(np.int64), files_written * (1 << 20))
    vacuuming = (operation == "vacuum") & done
    files_removed = np.where(vacuuming, rng.integers(0, 800, total), np.where(compacting & done, files_read, 0))
    bytes_removed = np.where(vacuuming | compacting, files_removed * (4 << 20), 0)
    bytes_reclaimed = np.where(vacuuming, bytes_removed, 0)
    cleaning = (operation == "log_cleanup") & done
    log_removed = np.where(cleaning, rng.integers(0, 60, total), 0)
    bytes_reclaimed = np.where(cleaning, log_removed * 4096, bytes_reclaimed)
    reasons = np.array([None] * total, dtype=object)
    reasons[measure & (status == "done")] = "compaction: small files over the threshold\ncheckpoint: 12 versions since"
    reasons[status == "deferred"] = "bins deferred: the time budget was spent"
    reasons[status == "refused"] = (
        "refused: the table is catalog-managed (catalogManaged), which deltalog does not write"
    )
    failed = np.flatnonzero(status == "failed")
    reasons[failed] = "storage error: <Error><Code>SlowDown</Code></Error> after 10 retries"
    long_ones = failed[:: max(1, len(failed) // 5)][:5]
    reasons[long_ones] = "Traceback (most recent call last):\n" + "  File <frame>\n" * (LONG_MESSAGE // 16)
    due = [["compaction", "checkpoint"] if m and s == "done" else None for m, s in zip(measure, status, strict=True)]
    policy_for = {t: _policy(64 << 20 if t % 7 else 128 << 20) for t in range(tables)}
    policy = np.where(measure, np.array([policy_for[int(t)] for t in table], dtype=object), None)
    day = (started // 86_400_000_000).astype("datetime64[D]")
    is_op = ~measure
    # Objectives on two tables in three (the busy one among them), judged on done measurements.
    judged = measure & (status == "done") & (table % 3 != 1)
    relaxed = table % 7 == 0
    override = {t: f"per-table override tables['{uris[t]}']" if t % 7 == 0 else "fleet defaults" for t in range(tables)}
    small_target = np.where(relaxed, 3000, 1500)
    small_met = small <= small_target
    vsc = since_checkpoint
    vsc_met = vsc <= 10
    small_risk = small_met & (small > small_target * 0.9)
    objectives = {
        "objective_max_small_files_target": (np.where(judged, small_target, None), pa.int64()),
        "objective_max_small_files_value": (np.where(judged, small, None), pa.int64()),
        "objective_max_small_files_met": (np.where(judged, small_met, None), pa.bool_()),
        "objective_max_small_files_source": (
            np.where(judged, np.array([override[int(t)] for t in table], dtype=object), None),
            pa.string(),
        ),
        "objective_max_versions_since_checkpoint_target": (np.where(judged, 10, None), pa.int64()),
        "objective_max_versions_since_checkpoint_value": (np.where(judged, vsc, None), pa.int64()),
        "objective_max_versions_since_checkpoint_met": (np.where(judged, vsc_met, None), pa.bool_()),
        "objective_max_versions_since_checkpoint_source": (
            np.where(judged, "path rule s3://lake/", None),
            pa.string(),
        ),
        "objectives_met": (np.where(judged, small_met & vsc_met, None), pa.bool_()),
    }
    breached_lists = [
        ([n for n, ok in (("max_small_files", sm), ("max_versions_since_checkpoint", vm)) if not ok] if j else None)
        for j, sm, vm in zip(judged, small_met, vsc_met, strict=True)
    ]
    vsc_risk = vsc == 10  # at the target: the next commit breaches it
    risk_lists = [
        [n for n, risky in (("max_small_files", sr), ("max_versions_since_checkpoint", vr)) if risky] if j else None
        for j, sr, vr in zip(judged, small_risk, vsc_risk, strict=True)
    ]
    data = pa.table(
        {
            "run_id": pa.array([f"fleet-{r:08d}" for r in row_run]),
            "row_id": pa.array([f"{seed:04d}{i:028x}" for i in range(total)]),
            "run_date": pa.array(day, pa.date32()),
            "table_uri": pa.array([uris[t] for t in table]),
            "table_id": pa.array([f"id-{t:05d}" for t in table]),
            "operation": pa.array(operation.astype(str)),
            "engine": pa.array(np.where(compacting, "local", None)),
            "status": pa.array(status.astype(str)),
            "reason": pa.array(reasons, pa.string()),
            "summary": pa.array(np.where(measure, "due: compaction, checkpoint", None), pa.string()),
            "due_operations": pa.array(due, pa.list_(pa.string())),
            "policy": pa.array(policy, pa.string()),
            "started_at": pa.array(started, pa.timestamp("us", tz="UTC")),
            "ended_at": pa.array(ended, pa.timestamp("us", tz="UTC")),
            "duration_s": pa.array(duration),
            "cpu_s": pa.array((duration * rng.uniform(0.3, 1.8, total)).round(3)),
            "version_before": pa.array(version),
            "version_after": pa.array(version + np.where(done & is_op, 1, 0)),
            "files_read": pa.array(files_read),
            "bytes_read": pa.array(bytes_read),
            "files_written": pa.array(files_written),
            "bytes_written": pa.array(bytes_written),
            "files_removed": pa.array(files_removed),
            "bytes_removed": pa.array(bytes_removed),
            "bytes_reclaimed": pa.array(bytes_reclaimed),
            "log_files_removed": pa.array(log_removed),
            "live_files_before": pa.array(live),
            "live_files_after": pa.array(
                np.maximum(0, live - np.where(compacting & done, files_read - files_written, 0))
            ),
            "small_files_before": pa.array(small),
            "small_files_after": pa.array(np.where(compacting & done, 0, small)),
            "table_bytes_before": pa.array(table_bytes),
            "table_bytes_after": pa.array(table_bytes),
            "versions_since_checkpoint_before": pa.array(since_checkpoint),
            "versions_since_checkpoint_after": pa.array(np.where(operation == "checkpoint", 0, since_checkpoint)),
            "dv_share_before": pa.array(rng.uniform(0, 0.1, total).round(4)),
            "dv_share_after": pa.array(rng.uniform(0, 0.1, total).round(4)),
            "log_files_before": pa.array(version + 1),
            "log_files_after": pa.array(np.maximum(1, version + 1 - log_removed)),
            "airflow_dag_id": pa.array(np.where(is_op, "deltalog_fleet", None), pa.string()),
            "airflow_run_id": pa.array(np.where(is_op, "scheduled__fleet", None), pa.string()),
            "airflow_task_id": pa.array(np.where(is_op, "maintain", None), pa.string()),
            "airflow_map_index": pa.array(np.where(is_op, -1, None), pa.int32()),
            "airflow_try_number": pa.array(np.where(is_op, 1, None), pa.int32()),
            "deltalog_version": pa.array(["synthetic"] * total),
            **{name: pa.array(values, typ) for name, (values, typ) in objectives.items()},
            "objectives_breached": pa.array(breached_lists, pa.list_(pa.string())),
            "objectives_at_risk": pa.array(risk_lists, pa.list_(pa.string())),
        },
    )
    data = _with_history_columns(data).sort_by([("started_at", "ascending")])
    nights = _fleet_runs(rng, first, days, now, seed)
    append_arrow(uri, pa.concat_tables([data, nights]))
    # The newest done measurement per table: breached or met (tables that set objectives only).
    verdict: dict[int, bool] = {}
    for t, j, sm, vm in zip(table.tolist(), judged.tolist(), small_met.tolist(), vsc_met.tolist(), strict=True):
        if j:
            verdict[t] = bool(sm and vm)  # rows are in start order
    # The newest row per (table, operation): a table with a failed one has an open failure.
    newest: dict[tuple[int, str], str] = {}
    for t, op, st in zip(table.tolist(), operation.tolist(), status.tolist(), strict=True):
        newest[(t, op)] = st  # rows are in start order
    failing = tuple(sorted({uris[t] for (t, _), st in newest.items() if st == "failed"}))
    return FleetShape(
        history=uri,
        rows=total,
        tables=tuple(sorted({uris[t] for t in set(table.tolist())})),
        busy=busy,
        busy_rows=int((table == 0).sum()),
        days=days,
        failing=failing,
        breached=tuple(sorted(uris[t] for t, ok in verdict.items() if not ok)),
        met=tuple(sorted(uris[t] for t, ok in verdict.items() if ok)),
        missed_nights=int(pc.sum(pc.invert(nights.column("finish_by_met"))).as_py() or 0),
    )


def _with_history_columns(data: pa.Table) -> pa.Table:
    """``data`` with every column of the history's schema (those not given null), in its order and types."""
    return pa.table(
        {
            f.name: data.column(f.name) if f.name in data.column_names else pa.nulls(data.num_rows, f.type)
            for f in HISTORY_SCHEMA
        },
        schema=HISTORY_SCHEMA,
    )


def _fleet_runs(rng: np.random.Generator, first: dt.datetime, days: int, now: dt.datetime, seed: int) -> pa.Table:
    """The fleet run's own row each night at about 04:30 UTC, with ``finish_by`` 06:00 Europe/Berlin (05:00 UTC in
    winter: the deadline here); one night in six it ends late."""
    rows = []
    for d in range(days):
        night = first + dt.timedelta(days=d, hours=4, minutes=30)
        if night > now:
            break
        late = rng.random() < 1 / 6
        ended = night + dt.timedelta(minutes=int(rng.integers(70, 120)) if late else int(rng.integers(10, 25)))
        deadline = night.replace(hour=5, minute=0)
        rows.append(
            {
                "run_id": f"nightly-{d:04d}",
                "row_id": f"{seed:04d}night{d:023d}",
                "run_date": night.date(),
                "table_uri": "s3://lake/",
                "operation": "fleet_run",
                "status": "done",
                "reason": None
                if ended <= deadline
                else f"missed finish_by 06:00 Europe/Berlin: ended {ended:%H:%M} UTC",
                "summary": f"fleet run {'met' if ended <= deadline else 'missed'} finish_by 06:00 Europe/Berlin",
                "started_at": night,
                "ended_at": ended,
                "duration_s": (ended - night).total_seconds(),
                **{c: 0 for c in ("files_read", "bytes_read", "files_written", "bytes_written", "files_removed")},
                **{c: 0 for c in ("bytes_removed", "bytes_reclaimed", "log_files_removed")},
                "deltalog_version": "synthetic",
                "finish_by": "06:00 Europe/Berlin",
                "finish_by_deadline": deadline,
                "finish_by_met": ended <= deadline,
            }
        )
    return pa.Table.from_pylist([{f.name: r.get(f.name) for f in HISTORY_SCHEMA} for r in rows], schema=HISTORY_SCHEMA)


def cached_history(
    rows: int, *, tables: int = 1000, busy_share: float = 0.25, days: int = 30, seed: int = 0
) -> FleetShape:
    """:func:`generate`'s history, made once per key (arguments, today, :data:`GENERATOR_VERSION`) and kept.

    Concurrent callers (pytest-xdist workers) wait for one generation under a file lock; the
    history is generated into a temporary folder and renamed into place whole. Readers only
    read it (the fleet view writes its rollup to a folder of its own).
    """
    today = dt.datetime.now(dt.UTC).date().isoformat()
    key = f"v{GENERATOR_VERSION}-{rows}r-{tables}t-{busy_share}b-{days}d-s{seed}-{today}"
    CACHE.mkdir(parents=True, exist_ok=True)
    target = CACHE / key
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shape_file = target / "shape.json"
        if not shape_file.exists():
            for old in CACHE.iterdir():  # other days' histories are stale: their dates moved
                if old.is_dir() and old.name.startswith(f"v{GENERATOR_VERSION}-") and not old.name.endswith(today):
                    shutil.rmtree(old, ignore_errors=True)
            work = Path(tempfile.mkdtemp(prefix=key + ".", dir=CACHE))
            shape = generate(
                str(work / "history"), rows=rows, tables=tables, busy_share=busy_share, days=days, seed=seed
            )
            (work / "shape.json").write_text(json.dumps(shape.__dict__))
            shutil.rmtree(target, ignore_errors=True)
            os.rename(work, target)
        stored = json.loads(shape_file.read_text())
    stored["history"] = str(target / "history")
    for key in ("tables", "failing", "breached", "met"):
        stored[key] = tuple(stored[key])
    return FleetShape(**stored)


def append_as_another_writer(uri: str, data: pa.Table, day: dt.date) -> None:
    """Commit ``data`` (any columns, any types, any values) as one file of ``day`` to the history at ``uri``:
    what another engine writing to the history (a plain Delta table) may leave there; no check of ours runs."""
    import time
    import uuid

    import pyarrow.parquet as pq

    from deltalog.commit import Transaction
    from deltalog.log import snapshot_at
    from deltalog.storage import Storage

    storage = Storage(uri)
    snapshot = snapshot_at(storage)
    rel = f"run_date={day.isoformat()}/part-foreign-{uuid.uuid4()}.parquet"
    sink = pa.BufferOutputStream()
    pq.write_table(data, sink)
    body = sink.getvalue().to_pybytes()
    storage.makedirs(storage.join(rel).rsplit("/", 1)[0])
    storage.write_atomic(storage.join(rel), body)
    txn = Transaction(storage, snapshot, operation="WRITE", operation_parameters={"mode": "Append"})
    txn.add(
        [
            {
                "path": rel,
                "size": len(body),
                "partitionValues": {"run_date": day.isoformat()},
                "modificationTime": int(time.time() * 1000),
                "dataChange": True,
            }
        ]
    )
    txn.commit()


__all__ = ["FleetShape", "append_as_another_writer", "cached_history", "generate", "table_uris"]
