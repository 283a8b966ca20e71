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
    "adversarial_inputs",
    "unsafe_outcomes",
)

#: Hypothesis tests whose generated inputs are the adversarial sweep, by class ("file::test" -> class).
#: Every example they run counts as an adversarial input tried; every example that fails (a live file
#: deleted, a table made unreadable, a traceback, an exit code outside docs/cli.md: each test asserts
#: its class's promises) counts as an unsafe outcome.
ADVERSARIAL_CLASSES = {
    "test_adversarial.py::test_cli_arguments": "cli_args",
    "test_adversarial.py::test_cli_arguments_on_s3": "cli_args_s3",
    "test_adversarial.py::test_string_booleans": "string_booleans",
    "test_adversarial.py::test_schema_mismatches": "schema_mismatches",
    "test_adversarial.py::test_partition_values": "partition_values",
    "test_bad_logs.py::test_corruptions_end_in_a_specific_error_or_a_read": "corrupt_logs",
    "test_bad_logs.py::test_ignorable_damage_reads_like_the_pristine_table": "corrupt_logs",
    "test_vacuum_paths_property.py::test_vacuum_never_deletes_a_live_file_whatever_the_spelling": "path_spellings",
    "test_vacuum_paths_property.py::test_vacuum_never_deletes_a_link_nor_through_one": "links",
    "test_vacuum_paths_property.py::test_an_inventory_is_accepted_only_in_units_it_can_be_read_in": "units",
    "test_vacuum_paths_s3.py::test_s3_inventory_in_another_unit_is_refused": "units",
    "test_vacuum_paths_s3.py::test_s3_vacuum_never_deletes_a_live_file_whatever_the_spelling": "path_spellings",
    "test_action_checks.py::test_any_invalid_field_stops_every_command_alike": "invalid_actions",
    "test_action_checks.py::test_any_invalid_field_stops_every_command_alike_on_s3": "invalid_actions",
    "test_action_checks.py::test_any_invalid_field_in_a_checkpoint_stops_every_command_alike": "invalid_actions",
    "test_action_checks.py::test_any_invalid_field_in_a_checkpoint_stops_every_command_alike_on_s3": "invalid_actions",
    "test_commit_lines.py::test_any_damaged_line_stops_every_command_alike": "torn_log_lines",
    "test_commit_lines.py::test_any_damaged_line_stops_every_command_alike_on_s3": "torn_log_lines",
    "test_commit_property.py::test_commit_accepted_iff_file_fits_schema_local": "schema_mismatches",
    "test_commit_property.py::test_commit_accepted_iff_file_fits_schema_s3": "schema_mismatches",
    "test_commit_property.py::test_given_stats_accepted_iff_true_of_the_file_local": "schema_mismatches",
    "test_commit_property.py::test_given_stats_accepted_iff_true_of_the_file_s3": "schema_mismatches",
    "test_commit_property.py::test_partition_values_are_canonical_and_readable_local": "partition_values",
    "test_commit_property.py::test_partition_values_are_canonical_and_readable_s3": "partition_values",
    "test_commit_property.py::test_partition_value_text_is_canonical_or_refused": "partition_values",
    "test_commit_property.py::test_commit_accepts_a_path_iff_the_shared_rule_calls_it_data": "path_spellings",
    "test_safety_flags.py::test_every_core_switch_refuses_non_bools": "string_booleans",
}

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


def observe(observation: Any, _thread_id: int | None = None) -> None:
    """Hypothesis observability callback: count the examples of the adversarial classes."""
    if getattr(observation, "type", None) != "test_case" or observation.status == "gave_up":
        return
    kind = ADVERSARIAL_CLASSES.get(observation.property.rsplit("/", 1)[-1].split("[", 1)[0])
    if kind is None:
        return
    add("adversarial_inputs", 1, "adversarial")
    add(f"class.{kind}")
    if observation.status == "failed":
        add("unsafe_outcomes", 1, "adversarial")


#: Corrupt logs ``tests/test_bad_logs.py`` tried in parallel workers (pytest-xdist), sent to the controller.
_WORKERS_CORRUPT_LOGS = Counter()


def corrupt_logs_tried() -> int:
    """Examples ``tests/test_bad_logs.py`` ran in this process, or in the workers that reported here."""
    module = sys.modules.get("test_bad_logs")
    return int(getattr(module, "CORRUPT_LOGS_TRIED", 0) or 0) + _WORKERS_CORRUPT_LOGS["tried"]


def state() -> dict[str, Any]:
    """This process's counters as plain data: what a parallel worker sends the controller."""
    with _lock:
        return {"counts": dict(COUNTS), "seconds": dict(SECONDS), "corrupt_logs": corrupt_logs_tried()}


def merge(worker: dict[str, Any]) -> None:
    """Add a worker's :func:`state` to this process's counters (the controller's, which reports)."""
    with _lock:
        COUNTS.update(worker["counts"])
        SECONDS.update(worker["seconds"])
        _WORKERS_CORRUPT_LOGS["tried"] += int(worker["corrupt_logs"])


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
        if "." in key and not key.startswith("class."):
            suite, name = key.split(".", 1)
            suites.setdefault(suite, {})[name] = int(value)
    if bad_logs:
        suites.setdefault("bad_logs", {}).update(scenarios=bad_logs, corrupt_logs=bad_logs)
    for suite, secs in seconds.items():
        suites.setdefault(suite, {})["seconds"] = round(secs, 1)
    classes = {k.split(".", 1)[1]: int(v) for k, v in counts.items() if k.startswith("class.")}
    return {"totals": totals, "suites": suites, "adversarial_classes": classes}
