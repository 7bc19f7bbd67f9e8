"""``crosscheck matrix``: the fixed CI matrix of cases (``nox -s crosscheck``), one summary table."""

from __future__ import annotations

import argparse
from typing import Any

from crosscheck._cli.common import (
    EXIT_FAIL,
    EXIT_OK,
    UsageError,
    add_backend_option,
    check_output,
    make_console,
    progress_display,
    write_json,
    write_junit,
)


def register(subparsers: Any) -> None:
    """Add ``matrix`` to the ``crosscheck`` subparsers."""
    parser = subparsers.add_parser(
        "matrix",
        help="run the CI matrix of cases (nox -s crosscheck)",
        description="Run the fixed CI matrix of cases and print one summary table.",
    )
    add_backend_option(parser, "backend to check (repeatable; default: every built-in)")
    parser.add_argument("--strict", action="store_true", help="fail on unjudgeable entries")
    parser.add_argument("--json", metavar="PATH", help="write every case's JSON report here (a list)")
    parser.add_argument("--junit", metavar="PATH", help="write a JUnit XML report here (a suite a case)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run every case of the matrix, print the table, write the reports; exit 1 when a case fails."""
    from crosscheck._report.junit import case_name
    from crosscheck._sweep import matrix
    from crosscheck._sweep.matrix import render_matrix, run_matrix

    check_output(args.json)
    check_output(args.junit, "--junit")
    console = make_console()
    try:
        with progress_display() as progress:
            rows = run_matrix(matrix.CASES, backends=args.backend, strict=args.strict, progress=progress)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc
    render_matrix(rows, console)
    write_junit(args.junit, [(case_name(row.report), row.report) for row in rows])
    if args.json:
        write_json(args.json, [dict(row.report.to_dict(), known_answer=row.known_answer) for row in rows])
    return EXIT_OK if all(row.passed for row in rows) else EXIT_FAIL
