"""The reliability suite's totals (issue #9, section 5): ``python benchmarks/run.py reliability``.

Runs ``tests/reliability`` (faults, crashes, races) and ``tests/test_bad_logs.py``
(corrupt logs) in one pytest process, with ``$DELTALOG_RELIABILITY_REPORT``
pointing at a JSON file the suite's recorder fills, then prints one row per suite
(time, scenarios, what was injected) and one per total. ``files lost`` and
``tables left unreadable`` must be 0; every check reads the table with deltalake
as the independent reader, so there is no separate deltalake column.

``--scale small`` (fewer seeds and sampled steps, via ``$DELTALOG_RELIABILITY_SCALE``)
is a quick development run; ``full`` is the suite exactly as the default test command runs it.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("benchmarks.reliability")

REPO = Path(__file__).resolve().parent.parent
SUITES = {
    "faults": "storage faults at every step of commit, checkpoints (classic, V2), log cleanup, vacuum (full, lite), "
    "compaction, manifests, convert to Delta",
    "crashes": "SIGKILL at random storage calls and random moments of commit, checkpoint, log cleanup, vacuum, "
    "compaction; at random storage calls of convert to Delta",
    "races": "maintenance racing writers (local table and local S3 server)",
    "bad_logs": "hypothesis-generated corruptions of real logs (tests/test_bad_logs.py)",
    "adversarial": "generated adversarial inputs per class (CLI arguments, string booleans, ...; "
    "tests/reliability/test_adversarial.py)",
}
#: Tests outside tests/reliability whose property tests are adversarial classes
#: (reliability_recorder.ADVERSARIAL_CLASSES): corrupt logs, torn log lines, invalid non-file actions,
#: path spellings, links, units (local and S3), schema mismatches and partition values, string booleans.
ADVERSARIAL_FILES = [
    "tests/test_bad_logs.py",
    "tests/test_vacuum_paths_property.py",
    "tests/test_vacuum_paths_s3.py::test_s3_inventory_in_another_unit_is_refused",
    "tests/test_vacuum_paths_s3.py::test_s3_vacuum_never_deletes_a_live_file_whatever_the_spelling",
    "tests/test_action_checks.py::test_any_invalid_field_stops_every_command_alike",
    "tests/test_action_checks.py::test_any_invalid_field_stops_every_command_alike_on_s3",
    "tests/test_commit_lines.py::test_any_damaged_line_stops_every_command_alike",
    "tests/test_commit_lines.py::test_any_damaged_line_stops_every_command_alike_on_s3",
    "tests/test_commit_property.py",
    "tests/test_safety_flags.py::test_every_core_switch_refuses_non_bools",
]
TOTALS = [
    ("scenarios", "scenarios run", None),
    ("faults_injected", "faults injected", None),
    ("crashes", "processes killed mid-operation", None),
    ("races", "races", None),
    ("corrupt_logs", "corrupt logs tried", None),
    ("checks", "table checks (both readers, retained versions)", None),
    ("files_lost", "files lost", 0),
    ("tables_unreadable", "tables left unreadable", 0),
]


def add_arguments(parser: Any) -> None:
    parser.add_argument("--pytest-args", default="", help="extra pytest arguments, e.g. '-x' or \"-k 'not s3'\"")


def _run_suite(scale: str, extra: str) -> tuple[dict[str, Any], float, str]:
    with tempfile.TemporaryDirectory(prefix="deltalog-reliability-") as tmp:
        report = os.path.join(tmp, "report.json")
        env = dict(os.environ, DELTALOG_RELIABILITY_REPORT=report, PYTHONDONTWRITEBYTECODE="1")
        if scale == "small":
            env["DELTALOG_RELIABILITY_SCALE"] = "small"
        cmd = [sys.executable, "-m", "pytest", "tests/reliability", *ADVERSARIAL_FILES, "-q"]
        cmd += ["-p", "no:cacheprovider", *extra.split()]
        log.info("running %s", " ".join(cmd))
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        elapsed = time.perf_counter() - t0
        summary = (proc.stdout.strip().splitlines() or [""])[-1]
        if not os.path.exists(report):
            raise SystemExit(
                f"error: the reliability suite wrote no report (exit {proc.returncode}):\n{proc.stdout[-3000:]}"
            )
        with open(report) as fh:
            doc = json.load(fh)
        if proc.returncode != 0:
            log.warning("the suite failed:\n%s", proc.stdout[-5000:])
        return doc, elapsed, summary


def run(args: Any) -> list[dict[str, Any]]:
    doc, elapsed, summary = _run_suite(args.scale, getattr(args, "pytest_args", ""))
    rows: list[dict[str, Any]] = []
    for suite, what in SUITES.items():
        s = dict(doc["suites"].get(suite, {}))
        if suite == "adversarial":  # its scenarios are the generated inputs (counted per example)
            s["scenarios"] = s.get("adversarial_inputs", 0)
        parts = [f"{s.get('scenarios', 0)} scenarios"]
        for key, label in (("faults_injected", "faults"), ("crashes", "crashes"), ("races", "races")):
            if s.get(key):
                parts.append(f"{s[key]} {label}")
        parts.append(f"{s.get('tests_passed', 0)} tests passed, {s.get('tests_failed', 0)} failed")
        rows.append(
            {
                "case": f"{suite}: {what}",
                "ours_s": s.get("seconds"),
                "met": s.get("tests_failed", 0) == 0 and s.get("scenarios", 0) > 0,
                "note": ", ".join(parts),
            }
        )
    totals = doc["totals"]
    for key, label, must_be in TOTALS:
        row: dict[str, Any] = {"case": label, "note": str(totals.get(key, 0))}
        if must_be is not None:
            row["target"] = f"must be {must_be}"
            row["met"] = totals.get(key, 0) == must_be
        rows.append(row)
    tried, unsafe = totals.get("adversarial_inputs", 0), totals.get("unsafe_outcomes", 0)
    by_class = ", ".join(f"{name}: {n}" for name, n in sorted((doc.get("adversarial_classes") or {}).items()))
    rows.append(
        {
            "case": "adversarial inputs tried / unsafe outcomes",
            "note": f"{tried} / {unsafe}" + (f" ({by_class})" if by_class else ""),
            "target": "unsafe must be 0",
            "met": tried > 0 and unsafe == 0,
        }
    )
    rows.append(
        {
            "case": "pytest (whole run)",
            "ours_s": round(elapsed, 1),
            "met": doc.get("exitstatus") == 0,
            "note": summary,
        }
    )
    return rows
