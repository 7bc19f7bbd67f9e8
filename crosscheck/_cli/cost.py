"""``crosscheck cost``: flops of forward, gradient, HVP and full Hessian of the stack, with ratios."""

from __future__ import annotations

import argparse
from typing import Any

from crosscheck._cli.common import EXIT_OK, UsageError
from crosscheck._cli.options import add_case_options, check_at_least
from crosscheck._cli.outputs import check_writes, write_json
from crosscheck._cli.terminal import escape, make_console

COLUMNS = {
    "analytic": "analytic (matmuls)",
    "analytic, checkpointed": "analytic + recompute",
    "jax": "jax (XLA, unrolled)",
    "jax, rolled scan": "jax (XLA, rolled scan)",
    "torch": "torch (FlopCounterMode)",
}


def register(subparsers: Any) -> None:
    """Add ``cost`` to the ``crosscheck`` subparsers."""
    cost = subparsers.add_parser(
        "cost",
        help="flops of forward, gradient, HVP and (small d) full Hessian, analytic vs JAX vs PyTorch",
        description="Flops of the stack's forward, gradient, Hessian-vector product and (P = L d**2 "
        "at most --hessian-limit) full Hessian: analytic matmul count, XLA's cost analysis, torch's "
        "FlopCounterMode; with the ratios and why they are what they are.",
    )
    add_case_options(cost, defaults={"layers": 8, "batch": 8, "dim": 8})
    cost.add_argument(
        "--hessian-limit",
        type=int,
        default=1024,
        help="count the full Hessian only when P = L d**2 is at most this (default 1024)",
    )
    cost.add_argument("--json", metavar="PATH", help="write the counts and ratios here")
    cost.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Compute and print the table (and write ``--json``)."""
    from crosscheck._evidence.cost import cost_table

    for option in ("layers", "dim", "batch"):
        check_at_least(f"--{option}", getattr(args, option), expected="a positive integer")
    if args.hessian_limit < 0:
        raise UsageError(f"`--hessian-limit` must be >= 0, found {args.hessian_limit}.")
    check_writes(args, {"--json": "json"})  # before a backend runs: it may change directory
    data = cost_table(args.layers, args.batch, args.dim, hessian_limit=args.hessian_limit)
    write_json(args.json, data)
    render(data, make_console())
    return EXIT_OK


def render(data: dict, console) -> None:
    """The counts table, the ratios table, one line of why per ratio and where the counts differ."""
    from rich.table import Table

    counts = data["counts"]
    title = (
        f"crosscheck cost: L={data['layers']}, N={data['batch']}, d={data['dim']}, "
        f"P={data['parameters']} parameters (flops)"
    )
    t = Table(title=title, title_justify="left")
    t.add_column("program")
    for source in counts:
        t.add_column(escape(COLUMNS.get(source, source)), justify="right")
    for quantity in ("forward", "gradient", "hvp", "hessian"):
        t.add_row(quantity, *[_number(c.get(quantity)) for c in counts.values()])
    console.print(t)
    r = Table(title="ratios", title_justify="left")
    r.add_column("ratio")
    for source in counts:
        r.add_column(escape(COLUMNS.get(source, source)), justify="right")
    for name, by_source in data["ratios"].items():
        r.add_row(name, *[("-" if by_source[s] is None else f"{by_source[s]:.3g}") for s in counts])
    console.print(r)
    for name, why in data["why"].items():
        console.print(f"{name}: {why}", highlight=False, markup=False)
    console.print("Where the counts differ:", highlight=False)
    for line in data["differences"]:
        console.print(f"- {line}", highlight=False, markup=False)
    for name, error in data["unavailable"].items():
        console.print(f"{name}: unavailable: {error}", highlight=False, markup=False)


def _number(value) -> str:
    return "-" if value is None else f"{value:,.0f}"
