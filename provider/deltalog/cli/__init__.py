"""The ``deltalog`` command line.

Each command module under ``deltalog.cli`` registers its sub-commands; this
module owns what they share: ``--json`` output, ``--storage-option``, and the
error contract of docs/design.md (one ``error: ...`` line on stderr, exit 2 for bad
input or an unreadable table, 1 for a refused or conflicting operation, never a
traceback).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from deltalog._version import __version__
from deltalog.errors import DeltaLogError, InvalidArgumentError

__all__ = ["emit", "key_values", "main", "run"]

#: Modules whose ``register(subparsers)`` adds commands, in help order.
COMMAND_MODULES = [
    "deltalog.cli.read",
    "deltalog.cli.fleet",
    "deltalog.cli.objectives",
    "deltalog.cli.write",
    "deltalog.cli.vacuum",
    "deltalog.cli.maintenance",
    "deltalog.cli.compact",
    "deltalog.cli.features",
]

Handler = Callable[[argparse.Namespace], Any]


def key_values(values: list[str] | None, option: str) -> dict[str, str]:
    """``KEY=VALUE`` items of a repeatable option as a dict (bad input names the option)."""
    out: dict[str, str] = {}
    for item in values or []:
        if "=" not in item:
            raise InvalidArgumentError(f"{option} expects KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        out[key.strip()] = value
    return out


def storage_options(values: list[str] | None) -> dict[str, str]:
    return key_values(values, "--storage-option")


def common_parser() -> argparse.ArgumentParser:
    """Options every command takes (added as a parent parser)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument(
        "--storage-option",
        action="append",
        metavar="KEY=VALUE",
        help="fsspec storage option (repeatable), e.g. key=..., endpoint_url=...",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    return p


def one_line(text: object) -> str:
    """``text`` as one printable line: control characters (a newline inside a path, say) and bytes that
    are not UTF-8 (lone surrogates from the shell) are escaped, so an error is always exactly one line."""
    s = str(text)
    if s.isprintable():
        try:
            s.encode("utf-8")
            return s
        except UnicodeEncodeError:
            pass
    out = []
    for c in s:
        if c.isprintable() and not 0xD800 <= ord(c) <= 0xDFFF:
            out.append(c)
        else:
            out.append(c.encode("unicode_escape").decode("ascii") if ord(c) < 0xD800 else f"\\x{ord(c) & 0xFF:02x}")
    return "".join(out)


def fail(message: object, code: int) -> int:
    """Print ``error: <message>`` as one line on stderr; return the exit code."""
    print(f"error: {one_line(message)}", file=sys.stderr)
    return code


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, like every other bad input
        self.exit(2, f"error: {one_line(message)} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="deltalog", description="Delta Lake table maintenance: read, commit and keep tables healthy.")
    parser.add_argument("--version", action="version", version=f"deltalog {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    parent = common_parser()
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub, parent)
    return parser


def emit(args: argparse.Namespace, result: Any, human: Callable[[Any], str] | None = None) -> None:
    """Print a command's result: JSON with ``--json``, else the human form."""
    if not args.json and human is not None:
        # The human form may be far cheaper than to_dict() (no file list). A name that is not
        # UTF-8 (a lone surrogate from the shell) is printed escaped rather than failing the print.
        print(human(result).encode("utf-8", "backslashreplace").decode("utf-8"))
        return
    data = result.to_dict() if hasattr(result, "to_dict") else result
    print(json.dumps(data, indent=None if args.json else 2, default=str))


def run() -> None:
    """The console-script entry point: :func:`main`, then exit with its status and nothing else.

    After the work is done and printed, interpreter teardown can still abort the
    process (pyarrow's thread pools occasionally die with ``terminate called without
    an active exception``, exit 134), so a script or BashOperator would see a failure
    of work that succeeded. The output is flushed and the process ends with
    ``os._exit`` with the command's own status, skipping teardown: nothing deltalog
    writes depends on it (every write is complete, atomic, and fsynced where it
    matters, before ``main`` returns).
    """
    try:
        status = main()
    except SystemExit as exc:  # argparse: --help, --version, usage errors
        if exc.code is None or isinstance(exc.code, int):
            status = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            status = 2
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: the output was not delivered
            status = status or 2
    os._exit(status)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        args.storage_options = storage_options(getattr(args, "storage_option", None))
        # A handler returns None (success) or, for a run over many tables, its own status (maintain).
        return args.handler(args) or 0
    except DeltaLogError as exc:
        return fail(exc, exc.exit_code)
    except FileNotFoundError as exc:
        return fail(f"file not found: {exc.filename or exc}", 2)
    except PermissionError as exc:
        return fail(f"permission denied: {exc.filename or exc}", 2)
    except OSError as exc:
        return fail(f"storage error: {exc}", 2)
    except KeyboardInterrupt:
        return fail("interrupted", 130)
    except RecursionError:  # JSON or a structure nested deeper than any valid input
        return fail("an input is nested too deeply to process; nothing was written", 2)
    except Exception as exc:  # noqa: BLE001 - the contract is one line, never a traceback
        from deltalog.storage.filesystem import is_remote_error

        if is_remote_error(exc):  # an object store's client failed outside the paths that name it
            return fail(f"storage error ({type(exc).__name__}): {exc}", 2)
        return fail(f"internal error ({type(exc).__name__}): {exc}", 3)
