"""Service-level objectives: per-table targets, the current values they are judged on, met or breached.

An objective is a setting (:mod:`deltalog.maintenance.policy` resolves it through the same four
layers as every other setting: per-table override, table property, path rule, fleet
defaults) whose value is a *target*: the most the table may have of something before it
breaches its service level. Unset (the default), it is not judged.

| objective | table property | judged on | fixed by |
|---|---|---|---|
| ``max_small_files`` | ``deltalog.objective.maxSmallFiles`` | live files under the small-file threshold (half the target file size) | compaction |
| ``max_versions_since_checkpoint`` | ``deltalog.objective.maxVersionsSinceCheckpoint`` | commits a reader replays after the last checkpoint | checkpoint |
| ``max_days_since_vacuum`` | ``deltalog.objective.maxDaysSinceVacuum`` | days since the last successful vacuum (:func:`days_since_vacuum`) | vacuum |
| ``max_dv_share`` | ``deltalog.objective.maxDvShare`` | share of rows hidden by deletion vectors | purge |

and one objective of the fleet run itself, ``finish_by`` (``"06:00 Europe/Berlin"``: a time of day
in a named IANA time zone), set in the settings file's ``defaults`` only (:class:`FinishBy`).

A value is met when it is at most its target. A value that cannot be known (a vacuum older
than the log still shows, :func:`days_since_vacuum`) is neither met nor breached (``met`` is
None) and never counts as a breach. Everything here is pure: the values come from a
measurement (:func:`objective_values`), the history's view of them over time lives in
:mod:`deltalog.journal.compliance`.

Since when an objective is breached is judged against today's target: for a count or a share,
from the history's measure rows of any schema version, through the column that carries the value
(``ObjectiveSpec.history_column``: ``small_files_after``, ``versions_since_checkpoint_after``,
``dv_share_after``; a version 2 row's ``objective_<name>_value`` first); for days since the last
vacuum, by definition the target's length after that vacuum (:func:`vacuum_breached_since`).
"""

from __future__ import annotations

import datetime as dt
import math
import re
import zoneinfo
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from deltalog.errors import InvalidArgumentError

__all__ = [
    "FINISH_BY",
    "FINISH_BY_PROPERTY",
    "OBJECTIVES",
    "OBJECTIVE_NAMES",
    "OBJECTIVE_PROPERTY_PREFIX",
    "FinishBy",
    "ObjectiveSpec",
    "ObjectiveState",
    "TableCompliance",
    "check_objective_properties",
    "days_since_vacuum",
    "evaluate_objectives",
    "objective_spec",
    "objective_values",
    "parse_finish_by",
    "vacuum_breached_since",
]

#: Table properties under this prefix are objectives (an unknown name is refused, naming the property).
OBJECTIVE_PROPERTY_PREFIX = "deltalog.objective."
#: The fleet run's objective: when it must have finished (a time of day in a named time zone).
FINISH_BY = "finish_by"
#: Not a table property: a fleet run's finishing time is one value for the whole run (``defaults``).
FINISH_BY_PROPERTY = None

DAY_SECONDS = 86_400.0


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def _days(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InvalidArgumentError(f"{what} must be a non-negative number of days, got {value!r}")
    return value


def _share(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or not 0 <= value <= 1:
        raise InvalidArgumentError(f"{what} must be a share from 0 to 1 (0.05 = 5% of the rows), got {value!r}")
    return value


_CHECKS = {"count": _count, "days": _days, "share": _share}


@dataclass(frozen=True)
class ObjectiveSpec:
    """One objective: its setting name, its table property, what kind of number it is and what fixes it."""

    name: str
    prop: str
    #: ``count`` (a non-negative integer), ``days`` (a non-negative number), ``share`` (0 to 1).
    kind: str
    #: The maintenance operation that brings the value back under the target.
    operation: str
    #: What the value counts, for messages.
    measures: str
    #: The history column that carries the value in measure rows of every schema version (version 1 rows
    #: have no ``objective_*`` columns): the breach start is read from it. None: the value is days since an
    #: event (the last vacuum), whose breach starts a target's length after that event, by definition.
    history_column: str | None = None

    def check(self, value: Any, what: str) -> int | float:
        """The target as a settings file gives it (a JSON number), checked."""
        return _CHECKS[self.kind](value, what)

    def from_property(self, text: str) -> int | float:
        """The target as the table property gives it (text), checked."""
        what = f"table property {self.prop}"
        raw = str(text).strip()
        try:
            number: int | float = int(raw) if self.kind == "count" else float(raw)
        except ValueError:
            kind = "an integer" if self.kind == "count" else "a number"
            raise InvalidArgumentError(f"{what} must be {kind}, got {text!r}") from None
        return self.check(number, what)

    def shown(self, value: float | None) -> str:
        """The value as messages show it (``40``, ``10.2 days``, ``12.50%``)."""
        if value is None:
            return "unknown"
        if self.kind == "days":
            return f"{value:.1f} days"
        if self.kind == "share":
            return f"{value:.2%}"
        return str(int(value))


OBJECTIVES: tuple[ObjectiveSpec, ...] = (
    ObjectiveSpec(
        "max_small_files",
        "deltalog.objective.maxSmallFiles",
        "count",
        "compaction",
        "live files under the small-file threshold",
        "small_files_after",
    ),
    ObjectiveSpec(
        "max_versions_since_checkpoint",
        "deltalog.objective.maxVersionsSinceCheckpoint",
        "count",
        "checkpoint",
        "commits a reader replays after the last checkpoint",
        "versions_since_checkpoint_after",
    ),
    ObjectiveSpec(
        "max_days_since_vacuum",
        "deltalog.objective.maxDaysSinceVacuum",
        "days",
        "vacuum",
        "days since the last successful vacuum",
    ),
    ObjectiveSpec(
        "max_dv_share",
        "deltalog.objective.maxDvShare",
        "share",
        "purge",
        "share of rows hidden by deletion vectors",
        "dv_share_after",
    ),
)
OBJECTIVE_NAMES = tuple(o.name for o in OBJECTIVES)
_BY_NAME = {o.name: o for o in OBJECTIVES}
_BY_PROPERTY = {o.prop: o for o in OBJECTIVES}


def objective_spec(name: str) -> ObjectiveSpec:
    """The objective called ``name`` (an unknown name is refused, listing the known ones)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise InvalidArgumentError(
            f"unknown objective {name!r}: objectives are {', '.join(OBJECTIVE_NAMES)} (and {FINISH_BY} for the run)"
        ) from None


def check_objective_properties(configuration: Mapping[str, str] | None) -> None:
    """Refuse a ``deltalog.objective.*`` table property that names no objective (a typo must not go unjudged)."""
    for key in sorted(configuration or {}):
        if key.startswith(OBJECTIVE_PROPERTY_PREFIX) and key not in _BY_PROPERTY:
            known = ", ".join(o.prop for o in OBJECTIVES)
            raise InvalidArgumentError(f"unknown objective in table property {key!r}: objective properties are {known}")


# --- the fleet run's finishing time -----------------------------------------------------

_TIME = re.compile(r"^\s*(\d{1,2}):(\d{2})\s+(\S+)\s*$")


@dataclass(frozen=True)
class FinishBy:
    """``finish_by``: a time of day in a named IANA time zone by which a fleet run must have ended.

    A run is measured against the first such moment at or after its start (a run that starts
    after 06:00 is measured against the next day's 06:00). On the day clocks go forward a
    time inside the gap is the moment after it (02:30 is 03:30 summer time); on the day they
    go back, an ambiguous time is its first occurrence.
    """

    hour: int
    minute: int
    zone: str

    @property
    def text(self) -> str:
        return f"{self.hour:02d}:{self.minute:02d} {self.zone}"

    def deadline_after(self, start: dt.datetime) -> dt.datetime:
        """The first ``HH:MM`` in the zone at or after ``start`` (aware), in UTC."""
        if start.tzinfo is None:
            raise InvalidArgumentError("a run's start must be a timezone-aware datetime")
        tz = zoneinfo.ZoneInfo(self.zone)
        local = start.astimezone(tz)
        day = local.date()
        for offset in range(3):
            when = dt.datetime.combine(day + dt.timedelta(days=offset), dt.time(self.hour, self.minute), tz)
            # A wall time inside a spring-forward gap does not exist: round trip through UTC (fold 0)
            # lands after the gap, which is the moment the clock first shows a later time.
            when = when.astimezone(dt.UTC).astimezone(tz)
            if when >= local:
                return when.astimezone(dt.UTC)
        raise AssertionError("unreachable: a time of day recurs within three days")  # pragma: no cover

    def missed(self, start: dt.datetime, end: dt.datetime) -> bool:
        """Whether a run that started at ``start`` and ended at ``end`` ended after its deadline."""
        return end > self.deadline_after(start)

    def summary_line(self) -> str:
        """``finish_by 06:00 Europe/Berlin``."""
        return f"{FINISH_BY} {self.text}"

    def to_dict(self) -> dict[str, Any]:
        return {"hour": self.hour, "minute": self.minute, "zone": self.zone, "text": self.text}


def parse_finish_by(value: Any, what: str = FINISH_BY) -> FinishBy:
    """``"06:00 Europe/Berlin"`` -> :class:`FinishBy`; anything else is refused in one line naming ``what``."""
    if isinstance(value, FinishBy):
        return value
    if not isinstance(value, str):
        raise InvalidArgumentError(
            f'{what} must be a time of day and a time zone ("06:00 Europe/Berlin"), got {value!r}'
        )
    match = _TIME.match(value)
    if not match:
        raise InvalidArgumentError(
            f'{what} must be HH:MM and an IANA time zone name ("06:00 Europe/Berlin", "23:30 UTC"), got {value!r}'
        )
    hour, minute, zone = int(match.group(1)), int(match.group(2)), match.group(3)
    if hour > 23 or minute > 59:
        raise InvalidArgumentError(f"{what}: {value!r} is not a time of day (00:00 to 23:59)")
    try:
        zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise InvalidArgumentError(
            f"{what}: unknown time zone {zone!r} in {value!r} (use an IANA name such as Europe/Berlin or UTC)"
        ) from None
    return FinishBy(hour, minute, zone)


# --- values and states --------------------------------------------------------------------


def days_since_vacuum(
    now: dt.datetime,
    last_vacuum: dt.datetime | None,
    *,
    oldest_seen: dt.datetime | None = None,
    log_complete: bool = False,
) -> tuple[float | None, str]:
    """Days since the last successful vacuum, and how that was known.

    ``last_vacuum``: the newest of the table's last ``VACUUM END`` commit with status
    ``COMPLETED`` still in its log and its newest ``vacuum`` row ``done`` or ``nothing_due`` in
    the maintenance history. Without one: when the log still reaches its first commit
    (``log_complete``), the table was never vacuumed and the days count from its creation
    (``oldest_seen``); otherwise ``oldest_seen`` (the oldest commit looked at) is a lower
    bound, which is the value only when it already exceeds any target it is compared with
    (the caller's choice), else the value is unknown (None).
    """
    if last_vacuum is not None:
        return max(0.0, (now - last_vacuum).total_seconds() / DAY_SECONDS), "last vacuum"
    if oldest_seen is None:
        return None, "no commit to date it"
    age = max(0.0, (now - oldest_seen).total_seconds() / DAY_SECONDS)
    return age, (
        "never vacuumed: since the table's creation" if log_complete else "at least: no vacuum in the log read"
    )


def vacuum_breached_since(reference: dt.datetime | None, target_days: float) -> dt.datetime | None:
    """When ``max_days_since_vacuum`` became breached: ``target_days`` after ``reference``, the moment its
    days count from (the last successful vacuum; never vacuumed, the table's creation; with neither in the
    log read, the oldest commit read, and then the breach began at that moment at the latest)."""
    if reference is None:
        return None
    return reference.astimezone(dt.UTC) + dt.timedelta(days=target_days)


def objective_values(
    *,
    small_files: int | None = None,
    versions_since_checkpoint: int | None = None,
    days_since_vacuum: float | None = None,
    dv_share: float | None = None,
) -> dict[str, float | None]:
    """Objective name -> the current value it is judged on (None: unknown)."""
    return {
        "max_small_files": small_files,
        "max_versions_since_checkpoint": versions_since_checkpoint,
        "max_days_since_vacuum": None if days_since_vacuum is None else round(days_since_vacuum, 4),
        "max_dv_share": dv_share,
    }


@dataclass(frozen=True)
class ObjectiveState:
    """One objective of one table: its target, the current value, met or breached, and since when.

    ``met`` is None when the value is unknown. ``breached_since`` is when the objective became
    continuously breached against today's target: from the maintenance history's measurements of any
    schema version (:func:`deltalog.journal.compliance.breach_start`), or for days since the last vacuum
    that vacuum plus the target (:func:`vacuum_breached_since`); None when met or unknown. ``at_risk``: met now, but predicted to breach before the next run
    (``predicted``: the value expected then).
    """

    name: str
    target: int | float
    value: int | float | None
    met: bool | None
    #: Where the target came from: ``per-table override tables['orders']``, ``table property ...``.
    source: str
    breached_since: dt.datetime | None = None
    at_risk: bool = False
    predicted: float | None = None
    #: How the value was known when that matters (``at least``, ``never vacuumed``).
    note: str = ""

    @property
    def spec(self) -> ObjectiveSpec:
        return objective_spec(self.name)

    @property
    def breached(self) -> bool:
        return self.met is False

    def describe(self) -> str:
        """``max_small_files: 40 > 10 (breached since 2026-11-20T06:00Z)`` and the like."""
        spec = self.spec
        value, target = spec.shown(self.value), spec.shown(self.target)
        if self.met is None:
            return f"{self.name}: {value} (target {target}): unknown" + (f" ({self.note})" if self.note else "")
        if self.met:
            risk = f"; predicted {spec.shown(self.predicted)} by the next run" if self.at_risk else ""
            return f"{self.name}: {value} <= {target}: met{risk}"
        since = f" since {_iso(self.breached_since)}" if self.breached_since else ""
        return f"{self.name}: {value} > {target}: breached{since}"

    def summary_line(self) -> str:
        """One line: the objective, its value against the target, and its state."""
        return self.describe()

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``deltalog objectives``: exactly name, target, value, met, breached_since, source."""
        return {
            "name": self.name,
            "target": self.target,
            "value": self.value,
            "met": self.met,
            "breached_since": _iso(self.breached_since),
            "source": self.source,
        }


def _iso(when: dt.datetime | None) -> str | None:
    return None if when is None else when.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def evaluate_objectives(
    targets: Iterable[tuple[str, int | float, str]],
    values: Mapping[str, float | None],
    notes: Mapping[str, str] | None = None,
) -> tuple[ObjectiveState, ...]:
    """Each ``(name, target, source)`` judged on ``values[name]``: met when the value is at most the target.

    A lower-bound value (``notes[name]`` starts with ``at least``) that does not exceed its target
    proves nothing: its value and state are unknown.
    """
    out = []
    for name, target, source in targets:
        objective_spec(name)
        value = values.get(name)
        note = (notes or {}).get(name, "")
        if value is not None and note.startswith("at least") and value <= target:
            value = None
        met = None if value is None else value <= target
        out.append(ObjectiveState(name, target, value, met, source, note=note))
    return tuple(out)


@dataclass(frozen=True)
class TableCompliance:
    """One table's objectives (``deltalog objectives``): met when none is breached and the table was read.

    ``error``: why the table could not be judged (unreadable, a bad objective property); such a
    table is not met.
    """

    table_uri: str
    objectives: tuple[ObjectiveState, ...] = ()
    error: str | None = None

    @property
    def met(self) -> bool:
        return self.error is None and not any(o.breached for o in self.objectives)

    @property
    def breached(self) -> tuple[ObjectiveState, ...]:
        return tuple(o for o in self.objectives if o.breached)

    def summary_line(self) -> str:
        """``uri: met`` / ``uri: breached: max_small_files, ...`` / ``uri: error: ...``."""
        if self.error is not None:
            return f"{self.table_uri}: error: {self.error}"
        if not self.objectives:
            return f"{self.table_uri}: no objective set"
        breached = self.breached
        return f"{self.table_uri}: " + ("met" if not breached else "breached: " + ", ".join(o.name for o in breached))

    def to_dict(self) -> dict[str, Any]:
        """``{"table_uri", "met", "objectives": [...]}`` (and ``error`` for a table that could not be judged)."""
        out: dict[str, Any] = {
            "table_uri": self.table_uri,
            "met": self.met,
            "objectives": [o.to_dict() for o in self.objectives],
        }
        if self.error is not None:
            out["error"] = self.error
        return out
