"""The suite on parallel workers: which tests share a worker, in what order they start, one summary.

Registered as a pytest plugin from ``tests/conftest.py``. ``scripts/test.sh`` runs the suite with
pytest-xdist (``-n <workers> --dist loadgroup``); a plain ``pytest tests/test_x.py`` runs in one
process as before, and every rule below is then moot.

**Groups.** The tests of one group run on one worker, one after another; every other test is a
unit of its own and goes to whichever worker is free. The groups are found here, at collection, by
what a test uses, so that a new test lands right without anyone naming a group:

1. an explicit ``@pytest.mark.xdist_group("name")`` wins (tests that must not run beside each
   other's server or port in two processes, that must share something no fixture holds, or that
   reach a shared fixture by name through ``request.getfixturevalue``);
2. a test that uses one of :data:`SHARED_FIXTURES` (a session fixture worth one instance per run,
   not one per worker: the Delta Spark JVM and its corpus) joins that fixture's group;
3. a test that uses a fixture of module, class or package scope joins its module's group (the
   fixture is set up once, on that worker), split by the parameters of a parametrized such fixture
   (each release of the Airflow matrix is its own group, so the releases run side by side).

Session fixtures not in :data:`SHARED_FIXTURES` run once per worker: the S3 test server, Azurite,
fake-gcs-server, the provider tests' Airflow home. Work whose result is files any worker can read
is done once per run with ``run_once.once_per_run`` (our wheel, the release venvs, the migrated
Airflow database every SQLite home copies: ``airflow_homes``).

**Order.** Units start heaviest first (longest first packs a few workers best): each is weighed
by :func:`weight` (its tests, ``slow`` ones more, and a group's set-up). The workers write each
test's unit and each unit's weight where the controller reads them (``xdist-units.json`` in the
run's basetemp); the controller's scheduler (:func:`pytest_xdist_make_scheduler`, for
``--dist loadgroup``) is xdist's scope scheduling over these units. (xdist's own ``loadgroup``
renames node ids, which pytest 9.2 no longer lets it do: its groups fall apart silently.) A
unit's tests keep pytest's order, which sets each parametrized fixture up once.

**One summary.** The plugins that print at the end of a run (the Delta Spark corpus and oracle
tables, the reliability totals) send their workers' parts to the controller
(``pytest_testnodedown``), which prints them once. The type check's result, when
``scripts/test.sh`` ran it beside the tests (``$DELTALOG_TYPECHECK_LOG``), is printed here too.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

__all__ = ["SHARED_FIXTURES", "group_of", "utf8_safe", "weight"]

#: Session fixtures one run should start once rather than once per worker, and the group whose worker
#: holds them: a JVM with Delta Spark (about 1 GiB and 20 CPU seconds to start) and the corpus it reads.
SHARED_FIXTURES: dict[str, str] = {
    "delta_spark": "delta-spark",
    "delta_corpus": "delta-spark",
}

#: What a test weighs when it orders the work (seconds, roughly): marked slow, or not.
SLOW_WEIGHT, FAST_WEIGHT = 20.0, 1.0
#: A group is set up once: its fixtures (a JVM, a server, a venv) add to what its tests weigh.
GROUP_WEIGHT = 30.0

_HIGHER_SCOPES = ("module", "class", "package")


def _fixture_scopes(item: pytest.Item) -> dict[str, str]:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return {}
    scopes = {}
    for name in info.names_closure:
        defs = info.name2fixturedefs.get(name)
        if defs:
            scope = defs[-1].scope
            scopes[name] = scope if isinstance(scope, str) else getattr(scope, "value", str(scope))
    return scopes


def group_of(item: pytest.Item) -> str | None:
    """The ``xdist_group`` a test belongs to by the rules above (None: a unit of its own)."""
    mark = item.get_closest_marker("xdist_group")
    if mark is not None:
        return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    scopes = _fixture_scopes(item)
    for name, group in SHARED_FIXTURES.items():
        if name in scopes:
            return group
    shared = sorted(name for name, scope in scopes.items() if scope in _HIGHER_SCOPES)
    if not shared:
        return None
    module = item.nodeid.split("::")[0]
    callspec = getattr(item, "callspec", None)
    indices = getattr(callspec, "indices", {}) if callspec is not None else {}
    params = [f"{name}#{indices[name]}" for name in shared if name in indices]
    return module + (f"[{','.join(params)}]" if params else "")


def weight(items: Iterable[pytest.Item], grouped: bool) -> float:
    """What a unit of work weighs when the order is chosen: its tests (slow ones more) and a group's set-up."""
    total = sum(SLOW_WEIGHT if item.get_closest_marker("slow") else FAST_WEIGHT for item in items)
    return total + (GROUP_WEIGHT if grouped else 0.0)


#: Where the workers leave the units they collected for the controller's scheduler (in the run's basetemp).
UNITS_FILE = "xdist-units.json"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A worker's collection (after -k and -m chose the tests): each test's unit and each unit's weight,
    written for the controller's scheduler (every worker collects the same tests and writes the same)."""
    if not hasattr(config, "workerinput"):
        return
    units: dict[str, str] = {}
    members: dict[str, list[pytest.Item]] = {}
    for item in items:
        group = group_of(item)
        key = f"group:{group}" if group else item.nodeid
        units[item.nodeid] = key
        members.setdefault(key, []).append(item)
    weights = {key: weight(its, key.startswith("group:")) for key, its in members.items()}
    root = config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]  # xdist: <run>/popen-gwN
    staging = root / f".{UNITS_FILE}.{config.workerinput['workerid']}"
    staging.write_text(json.dumps({"units": units, "weights": weights}))
    os.replace(staging, root / UNITS_FILE)


def utf8_safe(value: Any) -> Any:
    """``value`` (a serialized report: dicts, lists, strings) with every string encodable as UTF-8.

    A test may capture text with lone surrogates (``\\udcff``: a non-UTF-8 byte of a command-line
    argument, as the adversarial CLI tests draw them, decoded with ``surrogateescape``); execnet sends
    strings as strict UTF-8, so one such report killed its worker and ended the whole run. The
    surrogates are sent as backslash escapes; nothing else changes.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {utf8_safe(k): utf8_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(utf8_safe(v) for v in value)
    return value


@pytest.hookimpl(hookwrapper=True)
def pytest_report_to_serializable(config: pytest.Config, report: Any) -> Any:
    """What a worker sends the controller (every test report) is valid UTF-8: :func:`utf8_safe`."""
    outcome = yield
    data = outcome.get_result()
    if data is not None:
        outcome.force_result(utf8_safe(data))


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` (and plain ``-n N``, xdist's ``load``): xdist's scope scheduling over the units
    above, heaviest first."""
    if config.getvalue("dist") not in ("load", "loadgroup"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    root = config._tmp_path_factory.getbasetemp()  # the workers' basetemps are below it (xdist's workermanage)

    class UnitScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """Scope scheduling where a scope is a unit of :func:`group_of`, queued by :func:`weight`."""

        _plan: dict[str, Any] | None = None

        def plan(self) -> dict[str, Any]:
            if self._plan is None:
                path = root / UNITS_FILE
                if not path.exists():
                    raise RuntimeError(f"the workers wrote no {path}: tests/parallel.py cannot group the tests")
                self._plan = json.loads(path.read_text())
            return self._plan

        def _split_scope(self, nodeid: str) -> str:
            return str(self.plan()["units"].get(nodeid, nodeid))

        def schedule(self) -> None:
            """xdist's LoadScopeScheduling.schedule, with the queue in weight order (heaviest first)."""
            assert self.collection_is_completed
            if self.collection is not None:  # the first distribution is done: top up the nodes
                for node in self.nodes:
                    self._reschedule(node)
                return
            if not self._check_nodes_have_same_collection():
                self.log("**Different tests collected, aborting run**")
                return
            self.collection = list(next(iter(self.registered_collections.values())))
            if not self.collection:
                return
            units: dict[str, dict[str, bool]] = {}
            for nodeid in self.collection:
                units.setdefault(self._split_scope(nodeid), {})[nodeid] = False
            weights = self.plan()["weights"]
            for unit in sorted(units, key=lambda u: -float(weights.get(u, FAST_WEIGHT))):  # stable: ties keep order
                self.workqueue[unit] = units[unit]
            for _ in range(max(0, len(self.nodes) - len(self.workqueue))):  # more workers than units
                unused, _assigned = self.assigned_work.popitem()
                unused.shutdown()
            for node in self.nodes:
                self._assign_work_unit(node)
            for node in self.nodes:
                self._reschedule(node)
            if not self.workqueue:
                for node in self.nodes:
                    node.shutdown()

    return UnitScheduling(config, log)


# --- the type check beside the tests ---------------------------------------------------------------


def _typecheck_result(log: Path, wait: float = 600.0) -> tuple[int | None, str]:
    """mypy's exit code and output once ``scripts/test.sh``'s background run wrote them (None: still running)."""
    rc_file = log.with_name(log.name + ".rc")
    deadline = time.monotonic() + wait
    while not rc_file.exists() and time.monotonic() < deadline:
        time.sleep(1)
    if not rc_file.exists():
        return None, log.read_text(errors="replace") if log.exists() else ""
    return int(rc_file.read_text().strip() or "1"), log.read_text(errors="replace")


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    log = os.environ.get("DELTALOG_TYPECHECK_LOG")
    if not log:
        return
    rc, output = _typecheck_result(Path(log))
    verdict = "still running" if rc is None else ("passed" if rc == 0 else f"FAILED (exit {rc})")
    terminalreporter.write_sep("-", f"type check (mypy): {verdict}")
    terminalreporter.write(output if output.endswith("\n") or not output else output + "\n")
