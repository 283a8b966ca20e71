"""Issue 13 item 4: a yes/no switch is a real bool, never a truthy string.

``vacuum(..., allow_short_retention="False")`` used to count as consent and delete
with retention 0. Every boolean switch of every core entry point now refuses
anything but ``True``/``False`` (InvalidArgumentError, exit 2) before it touches
the table; the generated test tries the kinds of values a template, a config file
or a typo produces.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltalog import DeltaTable
from deltalog._flags import require_bool
from deltalog.commit.transaction import Transaction
from deltalog.errors import InvalidArgumentError
from helpers import append, make_table, rows
from vacuum_helpers import files_on_disk, log_files

#: Values that are not bools: what truthiness would have read as yes or no.
NOT_BOOLS = st.one_of(
    st.sampled_from(["False", "false", "no", "0", "", "True", "true", "yes", "1", "off", "{{ params.x }}"]),
    st.text(max_size=8),
    st.integers(-2, 2),
    st.floats(allow_nan=True),
    st.none(),
    st.lists(st.booleans(), max_size=2),
)


@pytest.fixture()
def removed_table(tmp_path):
    """A table whose first data file was removed just now: retention 0 would delete it."""
    path = str(tmp_path / "t")
    table = make_table(path)
    append(table, rows(2))
    append(table, rows(2, start=2))
    snap = table.snapshot()
    txn = Transaction(table.storage, snap, operation="DELETE")
    txn.remove([{"path": snap.file_paths()[0], "dataChange": True}])
    txn.commit()
    return path


def _entry_points(path: str):
    """(name, call(value)) for every boolean switch of the core's public entry points."""
    from deltalog.compaction import compact
    from deltalog.create import create_table
    from deltalog.fleet.maintain import maintain_table
    from deltalog.ingest import commit_request
    from deltalog.log_maintenance.log_cleanup import cleanup_log
    from deltalog.log_maintenance.manifest import generate_manifest
    from deltalog.vacuuming import plan_vacuum, vacuum

    table = DeltaTable(path)
    request = {"operation": "WRITE", "add": []}
    return [
        ("vacuum allow_short_retention", lambda v: vacuum(path, retention_hours=0, allow_short_retention=v)),
        ("vacuum dry_run", lambda v: vacuum(path, retention_hours=0, allow_short_retention=True, dry_run=v)),
        ("vacuum full_fallback", lambda v: vacuum(path, mode="lite", full_fallback=v)),
        ("plan_vacuum allow_short_retention", lambda v: plan_vacuum(path, retention_hours=0, allow_short_retention=v)),
        ("cleanup_log dry_run", lambda v: cleanup_log(path, dry_run=v)),
        ("generate_manifest full", lambda v: generate_manifest(path, full=v)),
        ("generate_manifest dry_run", lambda v: generate_manifest(path, dry_run=v)),
        ("compact plan_only", lambda v: compact(path, plan_only=v)),
        ("commit_request single_writer", lambda v: commit_request(path, request, single_writer=v)),
        ("commit_request run_hooks", lambda v: commit_request(path, request, run_hooks=v)),
        ("create_table single_writer", lambda v: create_table(path + "_new", table.snapshot().schema, single_writer=v)),
        ("maintain_table allow_short_retention", lambda v: maintain_table(path, allow_short_retention=v)),
        (
            "Transaction allow_system_domains",
            lambda v: Transaction(table.storage, None, operation="W", allow_system_domains=v),
        ),
    ]


def test_truthy_string_is_not_consent_to_short_retention(removed_table):
    """The review's example: "False" deleted with retention 0. Now: refused, nothing deleted or written."""
    from deltalog.vacuuming import vacuum

    before_files, before_log = files_on_disk(removed_table), log_files(removed_table)
    for word in ("False", "false", "no", "0"):
        with pytest.raises(InvalidArgumentError, match="allow_short_retention must be True or False"):
            vacuum(removed_table, retention_hours=0, allow_short_retention=word)
    assert files_on_disk(removed_table) == before_files
    assert log_files(removed_table) == before_log


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=NOT_BOOLS, which=st.integers(0, 12))
def test_every_core_switch_refuses_non_bools(removed_table, value, which):
    before_files, before_log = files_on_disk(removed_table), log_files(removed_table)
    name, call = _entry_points(removed_table)[which]
    with pytest.raises(InvalidArgumentError, match="must be True or False"):
        call(value)
    assert files_on_disk(removed_table) == before_files, name
    assert log_files(removed_table) == before_log, name
    assert not os.path.exists(removed_table + "_new"), name


def test_require_bool_accepts_bools_only():
    assert require_bool(True, "x") is True and require_bool(False, "x") is False
    for value in (0, 1, "true", None, 0.0):
        with pytest.raises(InvalidArgumentError, match="x must be True or False"):
            require_bool(value, "x")
