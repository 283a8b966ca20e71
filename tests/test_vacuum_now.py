"""``plan_vacuum(now_ms=...)``: the clock the cutoff comes from, fixed (how the Delta Spark comparison
puts both sides' cutoffs on the same millisecond)."""

from __future__ import annotations

import pytest

from deltalog.commit.transaction import Transaction
from deltalog.errors import InvalidArgumentError
from deltalog.vacuuming.plan import plan_vacuum
from helpers import append, make_table, rows

HOUR_MS = 3_600_000


def test_now_ms_fixes_the_cutoff_and_a_later_clock_deletes_more(table_path: str) -> None:
    t = make_table(table_path)
    append(t, rows(3))
    first = t.snapshot().file_paths()

    tx = Transaction(t.storage, t.snapshot(), operation="DELETE")
    tx.remove([{"path": p} for p in first])
    tx.commit()
    now = 1_900_000_000_000  # 2030: every file of the table is older than any cutoff near it
    plan = plan_vacuum(t, retention_hours=1, allow_short_retention=True, now_ms=now)
    assert plan.cutoff_ms == now - HOUR_MS
    assert set(plan.files.column("path").to_pylist()) == set(first)
    past = plan_vacuum(t, retention_hours=1, allow_short_retention=True, now_ms=1_600_000_000_000)
    assert past.cutoff_ms == 1_600_000_000_000 - HOUR_MS and past.num_files == 0


@pytest.mark.parametrize("bad", [True, "1900000000000", 1.9e12])
def test_now_ms_must_be_an_int(table_path: str, bad: object) -> None:
    t = make_table(table_path)
    with pytest.raises(InvalidArgumentError, match="now_ms"):
        plan_vacuum(t, now_ms=bad)  # type: ignore[arg-type]
