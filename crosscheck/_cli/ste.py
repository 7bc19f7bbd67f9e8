"""``crosscheck ste``: the straight-through-estimator stack against its surrogate oracle, and the naive
finite difference of the rounded loss beside it, explained."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from crosscheck._cli.main import EXIT_FAIL, EXIT_OK, UsageError, _check_output, _console
from crosscheck._workloads.ste import WHY_SURROGATE


def add_parser(sub) -> None:
    """Register ``ste`` on the ``crosscheck`` sub-command parsers."""
    from crosscheck._workloads.stack.case import DTYPES

    ste = sub.add_parser(
        "ste",
        help="cross-check the straight-through-estimator stack (ste-stack) against its surrogate oracle",
        description="Cross-check the gradients of the ReLU stack whose activations are rounded to 1/8 "
        "straight-through (y + stop_gradient(round(8y)/8 - y)): JAX and PyTorch against a finite-"
        "difference oracle of the surrogate, beside a naive finite difference of the rounded loss.",
    )
    ste.add_argument("--layers", type=int, default=4, help="number of layers L (default 4)")
    ste.add_argument("--batch", type=int, default=8, help="rows N of x (default 8)")
    ste.add_argument("--dim", type=int, default=8, help="width d (default 8)")
    ste.add_argument("--dtype", choices=DTYPES, default="float32", help="default float32")
    ste.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ste.add_argument(
        "--backend", action="append", choices=("jax", "torch"), help="repeatable (default: both)"
    )
    ste.add_argument("--json", metavar="PATH", help="write the report here")


def run(args: argparse.Namespace) -> int:
    """Run the check, print it, write ``--json``; exit 0 when every backend agrees with the surrogate
    oracle."""
    from crosscheck._tools.ste import check_ste

    for option in ("layers", "batch", "dim"):
        if getattr(args, option) < 1:
            raise UsageError(f"`--{option}` must be a positive integer, found {getattr(args, option)}.")
    if args.seed < 0:
        raise UsageError(f"`--seed` must be a non-negative integer, found {args.seed}.")
    _check_output(args.json)
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
        try:
            Path(args.json).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
        except OSError as exc:
            raise UsageError(f"cannot write `--json` {args.json}: {exc.strerror or exc}") from exc
    render(report, _console())
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
