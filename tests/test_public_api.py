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

import ast
import dataclasses
import importlib
import inspect
import os
import pkgutil
from collections.abc import Callable
from typing import Any

import pytest

import deltalog
from deltalog import DeltaTable
from deltalog.commit.transaction import Transaction
from deltalog.compaction import CompactionOptions, commit_outputs, compact, plan_compaction
from deltalog.compaction.spark import commit_spark_result, compact_with_spark_job, write_compaction_plan
from deltalog.convert import convert_to_delta
from deltalog.create import create_table
from deltalog.errors import InvalidArgumentError
from deltalog.fleet.discover import discover_tables
from deltalog.fleet.lease import acquire_lease
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
from deltalog.uniform import expire_iceberg_snapshots, sync_iceberg_metadata
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
    acquire_lease,
    commit_spark_result,
    compact_with_spark_job,
    write_compaction_plan,
    sync_iceberg_metadata,
    expire_iceberg_snapshots,
]


@pytest.mark.parametrize("fn", OPENERS, ids=lambda f: f.__name__)
def test_storage_options_are_taken_the_same_way(fn):
    p = inspect.signature(fn).parameters.get("storage_options")
    assert p is not None, f"{fn.__name__} takes no storage_options"
    assert (p.kind, p.default, str(p.annotation)) == (inspect.Parameter.KEYWORD_ONLY, None, "dict[str, Any] | None")


def test_every_exported_function_that_takes_a_table_opens_it_the_same_way():
    exported = [getattr(deltalog, n) for n in deltalog.__all__]
    functions = [f for f in exported if inspect.isfunction(f)]
    takes_table = [f for f in functions if "table" in inspect.signature(f).parameters]
    assert takes_table and [f.__name__ for f in takes_table if f not in OPENERS] == []
    assert [f.__name__ for f in OPENERS if f not in functions] == []  # and every opener is at the top
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
    # The rest are given another way on the command line (--time-budget, --spark-*, --no-writer-aware),
    # or are for Python callers only (the fleet's overriding_objective).
    assert fields - set(OPTION_FLAGS) == {
        "deadline",
        "spark_options",
        "local_options",
        "run_hooks",
        "writer_aware",
        "overriding_objective",
    }


# --- what is public: __all__, the root, and what the provider may import -----------------

PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "provider")
ROOT = os.path.join(PACKAGE_DIR, "deltalog")


def _module_files() -> dict[str, str]:
    """``deltalog.x.y`` -> its file, for every module of the core."""
    out = {}
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(folder, f), PACKAGE_DIR)[:-3].replace(os.sep, ".")
                out[rel.removesuffix(".__init__")] = os.path.join(folder, f)
    return out


MODULE_FILES = _module_files()


def _private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split(".")[1:])


def _declared_all(path: str) -> list[str] | None:
    for node in ast.parse(open(path, encoding="utf-8").read()).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return list(ast.literal_eval(node.value))
    return None


def _public_face(module: str) -> bool:
    """A package's ``__init__`` or a module at the top: what users and the provider import from."""
    path = MODULE_FILES[module]
    return not _private(module) and (path.endswith("__init__.py") or module.count(".") == 1)


def test_every_module_has_all_or_a_leading_underscore():
    assert len(MODULE_FILES) > 80
    missing = [m for m, path in MODULE_FILES.items() if not _private(m) and _declared_all(path) is None]
    assert missing == []


def test_every_name_in_all_exists():
    wrong = []
    for m in MODULE_FILES:
        if _private(m) or m.endswith("__main__"):
            continue
        module = importlib.import_module(m)
        wrong += [f"{m}.{n}" for n in module.__all__ if not hasattr(module, n)]
    assert wrong == []


def _imported_names(path: str) -> list[tuple[str, str | None, int]]:
    """(module, name or None for ``import module``, line) of every ``deltalog`` import in ``path``."""
    out: list[tuple[str, str | None, int]] = []
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "deltalog":
            out += [(node.module or "", a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names if a.name.split(".")[0] == "deltalog"]
    return out


def test_a_name_one_package_takes_from_another_is_in_its_all():
    """``__all__`` is a module's interface: what another package of the core imports from it is listed there."""
    wrong = []
    for importer, path in MODULE_FILES.items():
        for module, name, line in _imported_names(path):
            if name is None or module not in MODULE_FILES or f"{module}.{name}" in MODULE_FILES:
                continue  # a whole module, or a submodule imported by name
            if importer != "deltalog" and module.split(".")[:2] == importer.split(".")[:2]:
                continue  # the same package: its modules may share more
            declared = _declared_all(MODULE_FILES[module])
            if declared is not None and name not in declared:
                wrong.append(f"{importer}:{line} imports {name} from {module}, not in its __all__")
    assert wrong == []


def _result_classes() -> dict[str, type]:
    out = {}
    for info in pkgutil.walk_packages(deltalog.__path__, "deltalog."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == info.name and "to_dict" in cls.__dict__ and not name.startswith("_"):
                out[name] = cls
    return out


def test_the_root_exports_every_public_function_and_result_class():
    """Each package's ``__init__`` says what of it is public; the root gathers all of it, and every result class."""
    wanted: dict[str, Any] = dict(_result_classes())
    for m in MODULE_FILES:
        if (
            not _public_face(m)
            or m in ("deltalog", "deltalog.errors", "deltalog.result_contract")
            or m.startswith("deltalog.cli")
        ):
            continue
        module = importlib.import_module(m)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                wanted[name] = obj
    assert sorted(set(wanted) - set(deltalog.__all__)) == []
    assert [n for n, obj in wanted.items() if getattr(deltalog, n) is not obj] == []


def test_the_root_names_are_all_importable_and_none_is_a_module():
    """``deltalog.vacuum`` is the function, ``deltalog.commit_request`` too: no module of that name hides them."""
    for info in pkgutil.walk_packages(deltalog.__path__, "deltalog."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)  # importing every module sets no root attribute over a name
    for name in deltalog.__all__:
        assert not inspect.ismodule(getattr(deltalog, name)), name
    assert inspect.isfunction(deltalog.vacuum) and inspect.isfunction(deltalog.commit_request)


def test_the_root_type_imports_match_the_lazy_names():
    """The ``TYPE_CHECKING`` imports (what mypy and IDEs see) name exactly what ``_LAZY`` loads, from the same module."""
    tree = ast.parse(open(MODULE_FILES["deltalog"], encoding="utf-8").read())
    typed = {}
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom)
                typed.update({a.name: imp.module for a in imp.names})
    assert typed == deltalog._LAZY
    assert set(deltalog.__all__) == set(deltalog._LAZY) | {"DeltaLogError", "DeltaTable", "__version__"}


def test_import_deltalog_stays_light():
    """The root loads the facade and the log readers; the operations load on first use."""
    import subprocess
    import sys

    code = "import sys, deltalog; print(sorted(m for m in sys.modules if m.startswith('deltalog.')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for heavy in ("deltalog.compaction", "deltalog.vacuuming", "deltalog.log_maintenance", "deltalog.commit"):
        assert f"'{heavy}" not in loaded, heavy


def _provider_files() -> list[str]:
    top = os.path.join(PACKAGE_DIR, "deltalog_provider")
    return [os.path.join(f, n) for f, _, names in os.walk(top) for n in names if n.endswith(".py")]


def test_the_provider_imports_only_public_names():
    """The provider takes from the root, a package's ``__init__`` or a module at the top, and only what its
    ``__all__`` lists: no private module, no module inside a package, no name left out of ``__all__``."""
    files = _provider_files()
    assert len(files) > 20
    wrong = []
    for path in files:
        for module, name, line in _imported_names(path):
            where = f"{os.path.relpath(path, PACKAGE_DIR)}:{line}"
            if name is None or module not in MODULE_FILES or not _public_face(module):
                wrong.append(f"{where} imports {module}{'.' + name if name else ''}")
            elif name not in importlib.import_module(module).__all__:
                wrong.append(f"{where} imports {name} from {module}, not in its __all__")
    assert wrong == []


def test_the_provider_check_sees_an_internal_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from deltalog.compaction.plan import plan_from_snapshot\nfrom deltalog._version import __version__\n"
    )
    found = [(m, n) for m, n, _ in _imported_names(str(bad)) if not _public_face(m)]
    assert found == [("deltalog.compaction.plan", "plan_from_snapshot"), ("deltalog._version", "__version__")]
