"""The per-table maintenance lease: one holder at a time, stale leases taken over exactly once."""

from __future__ import annotations

import json
import os
import threading

import pytest

from deltalog import DeltaTable
from deltalog.errors import MaintenanceLeaseHeldError
from deltalog.fleet.lease import LEASE_NAME, acquire_lease, lease_holder
from fleet_helpers import healthy_table


def test_second_holder_is_refused_until_release(tmp_path):
    t = healthy_table(str(tmp_path / "t"))
    lease = acquire_lease(t, "fleet run 1", ttl_seconds=60)
    with pytest.raises(MaintenanceLeaseHeldError, match="fleet run 1"):
        acquire_lease(DeltaTable(t.uri), "single-table run", ttl_seconds=60)
    assert lease.release() is True
    assert lease_holder(t) is None
    with acquire_lease(t, "single-table run", ttl_seconds=60):
        assert lease_holder(t)["owner"] == "single-table run"
    assert not os.path.exists(os.path.join(str(tmp_path / "t"), LEASE_NAME))


def test_expired_lease_is_taken_over_once_by_racing_contenders(tmp_path):
    t = healthy_table(str(tmp_path / "t"))
    dead = acquire_lease(t, "killed worker", ttl_seconds=60)
    path = os.path.join(str(tmp_path / "t"), LEASE_NAME)
    doc = json.loads(open(path).read())
    doc["expires_ms"] = 0
    with open(path, "w") as fh:
        json.dump(doc, fh)
    winners, losers = [], []
    barrier = threading.Barrier(6)

    def contend(i: int) -> None:
        barrier.wait()
        try:
            winners.append(acquire_lease(DeltaTable(t.uri), f"run {i}", ttl_seconds=60))
        except MaintenanceLeaseHeldError:
            losers.append(i)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(winners) == 1 and len(losers) == 5
    assert lease_holder(t)["owner"] == winners[0].owner
    assert dead.release() is False  # the killed worker's lease is gone; it must not delete the new one
    assert lease_holder(t)["owner"] == winners[0].owner
    assert winners[0].release() is True and lease_holder(t) is None


def test_waiting_for_a_lease(tmp_path):
    t = healthy_table(str(tmp_path / "t"))
    first = acquire_lease(t, "first", ttl_seconds=60)
    threading.Timer(0.3, first.release).start()
    second = acquire_lease(DeltaTable(t.uri), "second", ttl_seconds=60, wait_seconds=5, poll_seconds=0.05)
    assert lease_holder(t)["owner"] == "second" and second.release()


@pytest.mark.slow
@pytest.mark.s3
def test_lease_on_s3(s3_table_uri, s3_storage_options):
    from deltalog.create import create_table
    from helpers import rows

    create_table(s3_table_uri, rows(1).schema, storage_options=s3_storage_options)
    t = DeltaTable(s3_table_uri, s3_storage_options)
    lease = acquire_lease(t, "a", ttl_seconds=30)
    with pytest.raises(MaintenanceLeaseHeldError):
        acquire_lease(DeltaTable(s3_table_uri, s3_storage_options), "b", ttl_seconds=30)
    assert lease.release() and lease_holder(t) is None


def test_single_table_dag_tasks_share_the_fleet_lease(tmp_path):
    """The single-table DAGs' rewriting tasks take the same lease the fleet DAG holds."""
    import datetime as dt
    import sys
    import types

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "dags"))
    from deltalog_example import lease as dag_lease

    t = healthy_table(str(tmp_path / "t"))
    ti = types.SimpleNamespace(dag_id="deltalog_maintenance", run_id="r1", task_id="vacuum", map_index=-1)
    hooks = dag_lease.table_lease(str(tmp_path / "t"), "deltalog_default", dt.timedelta(minutes=5))
    fleet = acquire_lease(t, "deltalog_fleet_maintenance/run/3", ttl_seconds=60)
    old_wait, dag_lease.WAIT_SECONDS = dag_lease.WAIT_SECONDS, 0
    try:
        with pytest.raises(MaintenanceLeaseHeldError, match="deltalog_fleet_maintenance"):
            hooks["pre_execute"]({"ti": ti})
        fleet.release()
        hooks["pre_execute"]({"ti": ti})
        assert lease_holder(t)["owner"] == "deltalog_maintenance/r1/vacuum"
        with pytest.raises(MaintenanceLeaseHeldError, match="deltalog_maintenance/r1/vacuum"):
            acquire_lease(DeltaTable(t.uri), "fleet", ttl_seconds=60)
        hooks["on_failure_callback"]({"ti": ti})  # a failed task gives it back too
        assert lease_holder(t) is None
    finally:
        dag_lease.WAIT_SECONDS = old_wait
