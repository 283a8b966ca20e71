"""The public API's shape, by signature: it cannot drift from the functions it fronts.

``DeltaTable``'s methods spell out the parameters of the operation each delegates to
(so ``help()`` and IDEs show them): same names, same defaults, same type hints, all
keyword-only. Every public function that opens a table takes ``storage_options`` the
same way: keyword-only, ``dict[str, Any] | None``, default None.

Compaction's many options are declared once, in ``CompactionOptions`` (name, default,
check); ``compact``, ``plan_compaction`` and ``DeltaTable.compact`` take that object, or
its fields as keyword arguments (``**option_values``, the only ``**`` allowed, checked
against the fields here); the CLI maps its flags onto the same fields.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import pytest

import deltalog
from deltalog import DeltaTable
from deltalog.commit.transaction import Transaction
from deltalog.compaction import CompactionOptions, commit_outputs, compact, plan_compaction
from deltalog.convert import convert_to_delta
from deltalog.create import create_table
from deltalog.errors import InvalidArgumentError
from deltalog.fleet.discover import discover_tables
from deltalog.fleet.maintain import maintain_table
from deltalog.fleet.ranking import fleet_health
from deltalog.fleet.run import run_fleet
from deltalog.ingest import commit_request
from deltalog.log.activity import find_new_commit
from deltalog.log_maintenance import create_checkpoint
from deltalog.log_maintenance.log_cleanup import cleanup_log
from deltalog.log_maintenance.manifest import generate_manifest
from deltalog.maintenance.due import maintenance_due
from deltalog.maintenance.health import compute_health
from deltalog.vacuuming import execute_vacuum, plan_vacuum, vacuum

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
        var_kw = [p.name for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
        if var_kw:  # only the options shorthand, beside the options object it stands for
            assert var_kw == ["option_values"] and "options" in inspect.signature(fn).parameters, name
            params = [p for p in params if p.name != "option_values"]
        assert "**" not in str(inspect.signature(fn).replace(parameters=params)), f"DeltaTable.{name} passes **"
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


# --- compaction options: one declaration -------------------------------------------------


OPTION_TAKERS = {"compact": compact, "plan_compaction": plan_compaction, "DeltaTable.compact": DeltaTable.compact}


@pytest.mark.parametrize("name", sorted(OPTION_TAKERS))
def test_options_are_taken_as_one_object_or_its_fields(name):
    params = inspect.signature(OPTION_TAKERS[name]).parameters
    assert str(params["options"].annotation) == "CompactionOptions | None" and params["options"].default is None
    assert params["option_values"].kind is inspect.Parameter.VAR_KEYWORD
    fields = {f.name for f in dataclasses.fields(CompactionOptions)}
    assert not fields & set(params), f"{name} repeats options of CompactionOptions as parameters"


def test_an_unknown_option_is_refused_by_name(tmp_path):
    for call in (
        lambda: compact(str(tmp_path), target_sise=1),
        lambda: plan_compaction(str(tmp_path), target_sise=1),
        lambda: DeltaTable(str(tmp_path)).compact(target_sise=1),
    ):
        with pytest.raises(TypeError, match="unexpected keyword argument 'target_sise'"):
            call()


def test_the_shorthand_is_the_options_object(tmp_path):
    """``compact(t, x=v)`` is ``compact(t, options=CompactionOptions(x=v))``; keywords win over the object."""
    base = CompactionOptions(target_size=1000, min_files=3)
    merged = CompactionOptions.of(base, {"min_files": 4}, "compact")
    assert (merged.target_size, merged.min_files) == (1000, 4) and base.min_files == 3
    with pytest.raises(InvalidArgumentError, match="min_files must be an integer of at least 2"):
        CompactionOptions.of(base, {"min_files": 1}, "compact")  # the fields are checked again


def test_every_option_is_checked_where_it_is_declared():
    bad = {
        "engine": "gpu",
        "plan_only": "yes",
        "run_hooks": 1,
        "purge_deletion_vectors": "true",
        "full": "no",
        "max_workers": 0,
        "bins_per_commit": 0,
        "min_files": 1,
        "max_bins": 0,
        "zorder_by": "ts",
    }
    for name, value in bad.items():
        with pytest.raises(InvalidArgumentError, match=name):
            CompactionOptions(**{name: value})
    with pytest.raises(InvalidArgumentError, match="purge only"):
        CompactionOptions(min_deleted_share=0.5)
    with pytest.raises(InvalidArgumentError, match="local engine only"):
        CompactionOptions(engine="spark", deadline=1.0)


def test_the_cli_flags_are_options_fields():
    from deltalog.cli.compact import OPTION_FLAGS

    fields = {f.name for f in dataclasses.fields(CompactionOptions)}
    assert set(OPTION_FLAGS) <= fields
    # The rest are given another way on the command line, or are for Python callers only.
    assert fields - set(OPTION_FLAGS) == {"deadline", "spark_options", "local_options", "run_hooks"}
