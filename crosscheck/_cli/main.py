"""The command line: build the parser from the subcommand modules, dispatch, and turn a usage error into
one line. Each subcommand lives in its own module (``register(subparsers)`` sets ``handler`` to its
``run(args) -> int``); they share ``common`` and import the core, never each other.

Exit status: 0 every candidate agrees; 1 a disagreement, a non-finite gradient or a failed backend;
2 a usage or input error (one line on stderr, no traceback); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from crosscheck._cli import cost as _cli_cost
from crosscheck._cli import inspect as _cli_inspect
from crosscheck._cli import list as _cli_list
from crosscheck._cli import matrix as _cli_matrix
from crosscheck._cli import memory as _cli_memory
from crosscheck._cli import replay as _cli_replay
from crosscheck._cli import run as _cli_run
from crosscheck._cli import ste as _cli_ste
from crosscheck._cli import sweep as _cli_sweep
from crosscheck._cli.common import EXIT_INTERRUPTED, EXIT_USAGE, Parser, UsageError
from crosscheck._errors import one_line

#: The subcommand modules, in the order ``crosscheck --help`` lists them.
SUBCOMMANDS = (
    _cli_run,  # run and explain
    _cli_matrix,
    _cli_replay,
    _cli_inspect,
    _cli_memory,
    _cli_list,
    _cli_sweep,
    _cli_cost,
    _cli_ste,
)


def build_parser() -> argparse.ArgumentParser:
    """The ``crosscheck`` parser: one subparser (or two, for run and explain) per subcommand module."""
    parser = Parser(prog="crosscheck", description="Cross-check gradients across backends.")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in SUBCOMMANDS:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``crosscheck`` and ``python -m crosscheck``; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
        return args.handler(args)
    except UsageError as exc:
        # One line, whatever the message (a user's factory may raise a multi-line error; a file's text
        # may hold control characters).
        print("crosscheck: error: " + one_line(str(exc)), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("crosscheck: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
