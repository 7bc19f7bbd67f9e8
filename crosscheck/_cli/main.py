"""The command line: parse, call the driver, render. No numerics here.

Exit status: 0 every candidate agrees; 1 a disagreement, a non-finite gradient or a failed backend;
2 a usage or input error (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from crosscheck._cli import list as _cli_list
from crosscheck._cli import sweep as _cli_sweep
from crosscheck._cli.common import (
    EXIT_FAIL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    Parser,
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
    write_json,
    write_junit,
    write_reports,
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="crosscheck", description="Cross-check gradients across backends.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command, help_text in (
        ("run", "cross-check one case"),
        ("explain", "cross-check one case and say, layer by layer, where a disagreement starts"),
    ):
        _add_run_options(
            sub.add_parser(command, help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
        )
    matrix = sub.add_parser(
        "matrix",
        help="run the CI matrix of cases (nox -s crosscheck)",
        description="Run the fixed CI matrix of cases and print one summary table.",
    )
    add_backend_option(matrix, "backend to check (repeatable; default: every built-in)")
    matrix.add_argument("--strict", action="store_true", help="fail on unjudgeable entries")
    matrix.add_argument("--json", metavar="PATH", help="write every case's JSON report here (a list)")
    matrix.add_argument("--junit", metavar="PATH", help="write a JUnit XML report here (a suite a case)")
    replay = sub.add_parser(
        "replay",
        help="re-run a repro bundle and say whether each gradient reproduces bit for bit",
        description="Re-run the backends of a bundle written by `crosscheck run --save-bundle`.",
    )
    replay.add_argument("bundle", metavar="PATH", help="the .npz bundle")
    from crosscheck._cli import cost as _cli_cost
    from crosscheck._cli import ste as _cli_ste
    from crosscheck._cli.memory import add_parsers

    add_parsers(sub)  # inspect, memory
    _cli_list.add_parser(sub)
    _cli_sweep.add_parser(sub)
    _cli_cost.add_parser(sub)
    _cli_ste.add_parser(sub)
    return parser


def _add_run_options(run: argparse.ArgumentParser) -> None:
    case = run.add_argument_group("case (generated inputs)")
    case.add_argument(
        "--workload",
        metavar="NAME_OR_IMPORT_STRING",
        help="what to check: a built-in workload (default stack) or package.module:attribute naming a "
        "crosscheck.Workload; another workload takes only --dtype and --seed of these options",
    )
    add_case_options(case)
    own = run.add_argument_group("your own inputs")
    own.add_argument("--weights", metavar="FILE", help="weights (L, d, d) as .npy or .npz")
    own.add_argument("--x", metavar="FILE", help="inputs (N, d) as .npy or .npz")
    check = run.add_argument_group("checking")
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
        "--oracle-mode",
        choices=("auto", "full", "screen"),
        default="auto",
        help="full: the oracle judges every entry; screen: random directional derivatives per layer, then "
        "every entry of a layer that fails them; auto (default): screen when the full oracle is costly",
    )
    check.add_argument(
        "--quantity",
        choices=("grad", "hvp"),
        default="grad",
        help="what to cross-check: grad (default) or hvp, the Hessian-vector product along a direction "
        "made from --seed (candidates need an hvp(weights, x, v) method)",
    )
    check.add_argument(
        "--directions", type=int, default=4, help="random directions per layer when screening (default 4)"
    )
    out = run.add_argument_group("output")
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
    run.add_argument(
        "--explain",
        action="store_true",
        help="say layer by layer where a disagreement starts (forward or backward pass)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``crosscheck`` and ``python -m crosscheck``; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
        if args.command == "explain":
            args.explain = True
        from crosscheck._cli.memory import run_inspect, run_memory

        commands = {"matrix": _matrix, "replay": _replay, "run": _run, "explain": _run}
        commands.update(inspect=run_inspect, memory=run_memory)
        commands.update(list=_cli_list.command, sweep=_cli_sweep.command)
        commands.update(cost=_cost, ste=_ste)
        return commands[args.command](args)
    except UsageError as exc:
        # One line, whatever the message (a user's factory may raise a multi-line error).
        print("crosscheck: error: " + " ".join(str(exc).split()), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("crosscheck: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _run(args: argparse.Namespace) -> int:
    from crosscheck._engine.run import run

    if args.workload is not None:
        from crosscheck._cli.workload import run_workload_command

        status = run_workload_command(args)  # None: the stack, below
        if status is not None:
            return status
    kwargs = case_options_given(args)
    if (args.weights is None) != (args.x is None):
        raise UsageError(
            "`--weights` and `--x` must be given together; found only "
            f"`--{'weights' if args.x is None else 'x'}`."
        )
    if args.weights is not None:
        given = [f"--{k}" for k in kwargs]
        if given:
            raise UsageError(
                f"`{given[0]}` cannot be combined with `--weights/--x`: the arrays determine the case."
            )
        kwargs.update(_load_arrays(args.weights, args.x))
    check_tolerances(args)
    check_output(args.json)
    check_output(args.junit, "--junit")
    check_output(args.save_bundle, "--save-bundle")
    if args.directions != 4 and (args.oracle_mode == "full" or args.quantity == "hvp"):
        which = "`--oracle-mode full`" if args.oracle_mode == "full" else "`--quantity hvp`"
        raise UsageError(
            f"`--directions` applies to screening (`--oracle-mode screen` or `auto`); {which} never screens."
        )
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
    console = make_console()
    try:
        with progress_display() as progress:
            report = run(
                backends=args.backend,
                reference=args.reference,
                rtol=args.rtol,
                atol=args.atol,
                strict=args.strict,
                oracle_mode=args.oracle_mode,
                directions=args.directions,
                explain=args.explain,
                progress=progress,
                quantity=args.quantity,
                **kwargs,
            )
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc
    write_reports(args, report)
    if args.plot:
        from crosscheck._report.plot import write_plot

        write_file(args.plot, "--plot", lambda path: write_plot(report, path))
    if args.save_bundle and not report.passed:
        from crosscheck._report.bundle import save_bundle

        write_file(args.save_bundle, "--save-bundle", lambda path: save_bundle(report, path))
        print(f"crosscheck: wrote the repro bundle {args.save_bundle}", file=sys.stderr)
    return render_report(report, console, quiet=args.quiet)


def _matrix(args: argparse.Namespace) -> int:
    from crosscheck._sweep import matrix as _matrix_module
    from crosscheck._sweep.matrix import render_matrix, run_matrix

    check_output(args.json)
    check_output(args.junit, "--junit")
    console = make_console()
    try:
        with progress_display() as progress:
            rows = run_matrix(
                _matrix_module.CASES, backends=args.backend, strict=args.strict, progress=progress
            )
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc
    render_matrix(rows, console)
    from crosscheck._report.junit import case_name

    write_junit(args.junit, [(case_name(row.report), row.report) for row in rows])
    if args.json:
        write_json(args.json, [dict(row.report.to_dict(), known_answer=row.known_answer) for row in rows])
    return EXIT_OK if all(row.passed for row in rows) else EXIT_FAIL


def _cost(args: argparse.Namespace) -> int:
    from crosscheck._cli.cost import run

    return run(args)


def _ste(args: argparse.Namespace) -> int:
    from crosscheck._cli.ste import run

    return run(args)


def _replay(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from crosscheck._report.bundle import load_bundle, replay

    try:
        bundle = load_bundle(args.bundle)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    rows = replay(bundle)
    case = bundle["meta"]["report"]["case"]
    table = Table(
        title=f"replay of {args.bundle}: "
        + ", ".join(f"{k}={v}" for k, v in case.items() if not k.endswith("sha256")),
        title_justify="left",
    )
    for column in ("backend", "spec", "result", "detail"):
        table.add_column(column)
    for row in rows:
        cells = (row["backend"], str(row["spec"]), row["status"], row.get("detail", ""))
        table.add_row(*(escape(cell) for cell in cells))  # an error may quote `pip install 'x[extra]'`
    console = make_console()
    console.print(table)
    replayed = [row for row in rows if row["spec"] is not None]
    same = all(row["status"] == "bit for bit" for row in replayed)
    console.print("REPRODUCED bit for bit" if same and replayed else "NOT REPRODUCED", highlight=False)
    return EXIT_OK if same and replayed else EXIT_FAIL


def _load_arrays(weights_path: str, x_path: str) -> dict:
    from crosscheck._workloads.stack.case import check_inputs, load_array

    try:
        weights = load_array(weights_path, name="weights")
        x = load_array(x_path, name="x")
        weights, x = check_inputs(weights, x)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return {"weights": weights, "x": x}
