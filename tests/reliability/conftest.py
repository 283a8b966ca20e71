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
