"""A Delta add action as an Iceberg data file (the manifest entry's ``data_file``), as Delta's converter builds it.

From Delta's ``IcebergTransactionUtils.convertDeltaAddFileToIcebergDataFile``:

- ``file_path``: the absolute location (a relative log path resolved against the table
  root, URI-decoded: the name of the object itself, as Hadoop's ``Path`` spells it);
- ``partition``: the identity value of each partition column, parsed from the Delta
  partition value with the column's type (null for ``None``); a timestamp without a zone
  is read as UTC, as deltalog writes and reads them;
- ``record_count``: ``numRecords`` of the stats (icebergCompat requires it); a file without
  it has its Parquet footer read, since Iceberg readers answer ``count(*)`` from it;
- ``null_value_counts``, ``lower_bounds`` and ``upper_bounds`` from the stats, for the types
  Delta's ``IcebergStatsConverter`` converts (int, short, byte, float, double, decimal,
  string, boolean, date, timestamp, timestamp_ntz; not long, as Delta). An Iceberg bound must
  hold for every value in the file, where a wrong one makes readers skip a file they need,
  so a bound is left out where Delta's statistics may not be one: a string maximum cut to its
  prefix (32 characters or more), strings with characters whose UTF-16 and UTF-8 orders differ,
  collated strings, NaN and infinite floats. Timestamp statistics are truncated to milliseconds,
  so a maximum is raised by 999 microseconds.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from typing import Any

import pyarrow.parquet as pq
from pyiceberg.conversions import to_bytes
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec, partition_record_value
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import DecimalType

from deltalog.errors import OperationRefusedError
from deltalog.protocol.parquet_layout import from_log_path, is_absolute
from deltalog.protocol.partition_values import PartitionValueError, partition_value_array
from deltalog.protocol.schema import delta_type_to_arrow
from deltalog.storage.filesystem import Storage

__all__ = ["DataFileFactory", "UniformDataFileError"]

#: Delta's ``IcebergStatsConverter.isMinMaxStatTypeSupported`` (long is left out there too).
_BOUND_TYPES = frozenset({"integer", "short", "byte", "float", "double", "string", "boolean", "date"}) | frozenset(
    {"timestamp", "timestamp_ntz"}
)
#: Delta's default ``delta.dataSkippingStringPrefixLength``: a statistic this long may be a cut prefix.
_STRING_PREFIX = 32
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class UniformDataFileError(OperationRefusedError):
    """A live file cannot be described in Iceberg metadata (a deletion vector, an unreadable partition value)."""


def _micros(text: str, with_zone: bool) -> int | None:
    try:
        stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    elif not with_zone:
        return None
    delta = stamp - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _bound(delta_type: str, iceberg_type: Any, value: Any, upper: bool) -> bytes | None:
    """One statistic as an Iceberg bound, or None where it may not bound every value (module doc)."""
    try:
        if delta_type in ("integer", "short", "byte"):
            return (
                to_bytes(iceberg_type, int(value)) if isinstance(value, int) and not isinstance(value, bool) else None
            )
        if delta_type in ("float", "double"):
            if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
                return None
            real = float(value)
            if real == 0.0:  # Iceberg orders -0.0 below 0.0; statistics do not tell them apart
                real = 0.0 if upper else -0.0
            return to_bytes(iceberg_type, real)
        if delta_type == "string":
            if not isinstance(value, str) or any(ord(c) >= 0xD800 for c in value):
                return None
            if upper and len(value) >= _STRING_PREFIX:
                return None
            return to_bytes(iceberg_type, value)
        if delta_type == "boolean":
            return to_bytes(iceberg_type, value) if isinstance(value, bool) else None
        if delta_type == "date":
            return to_bytes(iceberg_type, (dt.date.fromisoformat(value) - _EPOCH.date()).days)
        if delta_type in ("timestamp", "timestamp_ntz"):
            micros = _micros(value, delta_type == "timestamp") if isinstance(value, str) else None
            if micros is None:
                return None
            return to_bytes(iceberg_type, micros + (999 if upper else 0))
        if (
            isinstance(iceberg_type, DecimalType)
            and isinstance(value, int | float | str)
            and not isinstance(value, bool)
        ):
            number = decimal.Decimal(str(value))
            exact = number.quantize(decimal.Decimal(1).scaleb(-iceberg_type.scale))
            return to_bytes(iceberg_type, exact) if exact == number else None
    except (ValueError, TypeError, ArithmeticError, OverflowError):
        return None
    return None


class DataFileFactory:
    """Turns add actions of one table state into Iceberg data files (spec 0 of ``schema``)."""

    def __init__(
        self,
        storage: Storage,
        schema: Schema,
        spec: PartitionSpec,
        schema_string: str,
        partition_columns: list[str],
    ) -> None:
        from deltalog.uniform.iceberg_schema import physical_field_ids

        self.storage = storage
        self.schema = schema
        self.spec = spec
        self.stat_fields = physical_field_ids(schema_string)
        fields = {f["name"]: f for f in json.loads(schema_string).get("fields", [])}
        #: Per partition field: (its PartitionField, the physical name keying partitionValues, Arrow type).
        self.partitions = []
        for pf, column in zip(spec.fields, partition_columns):
            f = fields[column]
            physical = (f.get("metadata") or {}).get("delta.columnMapping.physicalName") or column
            self.partitions.append((pf, physical, column, delta_type_to_arrow(f["type"])))

    def location(self, log_path: str) -> str:
        """The absolute location Iceberg names a file by."""
        path = from_log_path(log_path)
        if is_absolute(log_path):
            return path if "://" in path or path.startswith("file:") else "file://" + path
        return self.storage.full_uri(path)

    def _partition(self, add: dict[str, Any]) -> Record:
        values = add.get("partitionValues") or {}
        out = []
        for pf, physical, column, arrow_type in self.partitions:
            raw = values.get(physical, values.get(column))
            if raw == "__HIVE_DEFAULT_PARTITION__":
                raw = None
            try:
                python = partition_value_array(raw, 1, arrow_type)[0].as_py()
            except PartitionValueError as exc:
                raise UniformDataFileError(f"{add['path']!r}: partition value of {column}: {exc}") from None
            out.append(partition_record_value(pf, python, self.schema))
        return Record(*out)

    def _record_count(self, add: dict[str, Any], stats: dict[str, Any]) -> int:
        count = stats.get("numRecords")
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            return count
        rel = from_log_path(add["path"])
        with self.storage.open_input(self.storage.join(rel)) as fh:
            return int(pq.ParquetFile(fh).metadata.num_rows)

    def _metrics(self, stats: dict[str, Any]) -> dict[str, Any]:
        nulls: dict[int, int] = {}
        lower: dict[int, bytes] = {}
        upper: dict[int, bytes] = {}
        for path, (field_id, delta_type) in self.stat_fields.items():
            if not isinstance(delta_type, str):  # lists and maps: no Iceberg metrics
                continue
            count = _dig(stats.get("nullCount"), path)
            if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
                nulls[field_id] = count
            if delta_type not in _BOUND_TYPES and not delta_type.startswith("decimal("):
                continue
            iceberg_type = self.schema.find_field(field_id).field_type
            for key, into, is_upper in (("minValues", lower, False), ("maxValues", upper, True)):
                value = _dig(stats.get(key), path)
                if value is not None:
                    encoded = _bound(delta_type, iceberg_type, value, is_upper)
                    if encoded is not None:
                        into[field_id] = encoded
        return {"null_value_counts": nulls, "lower_bounds": lower, "upper_bounds": upper}

    def from_add(self, add: dict[str, Any]) -> DataFile:
        """The data file of a live add action."""
        if add.get("deletionVector"):
            raise UniformDataFileError(
                f"live file {add['path']!r} has a deletion vector, which the Iceberg metadata of icebergCompatV1/V2 "
                "cannot express (purge it: compact(purge_deletion_vectors=True))"
            )
        raw = add.get("stats")
        try:
            stats = json.loads(raw) if isinstance(raw, str) and raw else {}
        except ValueError:
            stats = {}
        stats = stats if isinstance(stats, dict) else {}
        data_file = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=self.location(add["path"]),
            file_format=FileFormat.PARQUET,
            partition=self._partition(add),
            record_count=self._record_count(add, stats),
            file_size_in_bytes=int(add["size"]),
            sort_order_id=None,
            spec_id=self.spec.spec_id,
            equality_ids=None,
            key_metadata=None,
            **self._metrics(stats),
        )
        return data_file


def _dig(doc: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(part)
    return doc
