"""``crosscheck replay``: re-run a repro bundle's backends and say whether each gradient reproduces bit for
bit. A bundle is a file someone sent: its import strings are code, and replaying runs them."""

from __future__ import annotations

import argparse
from typing import Any

from crosscheck._cli.common import EXIT_FAIL, EXIT_OK, UsageError, escape, make_console


def register(subparsers: Any) -> None:
    """Add ``replay`` to the ``crosscheck`` subparsers."""
    parser = subparsers.add_parser(
        "replay",
        help="re-run a repro bundle and say whether each gradient reproduces bit for bit",
        description="Re-run the backends of a bundle written by `crosscheck run --save-bundle`.",
    )
    parser.add_argument("bundle", metavar="PATH", help="the .npz bundle")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Replay the bundle, print a row per backend; exit 0 when every replayed gradient is bit for bit."""
    from rich.table import Table

    from crosscheck._engine.replay import replay
    from crosscheck._report.bundle import load_bundle

    try:
        bundle = load_bundle(args.bundle)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    rows = replay(bundle)
    case = bundle["meta"]["report"]["case"]
    title = f"replay of {args.bundle}: " + ", ".join(
        f"{k}={v}" for k, v in case.items() if not k.endswith("sha256")
    )
    table = Table(title=escape(title), title_justify="left")  # the case is the bundle's text
    for column in ("backend", "spec", "result", "detail"):
        table.add_column(column, overflow="fold")  # names and specs wrap, never end in "…"
    for row in rows:
        cells = (row["backend"], str(row["spec"]), row["status"], row.get("detail", ""))
        table.add_row(*(escape(cell) for cell in cells))  # an error may quote `pip install 'x[extra]'`
    console = make_console()
    console.print(table)
    replayed = [row for row in rows if row["spec"] is not None]
    same = all(row["status"] == "bit for bit" for row in replayed)
    console.print("REPRODUCED bit for bit" if same and replayed else "NOT REPRODUCED", highlight=False)
    return EXIT_OK if same and replayed else EXIT_FAIL
