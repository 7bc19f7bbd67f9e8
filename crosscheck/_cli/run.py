"""``crosscheck run`` and ``crosscheck explain``: cross-check one case (the stack's, or another workload's).

Exit status: 0 every candidate agrees; 1 a disagreement, a non-finite gradient or a failed backend;
2 a usage or input error.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from crosscheck._cli.common import (
    UsageError,
    add_backend_option,
    add_case_options,
    add_tolerance_options,
    case_options_given,
    check_output,
    check_tolerances,
    make_console,
    progress_display,
    render_report,
    write_file,
    write_reports,
)

COMMANDS = {
    "run": "cross-check one case",
    "explain": "cross-check one case and say, layer by layer, where a disagreement starts",
}

#: Options only the stack takes: (attribute, how the user wrote it, its default).
STACK_ONLY = (
    ("layers", "--layers", None),
    ("batch", "--batch", None),
    ("dim", "--dim", None),
    ("init", "--init", None),
    ("scale", "--scale", None),
    ("weights", "--weights", None),
    ("x", "--x", None),
    ("plot", "--plot", None),
    ("save_bundle", "--save-bundle", None),
    ("explain", "--explain", False),
    ("quantity", "--quantity", "grad"),
)


def register(subparsers: Any) -> None:
    """Add ``run`` and ``explain`` (``run --explain``) to the ``crosscheck`` subparsers."""
    for command, help_text in COMMANDS.items():
        description = help_text[0].upper() + help_text[1:] + "."
        parser = subparsers.add_parser(command, help=help_text, description=description)
        _add_inputs(parser)
        _add_checking(parser.add_argument_group("checking"))
        _add_output(parser.add_argument_group("output"))
        parser.add_argument(
            "--explain",
            action="store_true",
            help="say layer by layer where a disagreement starts (forward or backward pass)",
        )
        parser.set_defaults(handler=run, **({"explain": True} if command == "explain" else {}))


def _add_inputs(parser: argparse.ArgumentParser) -> None:
    case = parser.add_argument_group("case (generated inputs)")
    case.add_argument(
        "--workload",
        metavar="NAME_OR_IMPORT_STRING",
        help="what to check: a built-in workload (default stack) or package.module:attribute naming a "
        "crosscheck.Workload; another workload takes only --dtype and --seed of these options",
    )
    add_case_options(case)
    own = parser.add_argument_group("your own inputs")
    own.add_argument("--weights", metavar="FILE", help="weights (L, d, d) as .npy or .npz")
    own.add_argument("--x", metavar="FILE", help="inputs (N, d) as .npy or .npz")


def _add_checking(check: Any) -> None:
    add_backend_option(
        check,
        "backend to check (repeatable): jax, torch, numpy-fd, "
        "package.module:attribute (default: every built-in but the reference)",
    )
    check.add_argument(
        "--reference",
        default="numpy-fd",
        metavar="NAME",
        help="backend the others are compared with (default numpy-fd, the oracle)",
    )
    add_tolerance_options(check)
    check.add_argument(
        "--strict", action="store_true", help="fail when entries are unjudgeable because of ReLU kinks"
    )
    check.add_argument(
        "--repeat",
        type=int,
        default=2,
        metavar="N",
        help="call each candidate N times: a second result that differs beyond its rounding fails it "
        "(stateful or nondeterministic); 1 turns the check off (default 2)",
    )
    check.add_argument(
        "--oracle-mode",
        choices=("auto", "full", "screen"),
        default="auto",
        help="full: the oracle judges every entry; screen: random directional derivatives per layer (per "
        "parameter tensor of a workload), then every entry of one that fails them (if small); auto "
        "(default): screen when the full oracle is costly",
    )
    check.add_argument(
        "--quantity",
        choices=("grad", "hvp"),
        default="grad",
        help="what to cross-check: grad (default) or hvp, the Hessian-vector product along a direction "
        "made from --seed (candidates need an hvp(weights, x, v) method)",
    )
    check.add_argument(
        "--directions",
        type=int,
        default=4,
        help="random directions per layer (per parameter tensor of a workload) when screening (default 4)",
    )


def _add_output(out: Any) -> None:
    out.add_argument("--json", metavar="PATH", help="write the JSON report here")
    out.add_argument("--junit", metavar="PATH", help="write a JUnit XML report here")
    out.add_argument(
        "--plot",
        metavar="PATH",
        help="write a PNG heatmap per layer of each candidate's error in units of its tolerance "
        "(needs matplotlib: pip install 'crosscheck[plot]')",
    )
    out.add_argument(
        "--save-bundle",
        metavar="PATH",
        help="when the run fails, write a .npz that reproduces it (inputs, every gradient, the case, "
        "the environment); `crosscheck replay PATH` re-runs it",
    )
    out.add_argument("--quiet", action="store_true", help="print only the verdict line")


def run(args: argparse.Namespace) -> int:
    """Run one case: ``--workload``'s when it names another workload than the stack, else the stack's."""
    if args.workload is not None:
        from crosscheck._workloads.registry import load_workload

        try:
            workload = load_workload(args.workload)
        except (ValueError, TypeError) as exc:
            raise UsageError(str(exc)) from exc
        if workload.own_arrays:  # it takes --dtype and --seed only
            return _run_workload(args, workload)
    return _run_stack(args)


def _run_stack(args: argparse.Namespace) -> int:
    from crosscheck._engine.run import run as run_case

    inputs = _stack_inputs(args)
    _check_stack_options(args)
    console = make_console()
    try:
        with progress_display() as progress:
            report = run_case(
                backends=args.backend,
                reference=args.reference,
                rtol=args.rtol,
                atol=args.atol,
                strict=args.strict,
                repeat=args.repeat,
                oracle_mode=args.oracle_mode,
                directions=args.directions,
                explain=args.explain,
                progress=progress,
                quantity=args.quantity,
                **inputs,
            )
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc
    write_reports(args, report)
    _write_plot_and_bundle(args, report)
    return render_report(report, console, quiet=args.quiet)


def _stack_inputs(args: argparse.Namespace) -> dict[str, Any]:
    """The case options given, or the arrays of ``--weights`` and ``--x`` (which determine the case)."""
    kwargs = case_options_given(args)
    if (args.weights is None) != (args.x is None):
        raise UsageError(
            "`--weights` and `--x` must be given together; found only "
            f"`--{'weights' if args.x is None else 'x'}`."
        )
    if args.weights is None:
        return kwargs
    if kwargs:
        first = next(iter(kwargs))
        raise UsageError(
            f"`--{first}` cannot be combined with `--weights/--x`: the arrays determine the case."
        )
    from crosscheck._workloads.stack.case import check_inputs, load_array

    try:
        weights = load_array(args.weights, name="weights")
        x = load_array(args.x, name="x")
        weights, x = check_inputs(weights, x)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return {"weights": weights, "x": x}


def _check_stack_options(args: argparse.Namespace) -> None:
    """Options that contradict each other, and outputs that cannot be written, before any work."""
    check_tolerances(args)
    check_output(args.json)
    check_output(args.junit, "--junit")
    check_output(args.save_bundle, "--save-bundle")
    _check_directions(args)
    if args.quantity == "hvp" and (args.save_bundle or args.plot):
        raise UsageError("`--save-bundle` and `--plot` are not available with `--quantity hvp` yet.")
    check_output(args.plot, "--plot")
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError as exc:
            raise UsageError(
                "`--plot` needs matplotlib, which is not installed: pip install 'crosscheck[plot]'."
            ) from exc


def _check_directions(args: argparse.Namespace) -> None:
    if args.directions != 4 and (args.oracle_mode == "full" or args.quantity == "hvp"):
        which = "`--oracle-mode full`" if args.oracle_mode == "full" else "`--quantity hvp`"
        raise UsageError(
            f"`--directions` applies to screening (`--oracle-mode screen` or `auto`); {which} never screens."
        )


def _write_plot_and_bundle(args: argparse.Namespace, report: Any) -> None:
    if args.plot:
        from crosscheck._report.plot import write_plot

        write_file(args.plot, "--plot", lambda path: write_plot(report, path))
    if args.save_bundle and not report.passed:
        from crosscheck._report.bundle import save_bundle

        write_file(args.save_bundle, "--save-bundle", lambda path: save_bundle(report, path))
        print(f"crosscheck: wrote the repro bundle {args.save_bundle}", file=sys.stderr)


def _run_workload(args: argparse.Namespace, workload: Any) -> int:
    """Run a workload other than the stack: it defines its own arrays (only --dtype and --seed apply)."""
    from crosscheck._engine.run import run as run_case

    for attribute, option, default in STACK_ONLY:
        if getattr(args, attribute) != default:
            raise UsageError(
                f"`{option}` applies to the stack workload only; workload `{workload.name}` defines its "
                f"own arrays (it takes --dtype and --seed)."
            )
    check_tolerances(args)
    check_output(args.json)
    check_output(args.junit, "--junit")
    _check_directions(args)
    options = {k: getattr(args, k) for k in ("seed", "dtype") if getattr(args, k) is not None}
    try:
        with progress_display() as progress:
            report = run_case(
                workload=workload,
                backends=args.backend,
                reference=args.reference,
                rtol=args.rtol,
                atol=args.atol,
                strict=args.strict,
                repeat=args.repeat,
                oracle_mode=args.oracle_mode,
                directions=args.directions,
                progress=progress,
                **options,
            )
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc
    write_reports(args, report)
    return render_report(report, make_console(), quiet=args.quiet)
