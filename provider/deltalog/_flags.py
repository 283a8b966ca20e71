"""Boolean switches given by callers: a real ``bool`` or a clear error.

Several switches override a safety refusal (``allow_short_retention``,
``single_writer``, ``full_fallback``) or decide whether anything is deleted at all
(``dry_run``). Python's truthiness would read ``"False"``, ``"no"`` or ``"0"`` as
consent, which is how a templated Airflow value once turned into a vacuum with
zero retention. The core therefore accepts ``True``/``False`` only; the Airflow
operators parse rendered strings strictly before calling it
(``deltalog_provider.utils.coerce.strict_bool``).
"""

from __future__ import annotations

from typing import Any

from deltalog.errors import InvalidArgumentError


def require_bool(value: Any, name: str) -> bool:
    """``value`` if it is a ``bool``; InvalidArgumentError (exit 2) naming ``name`` for anything else."""
    if isinstance(value, bool):
        return value
    raise InvalidArgumentError(
        f"{name} must be True or False, got {value!r} ({type(value).__name__}); "
        "strings and numbers are not accepted as a yes/no"
    )


def require_workers(value: Any, name: str = "max_workers") -> int:
    """The one rule for worker counts (vacuum, compaction): a positive ``int``, else InvalidArgumentError.

    Zero workers would do nothing (or hang a pool), so it is refused everywhere alike.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}")
    return value


def require_bools(**flags: Any) -> None:
    """:func:`require_bool` for each keyword (one call at the top of an entry point)."""
    for name, value in flags.items():
        require_bool(value, name)
