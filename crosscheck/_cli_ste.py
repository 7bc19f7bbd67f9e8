"""``crosscheck ste``: the straight-through-estimator stack against its surrogate oracle, and the naive
finite difference of the rounded loss beside it, explained."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ._cli import EXIT_FAIL, EXIT_OK, UsageError, _check_output, _console


def add_parser(sub) -> None:
    """Register ``ste`` on the ``crosscheck`` sub-command parsers."""
    from ._case import DTYPES

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
    """Run the check, print it, write ``--json``; exit 0 when every backend agrees with the oracle."""
    from ._ste import check_ste

    for option in ("layers", "batch", "dim"):
        if getattr(args, option) < 1:
            raise UsageError(f"`--{option}` must be a positive integer, found {getattr(args, option)}.")
    if args.seed < 0:
        raise UsageError(f"`--seed` must be a non-negative integer, found {args.seed}.")
    _check_output(args.json)
    try:
        import scipy.differentiate  # noqa: F401
    except ImportError as exc:
        raise UsageError(
            "`crosscheck ste` needs scipy >= 1.15 (scipy.differentiate), which is not installed: "
            "pip install 'crosscheck[ste]'."
        ) from exc
    report = check_ste(
        seed=args.seed,
        dtype=args.dtype,
        backends=tuple(args.backend or ("jax", "torch")),
        layers=args.layers,
        batch=args.batch,
        dim=args.dim,
    )
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
        except OSError as exc:
            raise UsageError(f"cannot write `--json` {args.json}: {exc.strerror or exc}") from exc
    render(report, _console())
    return EXIT_OK if report.passed else EXIT_FAIL


def render(report, console) -> None:
    """One table (each backend and the naive check against the surrogate oracle), then the why."""
    from rich.table import Table

    title = ", ".join(f"{k}={v}" for k, v in report.case.items())
    t = Table(title=f"crosscheck ste: {title}", title_justify="left")
    for column in (
        "gradient",
        "vs",
        "max abs diff",
        "worst (l,r,c)",
        "tolerance there",
        "unjudgeable",
        "verdict",
    ):
        t.add_column(column, justify="left" if column in ("gradient", "vs") else "right")
    for c in report.comparisons:
        tol = sum((c.worst_terms or {}).values())
        t.add_row(
            c.backend,
            c.reference,
            "-" if c.max_abs_diff is None else f"{c.max_abs_diff:.3g}",
            ",".join(map(str, c.worst_index or ())),
            f"{tol:.3g}",
            f"{c.unjudgeable}/{c.total}",
            "[green]ok[/green]" if c.passed else "[red]FAIL[/red]",
        )
    naive = report.naive
    t.add_row(
        "naive FD of the rounded loss",
        "numpy-fd (surrogate)",
        f"{naive['max_abs_diff_from_surrogate_oracle']:.3g}",
        "",
        "",
        "",
        f"differs ({naive['zero_entries']}/{naive['total']} zeros)",
    )
    console.print(t)
    for c in report.comparisons:
        if not c.passed:
            console.print(f"[bold]{c.backend} vs {c.reference}[/bold]", highlight=False)
            console.print(c.message, highlight=False, markup=False)
    console.print(
        f"oracle: {report.oracle['method']}; {report.oracle['why']}.", highlight=False, markup=False
    )
    console.print(f"naive: {naive['method']}; {naive['why']}.", highlight=False, markup=False)
    for name, error in report.failed.items():
        console.print(f"{name}: {error}", highlight=False, markup=False)
    verdict = "[green]PASSED[/green]" if report.passed else "[red]FAILED[/red]"
    console.print(
        f"{verdict}: {len(report.comparisons)} backend(s) vs the surrogate oracle; "
        f"{report.oracle['rounded_activations']} activations rounded, "
        f"{report.oracle['unconverged_entries']} oracle entries unconverged (unjudgeable)",
        highlight=False,
    )
