"""What we declare is what CI runs: pyproject.toml, the README and ``airflow-releases.toml`` agree.

The release matrix itself (a venv per release, the provider tests and DAG runs there) is
``tests/test_airflow_releases.py``; these are the cheap checks that keep its three
descriptions equal: the Airflow range and the Python classifiers of pyproject.toml, the
README's support matrix, the explained pins and the oldest libraries of the matrix file.
"""

from __future__ import annotations

import re
import tomllib

from airflow_matrix import MATRIX_FILE, REPO, load_matrix, version_tuple

MATRIX = load_matrix()
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def _requirement(name: str, group: list[str]) -> str:
    return next(r for r in group if re.match(rf"{re.escape(name)}\s*[<>=!~\[]", r))


def _bounds(spec: str) -> tuple[str, str]:
    lower = re.search(r">=\s*([\d.]+)", spec)
    upper = re.search(r"<\s*([\d.]+)", spec)
    assert lower and upper, f"{spec}: a lower and an upper bound"
    return lower.group(1), upper.group(1)


def test_pyproject_declares_exactly_the_matrix_releases_and_pythons():
    low, high = _bounds(_requirement("apache-airflow", PYPROJECT["project"]["optional-dependencies"]["airflow"]))
    minors = {".".join(v.split(".")[:2]) for v in MATRIX.airflows}
    lo, hi = version_tuple(low), version_tuple(high)
    declared = {f"3.{m}" for m in range(lo[1], hi[1])} if lo[0] == hi[0] == 3 else set()
    assert declared == minors, f"apache-airflow{low}..{high} declares {declared}, the matrix runs {minors}"
    assert len(minors) == len(MATRIX.airflows), "one release per minor"

    lock = (REPO / "requirements.lock").read_text()
    assert f"apache-airflow=={MATRIX.lock_airflow}\n" in lock, "[lock] names the lock's Airflow"

    classifiers = PYPROJECT["project"]["classifiers"]
    pythons = {
        c.rsplit(" :: ", 1)[1] for c in classifiers if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    assert pythons == MATRIX.pythons, f"classifiers {pythons}, CI runs {MATRIX.pythons}"
    low, high = _bounds(PYPROJECT["project"]["requires-python"])
    ordered = sorted(pythons, key=version_tuple)
    assert version_tuple(low) == version_tuple(ordered[0]), "requires-python starts at the oldest Python CI runs"
    assert version_tuple(high)[:2] == (3, version_tuple(ordered[-1])[1] + 1), "and stops after the newest"
    assert {"Framework :: Apache Airflow", "Framework :: Apache Airflow :: Provider"} <= set(classifiers)


def test_readme_support_matrix_names_the_same_releases():
    readme = (REPO / "README.md").read_text()
    assert MATRIX_FILE.name in readme, "the README points at the matrix file"
    section = readme[readme.index("### Support matrix") :]
    section = section[: section.index("\n## ")]
    rows = [line for line in section.splitlines() if re.match(r"\|\s*3\.\d+\.\d+", line)]
    named = {re.match(r"\|\s*([\d.]+)", row).group(1): row for row in rows}  # type: ignore[union-attr]
    assert set(named) == set(MATRIX.airflows), f"README names {sorted(named)}, the matrix {MATRIX.airflows}"
    assert f"Python {MATRIX.lock_python}" in named[MATRIX.lock_airflow]
    for release in MATRIX.releases:
        assert f"Python {release.python}" in named[release.airflow], named[release.airflow]
        for pin in release.pins:
            assert pin.requirement in named[release.airflow], f"README row of {release.airflow} lacks {pin.requirement}"
    oldest = next(r for r in MATRIX.releases if r.oldest)
    for requirement in oldest.oldest:
        assert requirement.replace("==", " ") in named[oldest.airflow]


def test_every_pin_is_explained_and_the_oldest_are_the_declared_floors():
    for release in MATRIX.releases:
        for pin in release.pins:
            assert len(pin.reason) > 40, f"{release.airflow}: {pin.requirement} needs its reason"
    oldest = [r for r in MATRIX.releases if r.oldest]
    assert len(oldest) == 1, "exactly one venv runs our oldest declared libraries"
    deps = PYPROJECT["project"]["dependencies"]
    for requirement in oldest[0].oldest:
        name, _, version = requirement.partition("==")
        floor = re.search(r">=\s*([\d.]+)", _requirement(name, deps)).group(1)  # type: ignore[union-attr]
        assert version_tuple(version) == version_tuple(floor + ".0.0")[: len(version_tuple(version))], (
            f"{name}: the matrix installs {version}, pyproject's floor is {floor}"
        )
