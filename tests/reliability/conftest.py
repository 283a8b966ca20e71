"""Reliability suite plumbing: the table templates the fault and crash tests copy.

The totals the suite counts (and ``$DELTALOG_RELIABILITY_REPORT``) are the plugin
``tests/reliability_totals.py``'s, registered from the root conftest so that the controller
of a parallel run (which loads no conftest below ``tests/``) prints them.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def templates(tmp_path_factory):
    """Every operation's table, built once per session (fault and crash tests copy them)."""
    from reliability_support import TemplateCache

    return TemplateCache(str(tmp_path_factory.mktemp("reliability")))
