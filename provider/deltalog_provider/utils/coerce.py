"""Rendered template values back to the types the core expects.

Jinja renders to strings (unless the DAG sets ``render_template_as_native_obj``),
so a templated ``retention_hours="{{ params.hours }}"`` arrives as ``"168"``. These
helpers accept both forms and raise deltalog's ``InvalidArgumentError`` (a
non-retryable task failure) with the parameter's name when a value is malformed.
"""

from __future__ import annotations

import ast
import json
from typing import Any

import pyarrow as pa

from deltalog import parse_schema_string
from deltalog.errors import InvalidArgumentError

__all__ = [
    "arrow_schema",
    "first_count",
    "human_bytes",
    "json_value",
    "optional_float",
    "optional_int",
    "optional_list",
    "optional_mapping",
    "optional_size",
    "optional_str",
    "request_document",
    "strict_bool",
]


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip() in ("", "None", "null"))


def strict_bool(value: Any, name: str) -> bool:
    """A real bool, or a rendered ``"true"``/``"false"`` (any case); anything else is refused.

    Truthiness is never used: ``"False"``, ``"no"``, ``"0"`` or an unrendered
    ``"{{ params.x }}"`` are all truthy strings, and several of these switches
    override a safety refusal (``allow_short_retention``) or decide whether anything
    is deleted (``dry_run``).
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise InvalidArgumentError(f"{name} must be True or False (or the string 'true'/'false'), got {value!r}")


def optional_str(value: Any) -> str | None:
    return None if _blank(value) else str(value).strip()


def optional_int(value: Any, name: str) -> int | None:
    if _blank(value):
        return None
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be an integer, got {value!r}")
    try:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError
        return int(str(value).strip()) if not isinstance(value, int | float) else int(value)
    except ValueError:
        raise InvalidArgumentError(f"{name} must be an integer, got {value!r}") from None


def optional_size(value: Any, name: str) -> int | str | None:
    """A size in bytes (int, or a numeric string) or a size string such as ``"128MB"`` for the core to parse."""
    if _blank(value):
        return None
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be a size, got {value!r}")
    if isinstance(value, int):
        return value
    text = str(value).strip()
    return int(text) if text.isascii() and text.isdigit() else text  # "²".isdigit() is True, int("²") fails


def optional_float(value: Any, name: str) -> float | None:
    if _blank(value):
        return None
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{name} must be a number, got {value!r}") from None


def optional_list(value: Any, name: str) -> list[str] | None:
    """A list of strings from a list, a JSON list, or a comma-separated string."""
    if _blank(value):
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except (ValueError, RecursionError):  # RecursionError: nested deeper than any list of names
                raise InvalidArgumentError(f"{name} is not a valid JSON list: {text[:80]!r}") from None
        else:
            return [part.strip() for part in text.split(",") if part.strip()]
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    raise InvalidArgumentError(f"{name} must be a list of strings, got {value!r}")


def json_value(value: Any, name: str) -> Any:
    """A rendered JSON list or object parsed back (a tuple becomes a list); other text and values as they are."""
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, str):
        text = value.strip()
        if _blank(text):
            return None
        if text[0] in "[{":
            try:
                return json.loads(text)
            except (ValueError, RecursionError):
                raise InvalidArgumentError(f"{name} is not valid JSON: {value!r}") from None
        return text
    return value


def optional_mapping(value: Any, name: str) -> dict[str, Any] | None:
    """A dict, or a rendered JSON object; blank is None."""
    parsed = json_value(value, name)
    if parsed is None or isinstance(parsed, dict):
        return parsed
    raise InvalidArgumentError(f"{name} must be a mapping (a dict or a JSON object), got {value!r}")


def request_document(text: str, name: str) -> dict[str, Any]:
    """A JSON object given as text; also a dict Jinja rendered without ``render_template_as_native_obj``."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise InvalidArgumentError(f"{name} is nested too deeply to be a commit request") from None
    except ValueError:
        try:  # a dict rendered by Jinja: its Python repr
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, RecursionError, MemoryError):
            raise InvalidArgumentError(f"{name} looks like JSON but cannot be parsed") from None
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{name} JSON must be an object")
    return value


def arrow_schema(value: Any, name: str) -> pa.Schema:
    """A ``pyarrow.Schema``, or a Delta schema (``schemaString`` JSON text or its parsed dict)."""
    if isinstance(value, pa.Schema):
        return value
    if isinstance(value, dict):
        value = json.dumps(value)
    if isinstance(value, str) and value.strip():
        return parse_schema_string(value)
    raise InvalidArgumentError(f"{name} must be a pyarrow.Schema or a Delta schema JSON, got {type(value).__name__}")


def first_count(metrics: dict[str, Any], *keys: str) -> int | None:
    """The first of ``keys`` holding a number, as an int (result field names differ between operations)."""
    for key in keys:
        value = metrics.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
    return None


def human_bytes(n: Any) -> str:
    if not isinstance(n, int | float) or isinstance(n, bool):
        return "? bytes"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
