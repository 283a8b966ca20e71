"""The public API's shape, by signature: it cannot drift from the functions it fronts.

``DeltaTable``'s methods spell out the parameters of the operation each delegates to
(so ``help()`` and IDEs show them): same names, same defaults, same type hints, all
keyword-only. Every public function that opens a table takes ``storage_options`` the
same way: keyword-only, ``dict[str, Any] | None``, default None.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

import deltalog
from deltalog import DeltaTable
from deltalog.commit.transaction import Transaction
from deltalog.commit_request import commit_request
from deltalog.compaction import commit_outputs, compact, plan_compaction
from deltalog.convert import convert_to_delta
from deltalog.create import create_table
from deltalog.due import maintenance_due
from deltalog.fleet.discover import discover_tables
from deltalog.fleet.health import fleet_health
from deltalog.fleet.maintain import maintain_table
from deltalog.fleet.run import run_fleet
from deltalog.health import compute_health
from deltalog.log.activity import find_new_commit
from deltalog.log_maintenance import create_checkpoint
from deltalog.log_maintenance.log_cleanup import cleanup_log
from deltalog.log_maintenance.manifest import generate_manifest
from deltalog.vacuum import execute_vacuum, plan_vacuum, vacuum

#: method -> (the function it delegates to, its parameters the method does not take, renames).
#: ``storage_options`` is never a method's: the table carries its own.
DELEGATES: dict[str, tuple[Callable[..., Any], set[str], dict[str, str]]] = {
    "vacuum": (vacuum, {"table", "storage_options"}, {}),
    "compact": (compact, {"table", "storage_options"}, {}),
    "create_checkpoint": (create_checkpoint, {"table", "storage_options"}, {}),
    "cleanup_log": (cleanup_log, {"table", "storage_options"}, {}),
    "generate_manifest": (generate_manifest, {"table", "storage_options"}, {}),
    "transaction": (Transaction.__init__, {"self", "storage", "snapshot"}, {}),
    "health": (compute_health, {"snapshot"}, {"target": "target_file_size"}),
}


def _params(fn: Callable[..., Any], skip: set[str] = frozenset(), renames: dict[str, str] | None = None) -> list:
    renames = renames or {}
    return [
        (renames.get(p.name, p.name), p.default, str(p.annotation))
        for p in inspect.signature(fn).parameters.values()
        if p.name not in skip
    ]


@pytest.mark.parametrize("method", sorted(DELEGATES))
def test_method_mirrors_its_function(method):
    fn, skip, renames = DELEGATES[method]
    ours = _params(getattr(DeltaTable, method), {"self"})
    theirs = _params(fn, skip, renames)
    if method == "health":  # the method also takes a size string, as every other target size does
        theirs = [(n, d, "int | str | None" if n == "target_file_size" else a) for n, d, a in theirs]
    assert ours == theirs


def test_every_public_method_is_keyword_only_and_typed():
    for name, fn in inspect.getmembers(DeltaTable, inspect.isfunction):
        if name.startswith("_"):
            continue
        params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
        assert "**" not in str(inspect.signature(fn)), f"DeltaTable.{name} passes **options through"
        positional = [p.name for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY]
        if name == "snapshot":  # snapshot(version) / snapshot(timestamp=...), as delta-rs' load_as_version
            positional = [p for p in positional if p not in ("version", "timestamp")]
        assert positional == [], f"DeltaTable.{name}: {positional} are not keyword-only"
        assert all(p.annotation is not inspect.Parameter.empty for p in params), name
        assert inspect.signature(fn).return_annotation is not inspect.Signature.empty, name


def test_the_mirror_check_sees_a_drift():
    def drifted(self, *, dry_run: bool = True, now_ms: int | None = None):  # default changed
        pass

    assert _params(drifted, {"self"}) != _params(cleanup_log, {"table", "storage_options"})


#: Every public function that opens a table (from a path/URI or a list of them).
OPENERS = [
    plan_vacuum,
    execute_vacuum,
    vacuum,
    compact,
    plan_compaction,
    commit_outputs,
    create_checkpoint,
    cleanup_log,
    generate_manifest,
    create_table,
    convert_to_delta,
    commit_request,
    maintenance_due,
    discover_tables,
    fleet_health,
    run_fleet,
    maintain_table,
]


@pytest.mark.parametrize("fn", OPENERS, ids=lambda f: f.__name__)
def test_storage_options_are_taken_the_same_way(fn):
    p = inspect.signature(fn).parameters.get("storage_options")
    assert p is not None, f"{fn.__name__} takes no storage_options"
    assert (p.kind, p.default, str(p.annotation)) == (inspect.Parameter.KEYWORD_ONLY, None, "dict[str, Any] | None")


def test_every_exported_function_is_an_opener_or_takes_no_table():
    exported = [getattr(deltalog, n) for n in deltalog.__all__]
    functions = [f for f in exported if inspect.isfunction(f)]
    assert functions and all(f in OPENERS for f in functions)
    # find_new_commit reads from a Storage its caller opened (the sensors' trigger): nothing to open.
    assert "storage_options" not in inspect.signature(find_new_commit).parameters
