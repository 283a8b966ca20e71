"""Partition values in their canonical serialised form (PROTOCOL.md "Partition Value Serialization").

``partitionValues`` are strings that every reader parses back with the column's
type. A value that parses only by luck (``1.5`` for a ``decimal(5,2)``,
``2024-1-5`` for a date, ``TRUE`` for a boolean) makes the table unreadable to
stricter readers (deltalake refuses ``'1.5'`` as ``decimal(5,2)``), and two
spellings of one value split one partition in two. So every value a writer
hands us (a hive directory name, a commit request, ``convert``) is parsed with
the column's type and written back in one canonical form; a value the type
cannot hold is refused:

=================  ===========================================================
type               canonical form
=================  ===========================================================
byte ... long      decimal digits, no sign for positives, no leading zeros;
                   within the type's range
float, double      the shortest round-trip decimal (``1.5``, ``1e-05``),
                   ``NaN``, ``Infinity``, ``-Infinity``; floats within range
decimal(p,s)       exactly ``s`` fraction digits (``1.50``); at most ``p - s``
                   integer digits; more fraction digits than ``s`` is refused
                   (no silent rounding)
boolean            ``true`` / ``false``
date               ``YYYY-MM-DD``
timestamp          with a zone or offset: UTC in ISO 8601,
                   ``YYYY-MM-DDTHH:MM:SS.ffffffZ``; without one (the writer's
                   zone, as Delta Spark writes it): ``YYYY-MM-DD HH:MM:SS[.ffffff]``
timestamp_ntz      ``YYYY-MM-DD HH:MM:SS[.ffffff]``; a zone or offset is refused
string, binary     unchanged
=================  ===========================================================

``None`` and the empty string are the null partition value (``None``).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re

import pyarrow as pa

__all__ = ["PartitionValueError", "canonical_partition_value", "describe_type", "partition_value_array"]

_INTEGER = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_DATE = re.compile(r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})")
_TIMESTAMP = re.compile(
    r"([0-9]{4}-[0-9]{1,2}-[0-9]{1,2})(?:[ T]([0-9]{1,2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]{1,9}))?)?)?"
    r"\s*(Z|z|UTC|[+-][0-9]{2}(?::?[0-9]{2})?)?"
)
_FLOAT32_MAX = 3.4028234663852886e38
_SPECIAL_FLOATS = {"nan": "NaN", "+nan": "NaN", "-nan": "NaN", "infinity": "Infinity", "+infinity": "Infinity"}
_SPECIAL_FLOATS.update({"inf": "Infinity", "+inf": "Infinity", "-inf": "-Infinity", "-infinity": "-Infinity"})


class PartitionValueError(ValueError):
    """A partition value the column's type cannot hold; the message says why (the caller adds where)."""


def _integer(value: str, bits: int) -> str:
    if not _INTEGER.fullmatch(value):
        raise PartitionValueError("not an integer")
    number = int(value)
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    if not low <= number <= high:
        raise PartitionValueError(f"out of range ({low} to {high})")
    return str(number)


def _floating(value: str, single: bool) -> str:
    special = _SPECIAL_FLOATS.get(value.lower())
    if special is not None:
        return special
    if not _FLOAT.fullmatch(value):
        raise PartitionValueError("not a number")
    number = float(value)
    if math.isinf(number) or (single and abs(number) > _FLOAT32_MAX):
        raise PartitionValueError("out of range")
    return repr(number + 0.0)  # + 0.0 turns -0.0 into 0.0: one spelling of zero


def _decimal(value: str, precision: int, scale: int) -> str:
    if not _DECIMAL.fullmatch(value):
        raise PartitionValueError("not a decimal number")
    number = decimal.Decimal(value)
    quantum = decimal.Decimal(1).scaleb(-scale)
    context = decimal.Context(prec=max(precision, 1) + 2, traps=[decimal.InvalidOperation])
    try:
        fitted = number.quantize(quantum, context=context)
    except decimal.InvalidOperation:
        raise PartitionValueError(f"does not fit decimal({precision},{scale})") from None
    if fitted != number:
        raise PartitionValueError(f"has more than {scale} fraction digit(s)")
    digits = len(fitted.as_tuple().digits)
    if fitted != 0 and digits > precision:
        raise PartitionValueError(f"has more than {precision - scale} integer digit(s)")
    text = format(fitted, "f")
    return text[1:] if text.startswith("-") and fitted == 0 else text


def _date(value: str) -> dt.date:
    m = _DATE.fullmatch(value)
    if not m:
        raise PartitionValueError("not a date (YYYY-MM-DD)")
    try:
        return dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError as exc:
        raise PartitionValueError(f"not a date ({exc})") from None


def _clock(value: dt.datetime) -> str:
    return f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}"


def _naive_text(value: dt.datetime) -> str:
    fraction = f".{value.microsecond:06d}" if value.microsecond else ""
    return f"{value.date().isoformat()} {_clock(value)}{fraction}"


def _timestamp(value: str, with_zone: bool) -> str:
    m = _TIMESTAMP.fullmatch(value.strip())
    if not m:
        raise PartitionValueError("not a timestamp (YYYY-MM-DD HH:MM:SS[.ffffff][zone])")
    day = _date(m.group(1))
    hour, minute, second = (int(g) if g else 0 for g in (m.group(2), m.group(3), m.group(4)))
    fraction = m.group(5) or ""
    if len(fraction) > 6 and fraction[6:].strip("0"):
        raise PartitionValueError("has more than microsecond precision")
    micros = int((fraction + "000000")[:6])
    try:
        stamp = dt.datetime(day.year, day.month, day.day, hour, minute, second, micros)
    except ValueError as exc:
        raise PartitionValueError(f"not a timestamp ({exc})") from None
    zone = m.group(6)
    if zone is None:
        return _naive_text(stamp)
    if not with_zone:
        raise PartitionValueError("has a time zone, which a timestamp_ntz cannot hold")
    if zone.upper() in ("Z", "UTC"):
        offset = dt.timedelta(0)
    else:
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        offset = sign * dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
    try:
        utc = stamp - offset
    except OverflowError:
        raise PartitionValueError("out of range") from None
    return f"{utc.date().isoformat()}T{_clock(utc)}.{utc.microsecond:06d}Z"


def canonical_partition_value(value: str | None, dtype: pa.DataType) -> str | None:
    """``value`` in the canonical form for a partition column of Arrow type ``dtype`` (None = null).

    Raises PartitionValueError (a ValueError) when the type cannot hold the value.
    """
    if value is None or value == "":
        return None
    if pa.types.is_integer(dtype):
        return _integer(value.strip(), dtype.bit_width)
    if pa.types.is_floating(dtype):
        return _floating(value.strip(), dtype.bit_width == 32)
    if pa.types.is_decimal(dtype):
        return _decimal(value.strip(), dtype.precision, dtype.scale)
    if pa.types.is_boolean(dtype):
        lowered = value.strip().lower()
        if lowered not in ("true", "false"):
            raise PartitionValueError("not true or false")
        return lowered
    if pa.types.is_date(dtype):
        return _date(value.strip()).isoformat()
    if pa.types.is_timestamp(dtype):
        return _timestamp(value, with_zone=dtype.tz is not None)
    return value


def describe_type(dtype: pa.DataType) -> str:
    """The Delta name of a partition column's type, for messages."""
    from deltalog.protocol.schema import arrow_type_to_delta

    try:
        name = arrow_type_to_delta(dtype)
    except ValueError:
        return str(dtype)
    return name if isinstance(name, str) else str(dtype)


def partition_value_array(value: str | None, n: int, dtype: pa.DataType) -> pa.Array:
    """``n`` copies of a partition value as a column of ``dtype``: how a file that carries its partition
    columns (Iceberg compatibility, materializePartitionColumns) holds it. Raises PartitionValueError
    when the type cannot hold the value, so a plan can refuse it before any file is written."""
    if value is None:
        return pa.nulls(n, dtype)
    try:
        return pa.array([value] * n, pa.string()).cast(dtype)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise PartitionValueError(f"{value!r} is not a {describe_type(dtype)} ({exc})") from None
