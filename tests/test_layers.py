"""The packages' shape: imports run one way, and docs/DEVELOPING.md's module map is the tree.

The layers, lowest first, are declared here for the core (``deltalog``: the ``design.md``
picture, package by package) and for the Airflow provider (``deltalog_provider``). A module
imports only from its own layer or below, at module level and inside functions alike
(``UPWARD`` would list deliberate exceptions; it is empty). No import cycle exists in
either, counting imports inside functions and type-only ones, between modules or between
packages. Read with ``ast``: nothing is imported to check.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(REPO, "provider", "deltalog")
PROVIDER_PACKAGE = os.path.join(REPO, "provider", "deltalog_provider")

#: Lowest first. A name stands for the module and, for a package, everything in it.
LAYERS: list[tuple[str, list[str]]] = [
    ("basics", ["_version", "errors", "result_contract", "_flags", "_arrow_utils"]),
    ("storage", ["storage"]),
    ("protocol", ["protocol"]),
    ("log", ["log"]),
    ("uniform", ["uniform"]),  # UniForm's Iceberg metadata: read by vacuum, written after commits
    ("log_maintenance", ["log_maintenance"]),
    ("commit", ["commit"]),
    ("write_checks", ["write_checks"]),
    ("engines", ["engines"]),
    ("operations", ["vacuuming", "compaction", "convert", "create", "ingest"]),
    ("maintenance", ["maintenance"]),
    ("journal", ["journal"]),  # the maintenance history: records what the operations did, read by the fleet
    ("fleet", ["fleet"]),
    ("facade", ["table"]),  # DeltaTable: only the CLI, the package root, the provider and users import it
    ("interface", ["cli", "__main__", ""]),  # "": the package itself (deltalog/__init__.py)
]

#: Deliberate imports up a layer, inside functions, and why: none. The operations take a table's
#: storage (never the facade), the post-commit hooks call storage-level work below the commit
#: layer, and the facade sits on top, so every import runs down.
UPWARD: dict[tuple[str, str], str] = {}

#: The provider's layers, lowest first: the version-compat seam and what Airflow reads at start-up;
#: the hooks (connection mapping, retry policy, Spark submission); Airflow-free helpers; what
#: operators and sensors share; the triggers; the operators and sensors; the fleet view plugin
#: (the API server's pages); the package itself.
PROVIDER_LAYERS: list[tuple[str, list[str]]] = [
    ("seam", ["version_compat", "get_provider_info", "callbacks"]),
    ("hooks", ["hooks"]),
    ("helpers", ["utils"]),
    ("shared", ["thresholds", "deadlines"]),
    ("triggers", ["triggers"]),
    ("tasks", ["operators", "sensors", "assets"]),  # assets: watched Assets (their triggers, at parse time)
    ("views", ["fleet_view"]),  # the API server's plugin: reads the history through a hook, runs no task
    ("interface", [""]),
]


def _modules(package_dir: str = PACKAGE) -> dict[str, str]:
    """Dotted name below the package ("" for the package) -> file."""
    out = {}
    for folder, _, files in os.walk(package_dir):
        for name in files:
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(folder, name), package_dir)[:-3].replace(os.sep, ".")
                out[rel.removesuffix("__init__").rstrip(".")] = os.path.join(folder, name)
    return out


@dataclass(frozen=True)
class Tree:
    """A package checked here: its import name, its modules and its layers."""

    name: str
    modules: dict[str, str]
    layers: list[tuple[str, list[str]]]


MODULES = _modules()
CORE = Tree("deltalog", MODULES, LAYERS)
PROVIDER = Tree("deltalog_provider", _modules(PROVIDER_PACKAGE), PROVIDER_LAYERS)
TREES = {"deltalog": CORE, "deltalog_provider": PROVIDER}


def _resolve(dotted: str, tree: Tree = CORE) -> str | None:
    """The module an imported ``<package>.x.y`` name lives in (None for outside the package)."""
    if dotted != tree.name and not dotted.startswith(tree.name + "."):
        return None
    name = dotted.removeprefix(tree.name).lstrip(".")
    while name not in tree.modules:
        name = name.rpartition(".")[0]
    return name


def _imports(module: str, *, types: bool = False, tree: Tree = CORE) -> list[tuple[str, bool]]:
    """(imported module, at module level?) for every import of ``module``.

    Type-only imports (under ``if TYPE_CHECKING:``) are left out unless ``types``: they never
    run, so they may not break the layers' order, but they count for the cycle check.
    """
    path = tree.modules[module]
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    out: list[tuple[str, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test) and not types:
                continue
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, False)
                continue
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = (f"{tree.name}." + package).rstrip(".")
                    for _ in range(child.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}".rstrip(".")
                names = [f"{base}.{a.name}" for a in child.names]
            for n in names:
                target = _resolve(n, tree)
                if target is not None and target != module:
                    out.append((target, top))
            visit(child, top)

    visit(ast.parse(open(path, encoding="utf-8").read()), True)
    return out


def _layer(module: str, tree: Tree = CORE) -> tuple[int, str]:
    best: tuple[int, int, str] | None = None
    for i, (_, names) in enumerate(tree.layers):
        for n in names:
            if module == n or (n and module.startswith(n + ".")):
                if best is None or len(n) > best[1]:
                    best = (i, len(n), n)
    assert best is not None, f"{tree.name}.{module} is in no layer: add it to its layers"
    return best[0], best[2]


@pytest.mark.parametrize("name", sorted(TREES))
def test_every_module_has_a_layer(name):
    tree = TREES[name]
    assert len(tree.modules) > (80 if tree is CORE else 25)
    for module in tree.modules:
        _layer(module, tree)


@pytest.mark.parametrize("name", sorted(TREES))
def test_no_import_goes_up_a_layer(name):
    tree = TREES[name]
    wrong = []
    for module in tree.modules:
        mine, my_name = _layer(module, tree)
        for target, top in _imports(module, tree=tree):
            theirs, their_name = _layer(target, tree)
            if theirs > mine and (top or tree is not CORE or (my_name, their_name) not in UPWARD):
                where = "module level" if top else "in a function"
                wrong.append(f"{module} ({tree.layers[mine][0]}) imports {target} ({tree.layers[theirs][0]}) {where}")
    assert wrong == []


def test_upward_exceptions_are_still_needed():
    used = set()
    for module in MODULES:
        mine, my_name = _layer(module)
        for target, _ in _imports(module):
            theirs, their_name = _layer(target)
            if theirs > mine:
                used.add((my_name, their_name))
    assert set(UPWARD) == used


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one node (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return groups


@pytest.mark.parametrize("name", sorted(TREES))
def test_no_import_cycle_even_through_functions_and_types(name):
    """Module-level, in-function and type-only imports together form no cycle."""
    tree = TREES[name]
    graph = {m: {t for t, _ in _imports(m, types=True, tree=tree)} for m in tree.modules}
    assert _cycles(graph) == []


def _top(module: str) -> str:
    return module.split(".")[0]


@pytest.mark.parametrize("name", sorted(TREES))
def test_packages_import_one_way(name):
    """Folded into top-level packages (``storage``, ``log``, ``hooks``, ...), the imports still form no cycle.

    Importing ``deltalog.log.snapshot`` runs ``deltalog/log/__init__.py`` first, so a cycle
    between packages would be a cycle at import time even when the modules' graph has none.
    """
    tree = TREES[name]
    graph: dict[str, set[str]] = {}
    for m in tree.modules:
        imported = _imports(m, types=True, tree=tree)
        graph.setdefault(_top(m), set()).update(_top(t) for t, _ in imported if _top(t) != _top(m))
    assert _cycles(graph) == []


def test_the_cycle_check_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_layer_check_sees_an_upward_import():
    assert _layer("log.snapshot")[0] < _layer("vacuuming.plan")[0]  # the order the check relies on
    assert ("log", "vacuuming") not in UPWARD
    assert _layer("hooks.delta_table", PROVIDER)[0] < _layer("operators.base", PROVIDER)[0]


def test_the_provider_check_reads_imports_inside_functions():
    """The provider's hook imports ``get_provider_info`` inside a method: the check must see it."""
    assert ("get_provider_info", False) in _imports("hooks.delta_table", tree=PROVIDER)
    assert ("version_compat", True) in _imports("hooks.delta_table", tree=PROVIDER)


# --- docs/DEVELOPING.md's module map -------------------------------------------------------

_ROW = re.compile(r"^\| `([^`]+)` \|(.*)\|\s*$")


def _map_rows() -> list[tuple[str, str]]:
    with open(os.path.join(REPO, "docs", "DEVELOPING.md"), encoding="utf-8") as fh:
        return [(m.group(1), m.group(2)) for line in fh if (m := _ROW.match(line))]


def _entry_path(entry: str) -> str:
    if entry.startswith("deltalog_provider/"):  # the provider's rows name their package
        return os.path.join(REPO, "provider", entry.rstrip("/"))
    return os.path.join(PACKAGE, entry.rstrip("/"))


def test_module_map_names_only_what_exists_once():
    rows = _map_rows()
    names = [n for n, _ in rows]
    assert len(names) > 40
    assert sorted({n for n in names if names.count(n) > 1}) == []
    assert [n for n in names if not os.path.exists(_entry_path(n))] == []


def test_module_map_covers_the_tree():
    entries = {n.rstrip("/") for n, _ in _map_rows()}
    missing = []
    for folder, dirs, files in os.walk(PACKAGE):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if not name.endswith(".py") or name in ("__main__.py", "_version.py"):
                continue
            rel = os.path.relpath(os.path.join(folder, name), PACKAGE).replace(os.sep, "/")
            parts = rel.split("/")
            covered = any("/".join(parts[:i]) in entries for i in range(1, len(parts))) or rel in entries
            if name == "__init__.py" and len(parts) > 1:  # a package: covered by a row for it or its contents
                prefix = "/".join(parts[:-1])
                covered = covered or any(e.startswith(prefix + "/") for e in entries)
            if not covered:
                missing.append(rel)
    assert missing == []


def test_the_provider_map_covers_the_provider():
    """Every module and package at the provider's top has its row, and the map names nothing else."""
    rows = {n.rstrip("/") for n, _ in _map_rows() if n.startswith("deltalog_provider/")}
    top = {
        f"deltalog_provider/{name.removesuffix('.py')}" + (".py" if name.endswith(".py") else "")
        for name in os.listdir(PROVIDER_PACKAGE)
        if (name.endswith(".py") and name != "__init__.py")
        or os.path.exists(os.path.join(PROVIDER_PACKAGE, name, "__init__.py"))
    }
    assert rows == top


@pytest.mark.parametrize("package", ["deltalog_provider/hooks", "deltalog_provider/utils"])
def test_provider_package_rows_name_their_modules(package):
    (text,) = [t for n, t in _map_rows() if n.rstrip("/") == package]
    named = set(re.findall(r"`(\w+\.py)`", text))
    assert named == {f for f in os.listdir(_entry_path(package)) if f.endswith(".py") and f != "__init__.py"}


@pytest.mark.parametrize("package", ["fleet", "engines/spark", "log_maintenance", "vacuuming", "cli"])
def test_package_rows_name_their_modules(package):
    """Where a package's row lists its modules, it lists them all and no others."""
    (text,) = [t for n, t in _map_rows() if n.rstrip("/") == package]
    named = set(re.findall(r"`(\w+\.py)`", text)) - {"__init__.py"}
    present = {f for f in os.listdir(_entry_path(package)) if f.endswith(".py") and f != "__init__.py"}
    assert named == present
