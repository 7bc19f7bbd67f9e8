"""``crosscheck ste``: the straight-through-estimator stack against its surrogate oracle, and the naive
finite difference of the rounded loss beside it, explained."""

from __future__ import annotations

import argparse
from typing import Any

from crosscheck._cli.common import EXIT_FAIL, EXIT_OK, UsageError
from crosscheck._cli.options import add_case_options, check_at_least
from crosscheck._cli.outputs import check_writes, write_json
from crosscheck._cli.terminal import make_console
from crosscheck._workloads.ste_stack import WHY_SURROGATE


def register(subparsers: Any) -> None:
    """Add ``ste`` to the ``crosscheck`` subparsers."""
    ste = subparsers.add_parser(
        "ste",
        help="cross-check the straight-through-estimator stack (ste-stack) against its surrogate oracle",
        description="Cross-check the gradients of the ReLU stack whose activations are rounded to 1/8 "
        "straight-through (y + stop_gradient(round(8y)/8 - y)): JAX and PyTorch against a finite-"
        "difference oracle of the surrogate, beside a naive finite difference of the rounded loss.",
    )
    add_case_options(ste, defaults={"layers": 4, "batch": 8, "dim": 8, "dtype": "float32", "seed": 0})
    ste.add_argument(
        "--backend", action="append", choices=("jax", "torch"), help="repeatable (default: both)"
    )
    ste.add_argument("--json", metavar="PATH", help="write the report here")
    ste.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run the check, print it, write ``--json``; exit 0 when every backend agrees with the surrogate
    oracle."""
    from crosscheck._evidence.ste import check_ste

    for option in ("layers", "batch", "dim"):
        check_at_least(f"--{option}", getattr(args, option), expected="a positive integer")
    check_at_least("--seed", args.seed, least=0, expected="a non-negative integer")
    check_writes(args, {"--json": "json"})  # before a backend runs: it may change directory
    try:
        report = check_ste(
            seed=args.seed,
            dtype=args.dtype,
            backends=tuple(args.backend or ("jax", "torch")),
            layers=args.layers,
            batch=args.batch,
            dim=args.dim,
        )
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc
    if args.json:
        write_json(args.json, report.to_dict())
    render(report, make_console())
    return EXIT_OK if report.passed else EXIT_FAIL


def render(ste, console) -> None:
    """The workload report (backends against the surrogate oracle), then the naive check and the why."""
    ste.report.render(console)
    naive = ste.naive
    diff = naive.get("max_abs_diff_from_reference")
    against = f", {diff:.3g} away from the surrogate oracle at worst" if diff is not None else ""
    console.print(
        f"naive finite difference of the rounded loss: {naive['zero_entries']} of {naive['total']} "
        f"entries are 0 (largest |value| {naive['max_abs']:.3g}){against}",
        highlight=False,
        markup=False,
    )
    console.print(f"why: {naive['why']}.", highlight=False, markup=False)
    console.print(f"oracle: {WHY_SURROGATE}.", highlight=False, markup=False)
    console.print(
        f"({naive['rounded_activations']} activations were moved by the rounding at this point.)",
        highlight=False,
        markup=False,
    )
