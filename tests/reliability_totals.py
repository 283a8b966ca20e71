"""The reliability suite's totals: the report of ``$DELTALOG_RELIABILITY_REPORT`` and the terminal summary.

Registered as a pytest plugin from ``tests/conftest.py`` (the controller of a parallel run loads
no conftest below ``tests/``, and it is the one that prints). ``$DELTALOG_RELIABILITY_REPORT``
(set by ``benchmarks/bench_reliability.py``) names a JSON file that receives
:func:`reliability_recorder.report`; the terminal summary shows the same totals whenever the
suite ran. With parallel workers (pytest-xdist) each worker counts what its tests add and sends
its counters to the controller when it ends (``pytest_testnodedown``); test times and outcomes are
counted from the reports, which all reach the controller.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reliability"))

import reliability_recorder  # noqa: E402

#: Test files whose time and outcomes the report breaks down, by suite name.
SUITES = {
    "test_faults.py": "faults",
    "test_crashes.py": "crashes",
    "test_races.py": "races",
    "test_bad_logs.py": "bad_logs",
    "test_adversarial.py": "adversarial",
    "test_cloud_reliability.py": "cloud",
}


class _Timer:
    """Per-suite seconds and outcomes; registered as a plugin so it also sees tests/test_bad_logs.py."""

    def pytest_runtest_logreport(self, report) -> None:
        suite = SUITES.get(os.path.basename(report.fspath))
        if suite is None:
            return
        reliability_recorder.add_time(suite, report.duration)
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            reliability_recorder.add(f"tests_{report.outcome}", 1, suite)


def _is_worker(config) -> bool:
    """A parallel worker (pytest-xdist): its reports reach the controller, which counts and reports them."""
    return hasattr(config, "workerinput")


def pytest_configure(config) -> None:
    if not config.pluginmanager.has_plugin("deltalog-reliability-timer"):
        if not _is_worker(config):  # the reports of every worker's tests reach the controller
            config.pluginmanager.register(_Timer(), "deltalog-reliability-timer")
        # Every example of the adversarial classes (reliability_recorder.ADVERSARIAL_CLASSES) is counted
        # where it runs (a worker sends its counts to the controller at the end: pytest_testnodedown).
        from hypothesis.internal.observability import add_observability_callback

        add_observability_callback(reliability_recorder.observe, all_threads=True)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    worker = (getattr(node, "workeroutput", None) or {}).get("deltalog_reliability")
    if worker:
        reliability_recorder.merge(worker)


def pytest_sessionfinish(session, exitstatus) -> None:
    if _is_worker(session.config):
        session.config.workeroutput["deltalog_reliability"] = reliability_recorder.state()
        return
    path = os.environ.get("DELTALOG_RELIABILITY_REPORT")
    if path:
        doc = reliability_recorder.report()
        doc["exitstatus"] = int(exitstatus)
        with open(path, "w") as fh:
            json.dump(doc, fh, indent=1)


def pytest_terminal_summary(terminalreporter) -> None:
    totals = reliability_recorder.report()["totals"]
    if not any(totals.values()):
        return
    terminalreporter.write_sep("-", "reliability totals")
    terminalreporter.write_line(", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in totals.items()))
