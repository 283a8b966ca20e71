"""The fault and crash scenarios of the reliability suite on Azure's and GCS's emulators.

Commit (a commit request with an app transaction, its hooks included), compaction, vacuum and
log cleanup run on Azurite and fake-gcs-server through a fault-injecting HTTP proxy
(``tests/fault_proxy.py``), which sees every request of every client deltalog uses there
(obstore, adlfs, gcsfs). A clean run counts the requests per kind; then, on fresh copies:

- **faults**: half-way through the run, a write or a delete is carried out with its answer
  lost (the connection drops after the service acted, so the client's retry finds its own
  object, or its own delete done), or a write or a read is answered 503 (the service was
  busy; a 503 to a listing or a metadata request takes the same retry path);
- **crashes**: the operation runs in a child process that the proxy SIGKILLs at a request
  drawn from the clean run, before the service sees it or after it acted but before the
  answer arrives.

After each, as in the local suites: deltalog and deltalake read the latest version and every
version that must stay readable, no file those versions reference is missing, the rows are
what they were (or, for the commit, what they are after it), and a clean rerun completes the
operation. Persistent failures (every retry failing) are the ``faulty://`` suite's
(test_faults.py): the clients' retry policies would stretch them to minutes here.
"""

from __future__ import annotations

import os
import random
import signal
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import reliability_recorder as recorder
from cloud_scenarios import SCENARIOS, CloudTable, child_run, verify
from reliability_support import child_context

from deltalog.errors import DeltaLogError
from fault_proxy import FaultProxy, ProxyFault, ProxyPlan

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SUITE = "cloud"
CRASH_SEEDS = 2
STORES = [pytest.param("azure", marks=pytest.mark.azure), pytest.param("gcs", marks=pytest.mark.gcs)]


class Store:
    """An emulator, the fault proxy in front of it, and fresh tables on it."""

    def __init__(self, name: str, endpoint: str) -> None:
        import azure_server
        import gcs_server

        self.name = name
        self.module = azure_server if name == "azure" else gcs_server
        self.endpoint = endpoint
        self.proxy = FaultProxy(endpoint, self.module.classify)

    def new_table(self) -> tuple[CloudTable, CloudTable]:
        """A fresh container/bucket: the table reached straight (checks) and through the proxy (the run)."""
        if self.name == "azure":
            bucket = self.module.create_container(self.endpoint)
            uri = f"abfs://{bucket}/t"
        else:
            bucket = self.module.create_bucket(self.endpoint)
            uri = f"gs://{bucket}/t"
        dl = self.module.deltalake_options_for(self.endpoint)
        direct = CloudTable(uri, self.module.storage_options_for(self.endpoint), dl)
        proxied = CloudTable(uri, self.module.storage_options_for(self.proxy.endpoint), dl)
        return direct, proxied


@pytest.fixture(scope="module", params=STORES)
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    endpoint = request.getfixturevalue(f"{'azure' if request.param == 'azure' else 'gcs'}_server")
    s = Store(request.param, endpoint)
    yield s
    s.proxy.stop()


class Templates:
    """Each scenario's table built once locally per module (uploaded fresh for every case)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.built: dict[str, tuple[str, dict[str, Any]]] = {}
        self.clean_counts: dict[tuple[str, str], Counter] = {}

    def get(self, name: str) -> tuple[str, dict[str, Any]]:
        if name not in self.built:
            path = os.path.join(self.base, name)
            self.built[name] = (path, SCENARIOS[name].build(path))
        return self.built[name]

    def fresh(self, store: Store, name: str) -> tuple[CloudTable, CloudTable, dict[str, Any]]:
        path, info = self.get(name)
        direct, proxied = store.new_table()
        direct.upload(path)
        return direct, proxied, info


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> Templates:
    return Templates(str(tmp_path_factory.mktemp("cloud-templates")))


def clean_counts(store: Store, templates: Templates, name: str) -> Counter:
    """Requests per kind of a fault-free run through the proxy, which must itself complete the operation."""
    key = (store.name, name)
    if key not in templates.clean_counts:
        direct, proxied, info = templates.fresh(store, name)
        plan = store.proxy.reset()
        SCENARIOS[name].run(proxied.uri, proxied.options, info)
        store.proxy.reset()
        SCENARIOS[name].done(direct, info)
        templates.clean_counts[key] = Counter({k: plan.counts[k] for k in ("write", "delete", "list", "read", "stat")})
    return templates.clean_counts[key]


def fault_cases(counts: Counter) -> list[ProxyFault]:
    """Half-way through the run: a write and a delete whose answer is lost, a write and a read answered 503.

    (A 503 to a listing or a metadata request takes the same retry path as one to a read.)
    """
    cases = []
    for kind, action in (("write", "fail_after"), ("write", "fail"), ("delete", "fail_after"), ("read", "fail")):
        if counts[kind]:
            cases.append(ProxyFault(kind, (counts[kind] + 1) // 2, action))
    return cases


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_fault_on_the_wire_loses_nothing_and_a_rerun_finishes(store: Store, templates: Templates, name: str) -> None:
    counts = clean_counts(store, templates, name)
    assert counts["read"] and (counts["write"] or counts["delete"]), f"{name}: the clean run saw {dict(counts)}"
    outcomes: Counter = Counter()
    for fault in fault_cases(counts):
        direct, proxied, info = templates.fresh(store, name)
        plan = store.proxy.reset(ProxyPlan([fault]))
        try:
            SCENARIOS[name].run(proxied.uri, proxied.options, info)
            outcome = "completed"
        except DeltaLogError as exc:
            outcome = type(exc).__name__
        except OSError as exc:
            outcome = f"raw {type(exc).__name__}"
        finally:
            store.proxy.reset()
        assert plan.injected, f"{name} on {store.name}: {fault.describe()} never triggered"
        recorder.add("scenarios", 1, SUITE)
        recorder.add("faults_injected", len(plan.injected), SUITE)
        verify(direct, SCENARIOS[name], info, f"{name} on {store.name} with {fault.describe()} ({outcome})", SUITE)
        outcomes[outcome] += 1
    print(f"{name} on {store.name}: clean run {dict(counts)}; outcomes {dict(outcomes)}")


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_killed_at_a_request_loses_nothing_and_a_rerun_finishes(store: Store, templates: Templates, name: str) -> None:
    counts = clean_counts(store, templates, name)
    calls = [(kind, n) for kind, total in sorted(counts.items()) for n in range(1, total + 1)]
    ctx = child_context()
    killed = 0
    for seed in range(CRASH_SEEDS):
        rng = random.Random(f"{store.name}-{name}-{seed}")
        kind, nth = rng.choice(calls)
        action = rng.choice(["kill", "kill_after"])
        for attempt in range(3):
            fault = ProxyFault(kind, nth, action)
            direct, proxied, info = templates.fresh(store, name)
            go = os.path.join(templates.base, f"go-{store.name}-{name}-{seed}-{attempt}")
            proc = ctx.Process(target=child_run, args=(name, proxied.uri, proxied.options, info, go))
            proc.start()
            plan = store.proxy.reset(ProxyPlan([fault], kill_pid=proc.pid))
            open(go, "w").close()
            proc.join(180)
            if proc.is_alive():
                proc.kill()
                proc.join()
                raise AssertionError(f"{name} on {store.name}: the child hung ({fault.describe()})")
            store.proxy.reset()
            finished = os.path.exists(go + ".finished")
            for p in (go, go + ".finished"):
                if os.path.exists(p):
                    os.unlink(p)
            if not plan.injected and finished and 0 < plan.counts[kind] < nth:
                # The clients' request counts vary from run to run (a listing or metadata request more or
                # less): this run ended before request #nth. Its table must be whole all the same; then the
                # same kill is tried at the last request of that kind this run made.
                verify(direct, SCENARIOS[name], info, f"{name} on {store.name}, finished ({fault.describe()})", SUITE)
                nth = plan.counts[kind]
                continue
            break
        assert proc.exitcode == -signal.SIGKILL and not finished, (
            f"{name} on {store.name}: {fault.describe()} did not kill the child (exit {proc.exitcode})"
        )
        killed += 1
        recorder.add("scenarios", 1, SUITE)
        recorder.add("crashes", 1, SUITE)
        verify(direct, SCENARIOS[name], info, f"{name} on {store.name} killed: {fault.describe()}", SUITE)
    assert killed == CRASH_SEEDS
