"""``crosscheck replay``: re-run a repro bundle's backends and say whether each gradient reproduces bit for
bit. A bundle is a file someone sent: its import strings are code, so only the built-in backends run
unless the user trusts them (``--trust``, or naming them with ``--backend``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from crosscheck._cli.common import EXIT_FAIL, EXIT_OK, UsageError
from crosscheck._cli.options import add_backend_option
from crosscheck._cli.terminal import make_console
from crosscheck._errors import one_line
from crosscheck._report.text import markup


def register(subparsers: Any) -> None:
    """Add ``replay`` to the ``crosscheck`` subparsers."""
    parser = subparsers.add_parser(
        "replay",
        help="re-run a repro bundle and say whether each gradient reproduces bit for bit",
        description="Re-run the backends of a bundle written by `crosscheck run --save-bundle`. A bundle's "
        "import strings are code: only the built-in backends run unless you trust them.",
    )
    parser.add_argument("bundle", metavar="PATH", help="the .npz bundle")
    parser.add_argument(
        "--trust",
        action="store_true",
        help="run every import string the bundle names (its backends' and its workload's): they are code",
    )
    add_backend_option(parser, "run this import string of the bundle too (repeatable): you trust it")
    parser.add_argument(
        "--workload",
        metavar="IMPORT_STRING",
        help="run the bundle's workload, an import string: you trust it",
    )
    parser.add_argument(
        "--timeout", type=float, metavar="SECONDS", help="fail a backend call that takes longer than this"
    )
    parser.add_argument(
        "--isolate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run every backend in its own worker process (default: only import strings and plugins)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Replay the bundle, print a row per backend of the bundle; exit 0 only when every one was run again
    and reproduced bit for bit."""
    from rich.table import Table

    from crosscheck._replay.replay import replay, reproduced, verdict
    from crosscheck._report.bundle import load_bundle

    if args.timeout is not None and not args.timeout > 0:
        raise UsageError(f"`--timeout` must be a positive number of seconds, found {args.timeout:g}.")
    trust: Any = True if args.trust else [*(args.backend or []), *([args.workload] if args.workload else [])]
    try:
        bundle = load_bundle(args.bundle)
        isolate = "auto" if args.isolate is None else args.isolate
        rows = replay(bundle, trust=trust, timeout=args.timeout, isolate=isolate)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    case = bundle["meta"]["report"]["case"]
    title = f"replay of {args.bundle}: " + ", ".join(
        f"{k}={v}" for k, v in case.items() if not str(k).endswith("sha256")
    )
    title += _recorded(bundle["meta"]["report"])
    table = Table(title=markup(title), title_justify="left")  # the case is the bundle's text
    for column in ("backend", "spec", "result", "detail"):
        table.add_column(column, overflow="fold")  # names and specs wrap, never end in "…"
    for row in rows:
        cells = (row["backend"], str(row["spec"]), row["status"], row.get("detail", ""))
        table.add_row(*(markup(cell) for cell in cells))  # text from the file, or an error quoting it
    console = make_console()
    console.print(table)
    for notice in _notices(bundle["workload"], rows):
        print(f"crosscheck: {notice}", file=sys.stderr)
    console.print(verdict(rows), markup=False, highlight=False)
    return EXIT_OK if reproduced(rows) else EXIT_FAIL


def _recorded(report: dict[str, Any]) -> str:
    """``; the JAX side as recorded: --jax-platform cpu --jax-precision highest`` for each side whose
    placement the run chose (a replay applies it again), else nothing."""
    from crosscheck._backends import framework_named
    from crosscheck._replay.rerun import recorded_placement

    out = ""
    for record in recorded_placement(report):
        if record.chosen():
            framework = framework_named(record.framework)
            title = framework.title if framework is not None else record.framework
            options = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in record.chosen().items())
            out += f"; the {title} side as recorded: {options}"
    return out


def _notices(workload: str, rows: list[dict[str, Any]]) -> list[str]:
    """One line for each import string that was not run (the workload's, then each backend's)."""
    lines = []
    if any(row.get("untrusted") == "workload" for row in rows):
        spec = one_line(workload)
        lines.append(
            f"not run: workload `{spec}`: an import string is code; --trust or --workload {spec} runs it"
        )
    for row in rows:
        if row.get("untrusted") == "backend":
            spec = one_line(str(row["spec"]))
            lines.append(
                f"not run: backend `{spec}`: an import string is code; --trust or --backend {spec} runs it"
            )
    return lines
