"""Every library the package (and the example DAGs) import is declared in pyproject.toml.

Walks the import statements of ``provider/`` and ``dags/`` (conditional and lazy imports
included: they run on some path) and maps each top-level module to the distribution that
installs it. The core library (``deltalog``) may use only the main dependencies (its Spark
packages, what runs in a Spark job, also the ``spark`` extra); the provider and the example DAGs also the
``airflow`` and ``amazon`` extras. A library reached only through another one's
dependencies (numpy through pyarrow, botocore through s3fs) is a missing declaration:
``pip install`` of a later version of that other library may drop it.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
OWN = {"deltalog", "deltalog_provider", "deltalog_example"}


def _name(requirement: str) -> str:
    return _canonical(re.match(r"[A-Za-z0-9_.-]+", requirement).group(0))  # type: ignore[union-attr]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared(*extras: str) -> set[str]:
    project = PYPROJECT["project"]
    names = {_name(r) for r in project["dependencies"]}
    for extra in extras:
        names |= {_name(r) for r in project["optional-dependencies"][extra]}
    return names


def _imports(path: Path) -> set[str]:
    """Dotted module names imported by ``path`` (absolute imports only)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


_DISTRIBUTIONS = importlib.metadata.packages_distributions()


def _distributions(module: str) -> set[str]:
    """The distributions that may provide ``module`` (Airflow's namespace split by provider)."""
    top = module.split(".")[0]
    if top == "airflow":
        parts = module.split(".")
        if len(parts) > 2 and parts[1] == "providers":
            # airflow.providers.apache.spark... -> apache-airflow-providers-apache-spark
            candidates = {f"apache-airflow-providers-{'-'.join(parts[2:i])}" for i in range(3, len(parts) + 1)}
            return {c for c in candidates if _installed(c)}
        return {"apache-airflow"}
    return {_canonical(d) for d in _DISTRIBUTIONS.get(top, [])}


def _installed(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _files() -> list[tuple[Path, set[str]]]:
    """Each source file with the distributions it may import from."""
    out = []
    for path in sorted((REPO / "provider" / "deltalog").rglob("*.py")):
        spark_job = "/spark/" in path.as_posix()  # the Spark jobs' packages (engines/spark, compaction/spark)
        out.append((path, _declared("spark") if spark_job else _declared()))
    for path in sorted((REPO / "provider" / "deltalog_provider").rglob("*.py")):
        out.append((path, _declared("airflow", "amazon")))
    for path in sorted((REPO / "dags").rglob("*.py")):
        spark_job = "spark_jobs" in path.as_posix()
        out.append((path, _declared("airflow", "amazon", "spark") if spark_job else _declared("airflow", "amazon")))
    return out


def test_every_imported_library_is_declared():
    missing: dict[str, set[str]] = {}
    for path, allowed in _files():
        for module in _imports(path):
            top = module.split(".")[0]
            if top in sys.stdlib_module_names or top in OWN or top == "__future__":
                continue
            dists = _distributions(module)
            assert dists, f"{path.relative_to(REPO)} imports {module}, which no installed distribution provides"
            if not dists & allowed:
                missing.setdefault(str(path.relative_to(REPO)), set()).add(f"{module} ({', '.join(sorted(dists))})")
    assert not missing, f"imported but not declared for that code: {missing}"


def test_the_core_imports_no_airflow():
    """``deltalog`` must run (CLI, library) without Airflow installed."""
    for path in (REPO / "provider" / "deltalog").rglob("*.py"):
        assert not {m for m in _imports(path) if m.split(".")[0] == "airflow"}, path


#: ``airflow.sdk`` as the oldest supported release (3.0) exports it: product code outside the
#: version-compat seam imports only these names from it; newer ones go through the seam.
SDK_OF_THE_OLDEST_RELEASE = {
    "Asset", "AssetAlias", "AssetAll", "AssetAny", "AssetWatcher", "BaseNotifier", "BaseOperator",
    "BaseOperatorLink", "BaseSensorOperator", "Connection", "Context", "DAG", "EdgeModifier", "Label",
    "Metadata", "ObjectStoragePath", "Param", "PokeReturnValue", "TaskGroup", "Variable", "XComArg",
    "asset", "chain", "chain_linear", "cross_downstream", "dag", "get_current_context",
    "get_parsing_context", "literal", "setup", "task", "task_group", "teardown",
}  # fmt: skip


def test_product_code_reaches_airflow_through_the_sdk_of_every_release_or_the_seam():
    """Outside ``version_compat``: ``airflow.sdk`` names 3.0 has, and providers' modules; nothing else."""
    seam = REPO / "provider" / "deltalog_provider" / "version_compat.py"
    product = [*(REPO / "provider" / "deltalog_provider").rglob("*.py"), *(REPO / "dags").rglob("*.py")]
    bad: dict[str, list[str]] = {}
    for path in product:
        if path == seam:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("airflow"):
                module = node.module or ""
                names = {a.name for a in node.names}
                ok = module.startswith("airflow.providers.") or (
                    module == "airflow.sdk" and names <= SDK_OF_THE_OLDEST_RELEASE
                )
                if not ok:
                    bad.setdefault(str(path.relative_to(REPO)), []).append(
                        f"from {module} import {', '.join(sorted(names))}"
                    )
            elif isinstance(node, ast.Import):
                bad_names = [a.name for a in node.names if a.name.startswith("airflow")]
                if bad_names:
                    bad.setdefault(str(path.relative_to(REPO)), []).extend(bad_names)
    assert not bad, bad


#: What the seam imports from Airflow's API server for the fleet view (the plugin's FastAPI app):
#: the two names Airflow's plugin documentation gives a FastAPI app for its authentication.
PLUGIN_INTERFACES = {"airflow.api_fastapi.core_api.security", "airflow.api_fastapi.app"}


@pytest.mark.parametrize("internal", ["._shared", "_runtime", ".models.", ".utils.session", ".api_fastapi"])
def test_product_code_imports_no_airflow_internals(internal: str):
    """The provider and the example DAGs reach Airflow through ``airflow.sdk``, the public provider
    interfaces and ``deltalog_provider.version_compat``, never through Airflow's internals (the seam
    takes the plugin interfaces above, imported on first use by the API server only)."""
    seam = REPO / "provider" / "deltalog_provider" / "version_compat.py"
    product = [*(REPO / "provider" / "deltalog_provider").rglob("*.py"), *(REPO / "dags").rglob("*.py")]
    for path in product:
        allowed = PLUGIN_INTERFACES if path == seam else set()
        bad = {m for m in _imports(path) if m.startswith("airflow") and internal in f"{m}." and m not in allowed}
        assert not bad, f"{path.relative_to(REPO)} imports {bad}"


def test_workers_never_load_the_api_server():
    """Importing the provider's operators (what a task does) loads neither the seam's plugin names nor the
    API server; the plugin's names load on first use."""
    import subprocess

    code = (
        "import sys, deltalog_provider.operators, deltalog_provider.version_compat as v\n"
        "print(sorted(m for m in sys.modules if m.startswith('airflow.api_fastapi')))\n"
        "print('get_user' in vars(v))\n"
        "v.get_user\n"
        "print('get_user' in vars(v), v.AirflowPlugin.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:3] == ["[]", "False", "True AirflowPlugin"], out
