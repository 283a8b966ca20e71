"""The one way tests reach the optional reference material beside the repo (``../shared``).

A fresh clone has nothing beside it and every test must still pass, so anything
read from there is an *extra* check: it skips, with the same reason everywhere,
when the material is absent. ``DELTALOG_SHARED_DIR`` points it elsewhere (a
nonexistent directory checks that the suite stands on its own).
"""

from __future__ import annotations

import os
import shutil

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: The reference material directory: ``$DELTALOG_SHARED_DIR`` or ``../shared``.
SHARED_DIR = os.environ.get("DELTALOG_SHARED_DIR") or os.path.join(os.path.dirname(REPO), "shared")

#: Golden tables written by Delta Spark (from delta-io/delta's test resources).
GOLDEN_DIR = os.path.join(SHARED_DIR, "conformance", "golden")


def shared_path(*parts: str) -> str:
    """The path of ``parts`` under the shared directory, or skip the calling test when it is absent."""
    path = os.path.join(SHARED_DIR, *parts)
    if not os.path.exists(path):
        pytest.skip(f"{os.path.join('shared', *parts)} is absent (extra check; set DELTALOG_SHARED_DIR to run it)")
    return path


def golden_copy(name: str, tmp_path) -> str:
    """A private copy of the golden table ``name`` (tests may change it), or skip when it is absent."""
    src = shared_path("conformance", "golden", name)
    dst = str(tmp_path / name)
    shutil.copytree(src, dst)
    return dst
