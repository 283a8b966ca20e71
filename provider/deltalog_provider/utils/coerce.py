"""Rendered template values back to the types the core expects.

Jinja renders to strings (unless the DAG sets ``render_template_as_native_obj``),
so a templated ``retention_hours="{{ params.hours }}"`` arrives as ``"168"``. These
helpers accept both forms and raise deltalog's ``InvalidArgumentError`` (a
non-retryable task failure) with the parameter's name when a value is malformed.
"""

from __future__ import annotations

import json
from typing import Any

from deltalog.errors import InvalidArgumentError


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


def first_number(metrics: dict[str, Any], *keys: str) -> int | float | None:
    """The first of ``keys`` holding a number (result field names differ between operations)."""
    for key in keys:
        value = metrics.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
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
