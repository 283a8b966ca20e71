"""Reliability suite plumbing: the report of totals at the end of the session.

``$DELTALOG_RELIABILITY_REPORT`` (set by ``benchmarks/bench_reliability.py``)
names a JSON file that receives :func:`reliability_recorder.report`; the
terminal summary shows the same totals whenever the suite ran.
"""

from __future__ import annotations

import json
import os

import pytest
import reliability_recorder

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


def pytest_configure(config) -> None:
    if not config.pluginmanager.has_plugin("deltalog-reliability-timer"):
        config.pluginmanager.register(_Timer(), "deltalog-reliability-timer")
        # Every example of the adversarial classes (reliability_recorder.ADVERSARIAL_CLASSES) is counted.
        from hypothesis.internal.observability import add_observability_callback

        add_observability_callback(reliability_recorder.observe, all_threads=True)


def pytest_sessionfinish(session, exitstatus) -> None:
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


@pytest.fixture(scope="session")
def templates(tmp_path_factory):
    """Every operation's table, built once per session (fault and crash tests copy them)."""
    from reliability_support import TemplateCache

    return TemplateCache(str(tmp_path_factory.mktemp("reliability")))
