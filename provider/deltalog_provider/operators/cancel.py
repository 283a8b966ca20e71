"""Killing a task between steps: the cancel event ``on_kill`` sets and the core checks at its safe points."""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["CancelEvent", "call_core", "with_cancel"]


class CancelEvent(threading.Event):
    """The operator's cancel flag: a ``threading.Event`` that Airflow can copy and pickle.

    Airflow deep-copies operators (``airflow dags test`` on 3.0, DAG subsets) and pickles
    them; a plain Event holds a lock that can be neither. A copy is the same event (the
    copied task is the same task: a kill of either stops the work), a pickle a new unset one.
    """

    def __copy__(self) -> CancelEvent:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> CancelEvent:
        return self

    def __reduce__(self) -> tuple[type[CancelEvent], tuple[()]]:
        return (CancelEvent, ())


def with_cancel(fn: Callable[..., Any], cancel: threading.Event | None) -> Callable[..., Any]:
    """``fn``, given ``cancel=`` when it takes one.

    Those that do stop at their safe points: ``compact`` between bins, ``vacuum`` /
    ``execute_vacuum`` between files and delete chunks. The others are short, or write
    once at the end, and run to completion.
    """
    if cancel is None:
        return fn
    try:
        accepts = "cancel" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins without a signature
        accepts = False
    return functools.partial(fn, cancel=cancel) if accepts else fn


def call_core(fn: Callable[..., Any], *args: Any, cancel: threading.Event | None = None, **kwargs: Any) -> Any:
    """Call a core entry point, passing the cancel event when it takes one (``cancel=``)."""
    return with_cancel(fn, cancel)(*args, **kwargs)
