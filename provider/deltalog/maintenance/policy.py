"""Maintenance policies: each table's settings, inherited through layers, and where each value came from.

A setting's value is decided by the first layer, from the top, that sets it:

1. **per-table overrides**: the settings file's ``tables`` entry for the table (by URI, else
   by the table folder's name);
2. **the table's own properties**: ``delta.targetFileSize``, ``delta.checkpointInterval``,
   ``delta.deletedFileRetentionDuration`` (what the table's writers chose);
3. **path-prefix rules**: every ``prefixes`` entry the table's URI lies under, the longest
   prefix winning over the shorter ones;
4. **fleet defaults**: the settings file's ``defaults``;
5. **the built-in default** (Delta's: 128 MiB target, a checkpoint every 10 commits, 168
   hours of file retention; no Z-order, no deletion-vector purge).

:class:`TableSettings` carries the values maintenance passes to the operations: only those
decided by a layer of the settings file (1, 3, 4); where the table's property or the
default decides, the field is None and the operation reads the table itself, as it would
without a fleet. :attr:`TableSettings.explained` says, per setting, the effective value,
its source and what the lower layers said (``deltalog policy TABLE``, the fleet's history
rows, the Airflow page).

The settings file (``deltalog maintain --settings FILE``, the fleet DAG's
``deltalog_fleet_table_settings`` Variable) is JSON::

    {"defaults": {"vacuum_retention_hours": 240},
     "prefixes": {"s3://lake/raw/": {"target_file_size": "64m", "checkpoint_interval": 20}},
     "tables":   {"s3://lake/sales/orders": {"zorder_by": ["customer_id"]}, "events": {"max_dv_hidden_share": 0.1}}}

A mapping without these three keys is the older form: table URI or name -> settings, i.e.
``tables`` alone.

Service-level objectives (:mod:`deltalog.maintenance.objectives`: ``max_small_files``,
``max_versions_since_checkpoint``, ``max_days_since_vacuum``, ``max_dv_share``) are settings
like the others, with their own table properties (``deltalog.objective.maxSmallFiles``, ...);
``finish_by``, the fleet run's finishing time, is set in ``defaults`` only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deltalog.errors import InvalidArgumentError
from deltalog.log.snapshot import Snapshot
from deltalog.maintenance.due import MaintenanceDue, maintenance_due
from deltalog.maintenance.health import TableHealth
from deltalog.maintenance.objectives import (
    FINISH_BY,
    OBJECTIVES,
    FinishBy,
    check_objective_properties,
    parse_finish_by,
)
from deltalog.protocol.properties import (
    DEFAULT_CHECKPOINT_INTERVAL,
    DEFAULT_DELETED_FILE_RETENTION,
    DEFAULT_LOG_RETENTION,
    parse_checkpoint_interval,
    parse_interval_ms,
)
from deltalog.protocol.sizes import DEFAULT_TARGET_FILE_SIZE, parse_size
from deltalog.storage.filesystem import canonical_uri
from deltalog.storage.table_ref import TableRef

__all__ = [
    "SECTIONS",
    "SETTING_KEYS",
    "DueRule",
    "ExplainedSetting",
    "FleetPolicy",
    "TableSettings",
    "due_rules",
    "due_under",
    "purge_due",
    "settings_for",
]

HOUR_MS = 3_600_000
#: The settings file's sections (a mapping with other keys is the older table -> settings form).
SECTIONS = ("defaults", "prefixes", "tables")


def _target_size(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidArgumentError(f'{what} must be a size in bytes (e.g. 134217728 or "128m"), got {value!r}')
    size = parse_size(value, what)
    if size <= 0:
        raise InvalidArgumentError(f"{what} must be positive, got {value!r}")
    return size


def _interval(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{what} must be a positive integer (commits between checkpoints), got {value!r}")
    return value


def _hours(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InvalidArgumentError(f"{what} must be a non-negative number of hours, got {value!r}")
    return float(value)


def _columns(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(c, str) and c for c in value):
        raise InvalidArgumentError(f"{what} must be a non-empty list of column names, got {value!r}")
    return list(value)


def _share(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        raise InvalidArgumentError(f"{what} must be a number from 0 to below 1, got {value!r}")
    return float(value)


def _flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{what} must be true or false (a JSON boolean), got {value!r}")
    return value


def _retention_hours(text: str) -> float:
    return parse_interval_ms(text, "table property delta.deletedFileRetentionDuration") / HOUR_MS


@dataclass(frozen=True)
class _Setting:
    """One setting: how a settings file gives it, the table property that can decide it, its default."""

    name: str
    check: Callable[[Any, str], Any]
    default: Any
    prop: str | None = None
    from_property: Callable[[str], Any] | None = None
    #: False: only the table decides it (shown by ``deltalog policy``; a settings file may not set it).
    settable: bool = True
    #: A service-level objective (a target judged, not a parameter passed to an operation).
    objective: bool = False


def _table_flag(name: str, prop: str, default: bool) -> _Setting:
    """A yes/no only the table's property decides (shown, never set by a settings file)."""
    return _Setting(name, lambda v, w: v, default, prop, lambda text: text.strip().lower() == "true", settable=False)


_SETTINGS: tuple[_Setting, ...] = (
    _Setting(
        "target_file_size",
        _target_size,
        DEFAULT_TARGET_FILE_SIZE,
        "delta.targetFileSize",
        lambda text: _target_size(text, "table property delta.targetFileSize"),
    ),
    _Setting(
        "checkpoint_interval",
        _interval,
        DEFAULT_CHECKPOINT_INTERVAL,
        "delta.checkpointInterval",
        parse_checkpoint_interval,
    ),
    _Setting(
        "vacuum_retention_hours",
        _hours,
        _retention_hours(DEFAULT_DELETED_FILE_RETENTION),
        "delta.deletedFileRetentionDuration",
        _retention_hours,
    ),
    _Setting("zorder_by", _columns, None),
    _Setting("max_dv_hidden_share", _share, None),
    # Compaction minds the table's DELETE/UPDATE/MERGE writers (docs/compaction.md); false: as if none were there.
    _Setting("writer_aware", _flag, True),
    _Setting(
        "log_retention_hours",
        _hours,
        parse_interval_ms(DEFAULT_LOG_RETENTION) / HOUR_MS,
        "delta.logRetentionDuration",
        lambda text: parse_interval_ms(text, "table property delta.logRetentionDuration") / HOUR_MS,
        settable=False,
    ),
    _table_flag("expired_log_cleanup", "delta.enableExpiredLogCleanup", True),
    _table_flag("symlink_manifest", "delta.compatibility.symlinkFormatManifest.enabled", False),
    *(_Setting(o.name, o.check, None, o.prop, o.from_property, objective=True) for o in OBJECTIVES),
    _Setting(FINISH_BY, lambda v, w: parse_finish_by(v, w).text, None, objective=True),
)
#: The keys a settings file may give (per layer).
SETTING_KEYS = tuple(s.name for s in _SETTINGS if s.settable)
#: Sources that are a layer of the settings file (their values are passed to the operations).
_FILE_LAYERS = ("fleet defaults", "path rule", "per-table override")


@dataclass(frozen=True)
class ExplainedSetting:
    """One setting of one table: its effective value, the layer it came from, what lower layers said."""

    name: str
    value: Any
    #: "per-table override", "table property", "path rule", "fleet defaults" or "default".
    source: str
    #: Which entry or property: ``tables["orders"]``, ``delta.targetFileSize = '64m'``, ``prefixes["s3://lake/raw/"]``.
    detail: str = ""
    #: The lower layers' values this one won over, highest first: ``{"source", "detail", "value"}``.
    overridden: tuple[dict[str, Any], ...] = ()
    settable: bool = True

    def summary_line(self) -> str:
        """``name = value (source detail)``."""
        where = f"{self.source} {self.detail}".strip()
        return f"{self.name} = {self.value!r} ({where})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "source": self.source,
            "detail": self.detail,
            "overridden": [dict(o) for o in self.overridden],
            "settable": self.settable,
        }


@dataclass(frozen=True)
class TableSettings:
    """A table's maintenance settings: the values of the settings file's layers (None: the table decides).

    ``explained`` holds every setting's effective value and source (see the module docstring).
    """

    target_file_size: int | None = None
    vacuum_retention_hours: float | None = None
    checkpoint_interval: int | None = None
    #: Z-order columns: a due compaction rewrites the partitions along their curve instead of bin-packing.
    zorder_by: list[str] | None = None
    #: Share of rows hidden by deletion vectors above which a purge is due (None: never).
    max_dv_hidden_share: float | None = None
    #: Compaction minds the table's DELETE/UPDATE/MERGE writers (None: the default, yes).
    writer_aware: bool | None = None
    explained: tuple[ExplainedSetting, ...] = ()

    def objective_targets(self) -> tuple[tuple[str, int | float, str], ...]:
        """The table's objectives that are set: ``(name, target, where it came from)``, in the objectives' order."""
        names = {o.name for o in OBJECTIVES}
        return tuple(
            (e.name, e.value, f"{e.source} {e.detail}".strip())
            for e in self.explained
            if e.name in names and e.value is not None
        )

    @property
    def finish_by(self) -> FinishBy | None:
        """The fleet run's finishing time (the settings file's ``defaults``), or None."""
        for e in self.explained:
            if e.name == FINISH_BY and e.value is not None:
                return parse_finish_by(e.value)
        return None

    def sources(self) -> dict[str, str]:
        """Setting name -> where its effective value came from (``source detail``)."""
        return {e.name: f"{e.source} {e.detail}".strip() for e in self.explained}

    def effective(self) -> dict[str, Any]:
        """Setting name -> effective value (the table's property or the default where no layer sets it)."""
        return {e.name: e.value for e in self.explained}

    def policy_json(self) -> str | None:
        """The effective values and their sources as one JSON object (the history's ``policy`` column)."""
        if not self.explained:
            return None
        return json.dumps({e.name: {"value": e.value, "source": e.source, "detail": e.detail} for e in self.explained})

    def summary_line(self) -> str:
        """One line: the values a settings file decided."""
        given = {k: v for k, v in self.to_dict().items() if k != "sources" and v is not None}
        return "settings: " + (", ".join(f"{k}={v!r}" for k, v in given.items()) or "the table's own and defaults")

    def to_dict(self) -> dict[str, Any]:
        return {
            "target_file_size": self.target_file_size,
            "vacuum_retention_hours": self.vacuum_retention_hours,
            "checkpoint_interval": self.checkpoint_interval,
            "zorder_by": self.zorder_by,
            "max_dv_hidden_share": self.max_dv_hidden_share,
            "writer_aware": self.writer_aware,
            "sources": self.sources(),
        }


def _check_entry(entry: Any, where: str) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise InvalidArgumentError(f"{where} must be a mapping of settings, got {entry!r}")
    unknown = sorted(set(entry) - set(SETTING_KEYS))
    if unknown:
        raise InvalidArgumentError(
            f"{where}: unknown setting(s) {', '.join(map(repr, unknown))}; settings are {', '.join(SETTING_KEYS)}"
        )
    if FINISH_BY in entry and where != "defaults":
        raise InvalidArgumentError(
            f"{FINISH_BY} in {where}: the finishing time is an objective of the whole fleet run; set it in defaults"
        )
    specs = {s.name: s for s in _SETTINGS}
    return {k: specs[k].check(v, f"{k} in {where}") for k, v in entry.items() if v is not None}


def _location_key(key: str) -> str:
    """A settings file's table or prefix key as compared: a URI or path canonicalised, a bare name kept."""
    return canonical_uri(key) if ("/" in key or "\\" in key) else key


def _under(uri: str, prefix: str) -> bool:
    prefix = prefix.rstrip("/")
    return uri == prefix or uri.startswith(prefix + "/")


@dataclass(frozen=True)
class FleetPolicy:
    """A parsed, checked settings file: fleet defaults, path-prefix rules, per-table overrides."""

    defaults: dict[str, Any] = field(default_factory=dict)
    #: (prefix as given, canonical prefix, settings), shortest prefix first.
    prefixes: tuple[tuple[str, str, dict[str, Any]], ...] = ()
    #: key as given -> (canonical key, settings).
    tables: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def parse(cls, mapping: Any) -> FleetPolicy:
        """Check a settings file's content (raises :class:`InvalidArgumentError` naming the bad entry)."""
        if mapping is None or isinstance(mapping, FleetPolicy):
            return mapping or cls()
        if not isinstance(mapping, dict):
            raise InvalidArgumentError(
                'maintenance settings must be a mapping: {"defaults": ..., "prefixes": ..., "tables": ...}'
            )
        layered = bool(mapping) and set(mapping) <= set(SECTIONS)
        sections = mapping if layered else {"tables": mapping}
        for name in ("prefixes", "tables"):
            if not isinstance(sections.get(name, {}), dict):
                raise InvalidArgumentError(f"settings section {name!r} must map locations to settings")
        defaults = _check_entry(sections.get("defaults", {}), "defaults")
        prefixes = sorted(
            (
                (p, _location_key(p), _check_entry(e, f"prefixes[{p!r}]"))
                for p, e in sections.get("prefixes", {}).items()
            ),
            key=lambda item: len(item[1]),
        )
        tables = {
            str(k): (_location_key(str(k)), _check_entry(e, f"tables[{k!r}]"))
            for k, e in sections.get("tables", {}).items()
        }
        return cls(defaults, tuple(prefixes), tables)

    @property
    def finish_by(self) -> FinishBy | None:
        """The fleet run's finishing time (``defaults``' ``finish_by``), or None."""
        value = self.defaults.get(FINISH_BY)
        return None if value is None else parse_finish_by(value)

    def table_entry(self, uri: str) -> tuple[str, dict[str, Any]] | None:
        """The per-table entry for ``uri``: its URI first, then its folder name; (key, settings)."""
        canonical = canonical_uri(uri)
        name = canonical.rstrip("/").rsplit("/", 1)[-1]
        for key, (where, entry) in self.tables.items():
            if where == canonical:
                return key, entry
        for key, (where, entry) in self.tables.items():
            if where == name:
                return key, entry
        return None

    def resolve(self, uri: str, configuration: dict[str, str] | None = None) -> TableSettings:
        """The table's settings, each explained (``configuration``: the table's properties, None if unknown)."""
        canonical = canonical_uri(uri)
        check_objective_properties(configuration)
        layers: list[tuple[str, str, dict[str, Any]]] = [("fleet defaults", "", self.defaults)]
        layers += [("path rule", f"prefixes[{p!r}]", e) for p, where, e in self.prefixes if _under(canonical, where)]
        props = configuration or {}
        entry = self.table_entry(uri)
        explained = []
        values: dict[str, Any] = {}
        for spec in _SETTINGS:
            said: list[dict[str, Any]] = [{"source": "default", "detail": "", "value": spec.default}]
            for source, detail, settings in layers:
                if spec.name in settings:
                    said.append({"source": source, "detail": detail, "value": settings[spec.name]})
            if spec.prop is not None and spec.prop in props:
                raw = props[spec.prop]
                assert spec.from_property is not None
                said.append(
                    {"source": "table property", "detail": f"{spec.prop} = {raw!r}", "value": spec.from_property(raw)}
                )
            if entry is not None and spec.name in entry[1]:
                said.append(
                    {"source": "per-table override", "detail": f"tables[{entry[0]!r}]", "value": entry[1][spec.name]}
                )
            top = said[-1]
            explained.append(
                ExplainedSetting(
                    spec.name, top["value"], top["source"], top["detail"], tuple(reversed(said[:-1])), spec.settable
                )
            )
            if spec.settable and not spec.objective and top["source"] in _FILE_LAYERS:
                values[spec.name] = top["value"]
        return TableSettings(**values, explained=tuple(explained))


def settings_for(uri: str, mapping: Any, configuration: dict[str, str] | None = None) -> TableSettings:
    """``FleetPolicy.parse(mapping).resolve(uri, configuration)``: one table's settings from a settings file."""
    return FleetPolicy.parse(mapping).resolve(uri, configuration)


# --- why a table is due ---------------------------------------------------------------


def due_under(
    settings: TableSettings, table: TableRef, snapshot: Snapshot, *, target_size: int | str | None = None
) -> MaintenanceDue:
    """The due verdict with the settings' target size, checkpoint interval and vacuum retention
    (``target_size``: a run's explicit target, which wins)."""
    return maintenance_due(
        table,
        snapshot,
        target_size=settings.target_file_size if target_size is None else target_size,
        checkpoint_interval=settings.checkpoint_interval,
        retention_hours=settings.vacuum_retention_hours,
        writer_aware=settings.writer_aware is not False,
    )


def purge_due(due: MaintenanceDue | None, settings: TableSettings) -> bool:
    """Deletion vectors hide more than the table's ``max_dv_hidden_share`` of its rows."""
    if due is None or due.refused or settings.max_dv_hidden_share is None:
        return False
    return due.rows_hidden_by_dvs > 0 and due.dv_hidden_share > settings.max_dv_hidden_share


@dataclass(frozen=True)
class DueRule:
    """One maintenance operation's rule for one table: due or not, and why, with the numbers."""

    operation: str
    due: bool
    why: str

    def summary_line(self) -> str:
        """``operation: due|not due: why``."""
        return f"{self.operation}: {'due' if self.due else 'not due'}: {self.why}"

    def to_dict(self) -> dict[str, Any]:
        return {"operation": self.operation, "due": self.due, "why": self.why}


def _reason(due: MaintenanceDue, operation: str) -> str | None:
    """The due verdict's own line for ``operation`` (without the ``operation:`` prefix)."""
    for line in due.reasons:
        head, _, rest = line.partition(": ")
        if head == operation:
            return rest
    return None


def _table_retention_hours(settings: TableSettings) -> float | None:
    """The table's own retention (its property, else Delta's default), from the explanation."""
    for e in settings.explained:
        if e.name == "vacuum_retention_hours":
            for layer in ({"source": e.source, "value": e.value}, *e.overridden):
                if layer["source"] in ("table property", "default"):
                    return float(layer["value"])
    return None


def due_rules(due: MaintenanceDue, health: TableHealth, settings: TableSettings) -> tuple[DueRule, ...]:
    """Per operation (compaction, purge, checkpoint, vacuum, log cleanup): due or not, and why.

    The due lines are the verdict's own (:func:`deltalog.maintenance.maintenance_due`: what the
    history's measure rows and the fleet page show); the others say which number fell short of
    which setting.
    """
    if due.refused:
        return tuple(
            DueRule(op, False, f"refused: {due.refused}")
            for op in ("compaction", "purge", "checkpoint", "vacuum", "log_cleanup")
        )
    effective = settings.effective()
    rules = []
    rules.append(
        DueRule(
            "compaction",
            due.compaction,
            _reason(due, "compaction")
            or f"{health.num_small_files} of {health.num_files} live files are under the small-file threshold of "
            f"{health.small_file_threshold} bytes (target {health.target_file_size}), too few in any partition "
            "to fill a bin of two or more",
        )
    )
    limit = settings.max_dv_hidden_share
    if limit is None:
        purge_why = (
            f"deletion vectors hide {due.dv_hidden_share:.2%} of the rows; max_dv_hidden_share is not set, so "
            "no purge is planned"
        )
    else:
        purge_why = f"deletion vectors hide {due.dv_hidden_share:.2%} of the rows (limit {limit:.2%})"
    rules.append(DueRule("purge", purge_due(due, settings), purge_why))
    rules.append(
        DueRule(
            "checkpoint",
            due.checkpoint,
            _reason(due, "checkpoint")
            or f"{due.commits_since_checkpoint} commits since the last checkpoint (interval {due.checkpoint_interval})",
        )
    )
    hours = effective.get("vacuum_retention_hours")
    vacuum_why = _reason(due, "vacuum") or (
        f"{health.num_tombstones} tombstones ({health.tombstone_bytes} bytes); none names a file removed before the "
        f"retention cutoff ({hours:g} hours) that no retained version needs"
    )
    own = _table_retention_hours(settings)
    if settings.vacuum_retention_hours is not None and own is not None and settings.vacuum_retention_hours < own:
        vacuum_why += (
            f" (the policy's {settings.vacuum_retention_hours:g} hours are shorter than the table's {own:g}: a vacuum "
            "refuses them unless short retention is explicitly allowed)"
        )
    rules.append(DueRule("vacuum", due.vacuum, vacuum_why))
    if not effective.get("expired_log_cleanup", True):
        log_why = "delta.enableExpiredLogCleanup is false: the table's log is never cleaned up"
    else:
        log_why = _reason(due, "log_cleanup") or (
            f"no log file before the last checkpoint is older than the log retention "
            f"({effective.get('log_retention_hours', 720):g} hours)"
        )
    rules.append(DueRule("log_cleanup", due.log_cleanup, log_why))
    return tuple(rules)
