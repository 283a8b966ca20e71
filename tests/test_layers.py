"""The package's shape: imports read top-down, and docs/DEVELOPING.md's module map is the tree.

The layers, lowest first, are declared here (the ``design.md`` layers, module by module).
A module imports only from its own layer or below, at module level and inside functions
alike, but for the few deliberate calls upward listed in ``UPWARD`` (each says why); the
module-level import graph has no cycle. Read with ``ast``: nothing is imported to check.
"""

from __future__ import annotations

import ast
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(REPO, "provider", "deltalog")

#: Lowest first. A name stands for the module and, for a package, everything in it.
LAYERS: list[tuple[str, list[str]]] = [
    (
        "foundation",
        [
            "_version",
            "errors",
            "results",
            "flags",
            "arrow_utils",
            "isolation",
            "features",
            "parquet_codec",
            "sizes",
            "storage",
            "protocol",
            "schema",
            "partition_values",
            "stats",
            "commit_result",
            "commit_lines",
            "action_checks",
            "engines.spark_packages",
            "s3_reads",
            "dynamodb_commits",
        ],
    ),  # fmt: skip
    (
        "log",
        [
            "properties",
            "actions",
            "log",
            "table_config",
            "clustering",
            "row_tracking",
            "identity",
            "hidden",
            "row_rules",
            "schema_enforcement",
            "stats_check",
            "arrow_replay",
            "conflicts",
            "hooks",
            "snapshot",
            "history",
            "activity",
            "health",
        ],
    ),  # fmt: skip
    ("table", ["table", "checkpoint_reader"]),
    ("transaction", ["transaction"]),
    (
        "operations",
        [
            "checkpoint",
            "log_cleanup",
            "manifest",
            "vacuum",
            "compaction",
            "convert",
            "create",
            "commit_request",
            "due",
            "post_commit",
            "engines",
            "iceberg_compat",
            "journal",
        ],
    ),  # fmt: skip
    ("fleet", ["fleet"]),
    ("interface", ["cli", "__main__", ""]),  # "": the package itself (deltalog/__init__.py, the facade)
]

#: Deliberate imports up a layer, all inside functions (never at module level), and why.
UPWARD = {
    ("table", "vacuum"): "DeltaTable's methods delegate to the operations, which build on DeltaTable",
    ("table", "compaction"): "the same",
    ("table", "checkpoint"): "the same",
    ("table", "log_cleanup"): "the same",
    ("table", "manifest"): "the same",
    ("table", "transaction"): "the same (DeltaTable.transaction)",
    ("transaction", "post_commit"): "Transaction(post_commit_hooks=None) runs the standard hooks, which are operations",
}


def _modules() -> dict[str, str]:
    """Dotted name below ``deltalog`` ("" for the package) -> file."""
    out = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(folder, name), PACKAGE)[:-3].replace(os.sep, ".")
                out[rel.removesuffix("__init__").rstrip(".")] = os.path.join(folder, name)
    return out


MODULES = _modules()


def _resolve(dotted: str) -> str | None:
    """The module an imported ``deltalog.x.y`` name lives in (None for outside the package)."""
    if dotted != "deltalog" and not dotted.startswith("deltalog."):
        return None
    name = dotted.removeprefix("deltalog").lstrip(".")
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _imports(module: str) -> list[tuple[str, bool]]:
    """(imported module, at module level?) for every import of ``module`` (type-only imports left out)."""
    path = MODULES[module]
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    out: list[tuple[str, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
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
                    anchor = ("deltalog." + package).rstrip(".")
                    for _ in range(child.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}".rstrip(".")
                names = [f"{base}.{a.name}" for a in child.names]
            for n in names:
                target = _resolve(n)
                if target is not None and target != module:
                    out.append((target, top))
            visit(child, top)

    visit(ast.parse(open(path, encoding="utf-8").read()), True)
    return out


def _layer(module: str) -> tuple[int, str]:
    best: tuple[int, int, str] | None = None
    for i, (_, names) in enumerate(LAYERS):
        for n in names:
            if module == n or (n and module.startswith(n + ".")):
                if best is None or len(n) > best[1]:
                    best = (i, len(n), n)
    assert best is not None, f"deltalog.{module} is in no layer: add it to LAYERS"
    return best[0], best[2]


def test_every_module_has_a_layer():
    assert len(MODULES) > 80
    for module in MODULES:
        _layer(module)


def test_no_import_goes_up_a_layer():
    wrong = []
    for module in MODULES:
        mine, my_name = _layer(module)
        for target, top in _imports(module):
            theirs, their_name = _layer(target)
            if theirs > mine and (top or (my_name, their_name) not in UPWARD):
                where = "module level" if top else "in a function"
                wrong.append(f"{module} ({LAYERS[mine][0]}) imports {target} ({LAYERS[theirs][0]}) {where}")
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


def test_module_level_imports_have_no_cycle():
    graph = {m: {t for t, top in _imports(m) if top} for m in MODULES}
    state: dict[str, int] = {}
    cycles = []

    def walk(m: str, stack: list[str]) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t) :] + [t])
            elif t not in state:
                walk(t, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            walk(m, [])
    assert cycles == []


def test_the_layer_check_sees_an_upward_import():
    assert _layer("snapshot")[0] < _layer("vacuum.plan")[0]  # the order the check relies on
    assert ("snapshot", "vacuum") not in UPWARD


# --- docs/DEVELOPING.md's module map -------------------------------------------------------

_ROW = re.compile(r"^\| `([^`]+)` \|(.*)\|\s*$")


def _map_rows() -> list[tuple[str, str]]:
    with open(os.path.join(REPO, "docs", "DEVELOPING.md"), encoding="utf-8") as fh:
        return [(m.group(1), m.group(2)) for line in fh if (m := _ROW.match(line))]


def _entry_path(entry: str) -> str:
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


@pytest.mark.parametrize("package", ["fleet", "engines/spark", "checkpoint", "cli"])
def test_package_rows_name_their_modules(package):
    """Where a package's row lists its modules, it lists them all and no others."""
    (text,) = [t for n, t in _map_rows() if n.rstrip("/") == package]
    named = set(re.findall(r"`(\w+\.py)`", text)) - {"__init__.py"}
    present = {f for f in os.listdir(_entry_path(package)) if f.endswith(".py") and f != "__init__.py"}
    assert named == present
