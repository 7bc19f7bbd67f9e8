"""The command line: build the parser from the subcommand modules, dispatch, and turn a usage error into
one line. Each subcommand lives in its own module (``register(subparsers)`` sets ``handler`` to its
``run(args) -> int``); they share ``common`` and import the core, never each other.

Exit status: 0 every candidate agrees; 1 a disagreement, a non-finite gradient or a failed backend;
2 a usage or input error (one line on stderr, no traceback); 130 interrupted.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence
from typing import NoReturn

from crosscheck._cli import blocks as _cli_blocks
from crosscheck._cli import cost as _cli_cost
from crosscheck._cli import inspect as _cli_inspect
from crosscheck._cli import list as _cli_list
from crosscheck._cli import memory as _cli_memory
from crosscheck._cli import replay as _cli_replay
from crosscheck._cli import run as _cli_run
from crosscheck._cli import ste as _cli_ste
from crosscheck._cli import sweep as _cli_sweep
from crosscheck._cli.common import EXIT_INTERRUPTED, EXIT_USAGE, HelpFormatter, Parser, UsageError
from crosscheck._errors import DetailedError, describe, one_line

#: The subcommand modules, in the order ``crosscheck --help`` lists them.
SUBCOMMANDS = (
    _cli_run,  # run and explain
    _cli_sweep,
    _cli_blocks,
    _cli_replay,
    _cli_list,
    _cli_inspect,
    _cli_memory,
    _cli_cost,
    _cli_ste,
)

#: The end of ``crosscheck --help`` (and of what a bare ``crosscheck`` prints).
EPILOG = """\
examples:
  crosscheck run                            # jax and torch against the oracle
  crosscheck run --backend mymodule:my_grad # your my_grad, in mymodule.py
  crosscheck sweep                          # the cases of [tool.crosscheck]

`crosscheck COMMAND --help` lists a command's options. Exit status: 0 every
candidate agrees, 1 a disagreement or a failed backend, 2 a usage or input
error, 130 interrupted."""


class _Formatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """The top-level help: the epilog as written, and the commands without argparse's metavar line."""

    def _format_action(self, action: argparse.Action) -> str:
        text = super()._format_action(action)
        if isinstance(action, argparse._SubParsersAction):
            return text.split("\n", 1)[1]  # the first line is the bare "COMMAND"
        return text


def build_parser() -> argparse.ArgumentParser:
    """The ``crosscheck`` parser: one subparser (or two, for run and explain) per subcommand module."""
    from crosscheck import __version__

    parser = Parser(
        prog="crosscheck",
        description="Cross-check gradients across JAX, PyTorch, your own code and a finite-difference\n"
        "oracle, with explained tolerances.",
        epilog=EPILOG,
        formatter_class=_Formatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"crosscheck {__version__} (distribution crosscheck-gradients)"
    )
    subparsers = parser.add_subparsers(
        dest="command", title="commands", metavar="COMMAND", parser_class=Parser
    )
    for module in SUBCOMMANDS:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``crosscheck`` and ``python -m crosscheck``; returns the exit status."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            # Nothing was checked, so this is not a success: the overview on stderr, exit 2.
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return _handle(args)
    except UsageError as exc:
        lines = _details(exc)
        # One line, whatever the message (a user's factory may raise a multi-line error; a file's text
        # may hold control characters); crosscheck's own refusal of several problems: one line each.
        print("crosscheck: error: " + "\n".join(lines), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("crosscheck: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _details(exc: BaseException) -> list[str]:
    """Print on standard output the details an error carries (``DetailedError``: a refused port
    mapping's table), each line as text; return the lines of its message: one, or, for crosscheck's
    own ``DetailedError`` (a ``Refused`` of several problems: a head line, then a line each), each of
    its lines as text."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, DetailedError):
        cause = cause.__cause__
    if cause is None:
        return [one_line(str(exc))]
    if cause.details:
        # Its cells are one line each already; the columns' spaces are kept, control characters not.
        print("\n".join("".join(c for c in line if c.isprintable()) for line in cause.details.splitlines()))
    lines = [one_line(line) for line in str(exc).splitlines()]
    indented = [line if i == 0 else f"  {line}" for i, line in enumerate(lines) if line]
    return indented or [""]


def _handle(args: argparse.Namespace) -> int:
    """The subcommand's status. Every user callable runs guarded (a backend's call, or, before any
    backend exists, a one-line usage error); a ``sys.exit`` that still got here ends the command with
    exit 2 and one line, never with the status it asked for (``sys.exit(0)`` is no pass)."""
    try:
        return args.handler(args)
    except SystemExit as exc:
        raise UsageError(
            f"{describe(exc, 'code crosscheck ran')}; the command stopped, nothing passed"
        ) from exc


def console() -> NoReturn:
    """The process's entry point (the ``crosscheck`` command, ``python -m crosscheck``): ``main``, then
    exit with its status.

    The objects alive at the end are frozen first (``gc.freeze``), so that the collections Python runs
    while it shuts down skip them: with JAX and PyTorch loaded, those passes over their objects took
    0.6 s of every run here (0.14 s frozen), a sixth of ``crosscheck run --dim 4``. Exit handlers and
    flushing run as before.
    """
    code = main()
    gc.freeze()
    sys.exit(code)
