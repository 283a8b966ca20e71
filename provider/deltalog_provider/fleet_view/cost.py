"""What maintenance and storage cost, at the prices the deployment sets (none set: no money anywhere).

Prices are Airflow configuration of the API server: ``[deltalog] cost_per_cpu_hour`` (what an
hour of CPU costs where maintenance runs) and ``[deltalog] cost_per_gb_month`` (what a GB of
storage costs per month; a GB is 2^30 bytes, as the clouds bill), optionally ``[deltalog]
cost_currency`` (a label such as ``USD``). From the history:

- *compute*: the window's ``cpu_s`` (CPU seconds of the recorded operations) x the hourly price;
- *storage per month*: the table's latest size x the monthly price;
- *cost* (what "most expensive" sorts by): compute plus storage over the window's length
  (``days / 30.44`` months), one amount per table and for the fleet;
- *saved per month*: the bytes vacuum and log cleanup reclaimed in the window x the monthly price
  (files compaction replaced are counted when vacuum deletes them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

GB = float(1 << 30)
DAYS_PER_MONTH = 30.44


class BadPrice(ValueError):
    """A price in the configuration is not a non-negative number (the pages say so and show no money)."""


@dataclass(frozen=True)
class Prices:
    """The configured prices (None: not set)."""

    cpu_hour: float | None = None
    gb_month: float | None = None
    currency: str = ""

    @property
    def any(self) -> bool:
        return self.cpu_hour is not None or self.gb_month is not None

    def money(self, amount: Any) -> str:
        try:
            if not isinstance(amount, int | float) or not math.isfinite(amount):
                return "-"
        except OverflowError:
            return "-"
        figure = f"{amount:,.2f}" if abs(amount) < 1e6 else f"{amount:,.0f}"
        return f"{figure} {self.currency}".strip()

    def summary_line(self) -> str:
        """One line: the prices set."""
        if not self.any:
            return "no prices set: no money shown"
        return f"CPU hour {self.cpu_hour}, GB-month {self.gb_month} {self.currency}".strip()

    def to_dict(self) -> dict[str, Any]:
        return {"cost_per_cpu_hour": self.cpu_hour, "cost_per_gb_month": self.gb_month, "currency": self.currency}


def _price(raw: str | None, name: str) -> float | None:
    raw = (raw or "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise BadPrice(f"[deltalog] {name} is not a number: {raw[:40]!r}") from None
    if not math.isfinite(value) or value < 0:
        raise BadPrice(f"[deltalog] {name} must be a non-negative number, got {raw[:40]!r}")
    return value


def configured_prices() -> Prices:
    """The prices of ``[deltalog]`` in Airflow's configuration (raises :class:`BadPrice`)."""
    from deltalog_provider.version_compat import conf

    def get(key: str) -> str | None:
        return conf.get("deltalog", key, fallback="")

    return Prices(
        _price(get("cost_per_cpu_hour"), "cost_per_cpu_hour"),
        _price(get("cost_per_gb_month"), "cost_per_gb_month"),
        (get("cost_currency") or "").strip()[:12],
    )


def _times(values: pa.ChunkedArray | pa.Array, factor: float) -> pa.Array:
    return pc.multiply(pc.cast(values, pa.float64()), factor)


def with_costs(tables: pa.Table, prices: Prices, days: int) -> pa.Table:
    """``tables`` (one row per table or per day: ``cpu_s``, ``bytes_reclaimed`` and, per table,
    ``table_bytes_after``) with ``compute_cost``, ``storage_cost_month``, ``saved_month`` and ``cost``
    (nulls where a price is not set)."""
    n = tables.num_rows
    none = pa.nulls(n, pa.float64())
    compute = _times(tables.column("cpu_s"), prices.cpu_hour / 3600) if prices.cpu_hour is not None else none
    if prices.gb_month is not None and "table_bytes_after" in tables.column_names:
        storage = _times(tables.column("table_bytes_after"), prices.gb_month / GB)
    else:
        storage = none
    saved = _times(tables.column("bytes_reclaimed"), prices.gb_month / GB) if prices.gb_month is not None else none
    window = pc.multiply(storage, days / DAYS_PER_MONTH)
    if prices.cpu_hour is None and prices.gb_month is None:
        total = none
    else:
        total = pc.add(pc.fill_null(compute, 0.0), pc.fill_null(window, 0.0))
    out = tables
    for name, values in (
        ("compute_cost", compute),
        ("storage_cost_month", storage),
        ("saved_month", saved),
        ("cost", total),
    ):
        out = out.append_column(name, values)
    return out


__all__ = ["GB", "BadPrice", "Prices", "configured_prices", "with_costs"]
