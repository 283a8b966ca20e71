"""Counters of the reliability suite, written to a JSON report at the end of the session.

The tests add to :data:`COUNTS` as they go (scenarios run, faults injected,
crashes, races, checks, files lost, tables left unreadable); ``conftest.py``
adds the corrupt logs tried by ``tests/test_bad_logs.py`` when it ran in the
same session and writes everything to ``$DELTALOG_RELIABILITY_REPORT`` (what
``python benchmarks/run.py reliability`` reads).
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from typing import Any

#: The totals the report prints, in order; ``files_lost`` and ``tables_unreadable`` must stay 0.
TOTALS = (
    "scenarios",
    "faults_injected",
    "crashes",
    "races",
    "corrupt_logs",
    "checks",
    "files_lost",
    "tables_unreadable",
)

COUNTS: Counter = Counter()
SECONDS: Counter = Counter()
_lock = threading.Lock()


def add(key: str, n: int = 1, suite: str | None = None) -> None:
    """Add ``n`` to a total (and to ``<suite>.<key>`` for the per-suite breakdown)."""
    with _lock:
        COUNTS[key] += n
        if suite:
            COUNTS[f"{suite}.{key}"] += n


def add_time(suite: str, seconds: float) -> None:
    with _lock:
        SECONDS[suite] += seconds


def corrupt_logs_tried() -> int:
    """Examples ``tests/test_bad_logs.py`` ran in this process (0 when it did not run)."""
    module = sys.modules.get("test_bad_logs")
    return int(getattr(module, "CORRUPT_LOGS_TRIED", 0) or 0)


def report() -> dict[str, Any]:
    with _lock:
        counts = dict(COUNTS)
        seconds = dict(SECONDS)
    bad_logs = corrupt_logs_tried()
    totals = {key: int(counts.get(key, 0)) for key in TOTALS}
    totals["corrupt_logs"] += bad_logs
    totals["scenarios"] += bad_logs
    suites: dict[str, dict[str, Any]] = {}
    for key, value in counts.items():
        if "." in key:
            suite, name = key.split(".", 1)
            suites.setdefault(suite, {})[name] = int(value)
    if bad_logs:
        suites.setdefault("bad_logs", {}).update(scenarios=bad_logs, corrupt_logs=bad_logs)
    for suite, secs in seconds.items():
        suites.setdefault(suite, {})["seconds"] = round(secs, 1)
    return {"totals": totals, "suites": suites}
