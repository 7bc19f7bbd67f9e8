"""``crosscheck run`` and ``crosscheck explain``: cross-check one case (the stack's, or another workload's).

Exit status: 0 every candidate agrees; 1 a disagreement, a non-finite gradient or a failed backend;
2 a usage or input error.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from crosscheck._backends import BUILTINS, DEFAULTS, install_hint
from crosscheck._cli.common import UsageError
from crosscheck._cli.options import (
    add_backend_option,
    add_case_options,
    add_placement_options,
    add_tolerance_options,
    case_options_given,
    check_tolerances,
    placement_options,
)
from crosscheck._cli.outputs import (
    check_plot_path,
    check_writes,
    write_file,
    write_reports,
)
from crosscheck._cli.quiet import no_warnings
from crosscheck._cli.terminal import make_console, progress_display, render_report
from crosscheck._engine.quantity import QUANTITIES
from crosscheck._errors import one_line

if TYPE_CHECKING:  # the engine is imported when a check runs
    from crosscheck._engine.request import Request

COMMANDS = {
    "run": "cross-check one case",
    "explain": "cross-check one case and say, layer by layer, where a disagreement starts",
}


def register(subparsers: Any) -> None:
    """Add ``run`` and ``explain`` (``run --explain``) to the ``crosscheck`` subparsers."""
    for command, help_text in COMMANDS.items():
        description = help_text[0].upper() + help_text[1:] + "."
        parser = subparsers.add_parser(command, help=help_text, description=description)
        _add_inputs(parser)
        checking = parser.add_argument_group("checking")
        _add_checking(checking)
        checking.add_argument(
            "--explain",
            action="store_true",
            help="say layer by layer where a disagreement starts (forward or backward pass)",
        )
        _add_output(parser.add_argument_group("output"))
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
        "backend to check (repeatable): a built-in name, an entry-point name or package.module:attribute "
        f"(default: {', '.join(DEFAULTS)}, less the reference; the variants "
        f"{', '.join(b for b in BUILTINS if b not in DEFAULTS)} only when named; a workload: each of its "
        "implementations)",
    )
    check.add_argument(
        "--reference",
        metavar="NAME",
        help="backend the others are compared with (default numpy-fd, the oracle; with --quantity output, "
        "torch: PyTorch's forward, the only reference a forward check takes)",
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
    _add_containment(check)
    add_placement_options(check)
    _add_oracle(check)


def _add_containment(check: Any) -> None:
    """--isolate and --timeout: what a crashing or hanging backend can do to the run."""
    check.add_argument(
        "--isolate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run every backend in its own worker process, built-ins too: a crash, os._exit or hang is "
        "that backend's failure and the others are still compared (default: only import strings and "
        "plugins, and a --workload given as an import string, whose whole check runs in one worker; "
        "--no-isolate: none, all in this process)",
    )
    check.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="fail a backend call that takes longer than this (with --isolate its worker is stopped; a "
        "contained workload's worker is stopped when its code runs longer; default: no limit)",
    )


def _add_oracle(check: Any) -> None:
    """How the reference judges: --oracle-mode, --quantity, --directions."""
    check.add_argument(
        "--oracle-mode",
        choices=("auto", "full", "outputs", "screen"),
        default="auto",
        help="full: the oracle judges every entry; outputs (the stack's gradient): every entry too, from "
        "differences in each layer's outputs, seconds where full takes hours; screen: random directional "
        "derivatives per layer (per parameter tensor of a workload), then every entry of one that fails "
        "them, within a budget (for --quantity grad or hvp), and the PASSED line says how many entries "
        "were judged one by one; auto (default): the stack's gradient full while it is cheap, else "
        "outputs while it fits its budget and memory, else screen; otherwise screen when the full oracle "
        "is costly",
    )
    check.add_argument(
        "--quantity",
        choices=tuple(QUANTITIES),
        default="grad",
        help="what to cross-check: grad (default), hvp, the Hessian-vector product along a direction "
        "made from --seed (candidates need an hvp(weights, x, v) method), update, the parameters after "
        "each optimizer step of a crosscheck.Train workload, or output, the forward check of a "
        "crosscheck.Port: the model's and every module's output against PyTorch's, with the same measured "
        "tolerances and localisation, no gradient and no oracle (seconds; a bug only in the backward pass "
        "is not seen)",
    )
    check.add_argument(
        "--steps",
        type=int,
        metavar="K",
        help="optimizer steps per side with --quantity update (default: the Train workload's)",
    )
    check.add_argument(
        "--directions",
        type=int,
        default=4,
        metavar="K",
        help="random directions per layer (per group of tensors of a workload) when screening (default 4)",
    )
    check.add_argument(
        "--budget",
        type=float,
        metavar="SECONDS",
        help="the check's wall time, its work around the model oracle (of a crosscheck.Workload or Port) "
        "counted: the oracle stops differencing once the check's seconds and a reserve for the work after "
        "it (a quarter of the budget at most) reach it; the tensors not judged then are not checked and "
        "the run fails; the report says how much was judged and what finishing costs (default: 600)",
    )


def _add_output(out: Any) -> None:
    out.add_argument("--json", metavar="PATH", help="write the JSON report here")
    out.add_argument("--junit", metavar="PATH", help="write a JUnit XML report here")
    out.add_argument(
        "--plot",
        metavar="PATH",
        help="write a PNG heatmap of each candidate's error in units of its tolerance, for every parameter "
        "of two or more axes (the stack's: a panel per layer); needs matplotlib (the plot extra)",
    )
    out.add_argument(
        "--save-bundle",
        metavar="PATH",
        help="when the run fails, write a .npz that reproduces it (inputs, every gradient, the case, "
        "the environment); `crosscheck replay PATH` re-runs it",
    )
    out.add_argument(
        "--quiet",
        action="store_true",
        help='print only the verdict line and the verdict\'s caveats ("check in float32 too"); other '
        "libraries' warnings and the progress are not shown",
    )


def run(args: argparse.Namespace) -> int:
    """Run one case of ``--workload`` (default: the stack): the options parsed into one request for the
    engine's ``execute`` (which loads the workload once, sets the options it takes and refuses the
    others, and runs a workload given as an import string in a worker process unless ``--no-isolate``),
    then the report rendered and written."""
    from crosscheck._engine.execute import execute

    _check_plot_and_bundle(args)  # before the workload's code, or any backend's, runs
    _check_budget(args)
    console = make_console()
    with progress_display(quiet=args.quiet) as progress, no_warnings(args.quiet):
        request = _request(args, progress)
        try:
            report = execute(request)
        except (ValueError, TypeError) as exc:
            raise UsageError(str(exc)) from exc
    write_reports(args, report)
    _write_plot_and_bundle(args, report)
    return render_report(report, console, quiet=args.quiet)


def _request(args: argparse.Namespace, progress: Any) -> Request:
    """The request of the command line's options (those the user gave set on the workload; ``--weights``
    and ``--x`` read here), its notes on stderr before the run starts."""
    from crosscheck._engine.request import Request
    from crosscheck._records import Execution, Oracle, Slack

    check_tolerances(args)
    _check_outputs_of_quantity(args)
    workload_options = _workload_options(args)
    placement = placement_options(args)
    try:
        isolate = "auto" if args.isolate is None else bool(args.isolate)
        return Request(
            workload=args.workload,
            workload_options=workload_options,
            backends=args.backend,
            reference=args.reference,
            dtype=args.dtype,
            seed=args.seed,
            quantity=args.quantity,
            slack=Slack.of(args.rtol, args.atol),
            strict=args.strict,
            oracle=Oracle(args.oracle_mode, args.directions, args.budget),
            execution=Execution(repeat=args.repeat, isolate=isolate, timeout=args.timeout, **placement),
            progress=progress,
            front="cli",
            announce=_announce,
            plot=bool(args.plot),
        )
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc


def _workload_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options the user gave that set the workload (the stack's knobs, ``--weights/--x`` read,
    ``--explain``, ``--steps``); the engine refuses those the workload does not take."""
    from crosscheck._engine.request import check_arrays

    given = {k: v for k, v in case_options_given(args).items() if k not in ("dtype", "seed")}
    arrays = {k: getattr(args, k) for k in ("weights", "x") if getattr(args, k) is not None}
    given.update(arrays)
    if args.explain:
        given["explain"] = True
    if args.steps is not None:
        given["steps"] = args.steps
    if arrays:
        try:  # the rule the API's arrays follow, before either file is read
            check_arrays(arrays, case_options_given(args), front="cli")
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        given.update(_arrays(args))
    return given


#: A case estimated to need more than this says so on stderr before it starts.
MEMORY_NOTE_BYTES = 2**30


def _announce(outlook: Any) -> None:
    """Before a run starts: how much memory a large case needs (the estimate that refuses one that
    cannot fit), and the oracle's cost of a run that will take long."""
    _memory_note(outlook.memory)
    _cost_note(outlook)


def _memory_note(parts: dict[str, int]) -> None:
    from crosscheck._files import available_memory, format_bytes

    if sum(parts.values()) > MEMORY_NOTE_BYTES:
        print(
            f"crosscheck: this case needs about {format_bytes(sum(parts.values()))} of memory "
            f"({format_bytes(available_memory())} available)",
            file=sys.stderr,
        )


def _cost_note(outlook: Any) -> None:
    """The oracle's cost (tensors, planned evaluations, rough time), when its estimate says it is long."""
    if outlook.cost is not None:
        print(f"crosscheck: {outlook.cost}", file=sys.stderr)


def _arrays(args: argparse.Namespace) -> dict[str, Any]:
    """The arrays of ``--weights`` and ``--x``."""
    from crosscheck._files import load_array

    try:
        return {
            "weights": load_array(args.weights, name="weights", ndim=3),
            "x": load_array(args.x, name="x", ndim=2),
        }
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _check_outputs_of_quantity(args: argparse.Namespace) -> None:
    """Outputs a quantity cannot make. The CLI's only: the API writes no plot and no bundle."""
    if args.quantity == "update" and (args.save_bundle or args.plot):
        raise UsageError(UPDATE_REFUSES["--save-bundle" if args.save_bundle else "--plot"])
    if args.quantity in ("hvp", "output") and (args.save_bundle or args.plot):
        raise UsageError(
            f"`--save-bundle` and `--plot` are not available with `--quantity {args.quantity}` yet."
        )


#: Why ``--quantity update`` refuses an output (one line each).
UPDATE_REFUSES = {
    "--save-bundle": "`--save-bundle` is not available with `--quantity update`: a bundle holds arrays, not "
    "the optimizer factories a training needs; the command itself reproduces it (the workload, --seed "
    "and --steps), and `--json` keeps every step's numbers.",
    "--plot": "`--plot` is not available with `--quantity update`: its heatmaps have no step axis; "
    "`--json` keeps every step's row.",
}


def _check_plot_and_bundle(args: argparse.Namespace) -> None:
    """Every output can be written (the one rule, ``check_writes``: a file, not an input of the run nor
    the source of a backend or workload it loads, not another output's) and is made absolute, so that
    code that changes the working directory cannot move it; a plot's image type known; matplotlib
    there; all before any work."""
    plot = args.plot  # as given: its messages name the path the user wrote
    outputs = {"--json": "json", "--junit": "junit", "--plot": "plot", "--save-bundle": "save_bundle"}
    specs = [*(args.backend or []), args.reference, args.workload]
    check_writes(args, outputs, specs=specs, inputs={"--weights": args.weights, "--x": args.x})
    if plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError as exc:
            raise UsageError(
                f"`--plot` needs matplotlib, which is not installed: {install_hint('plot')}."
            ) from exc
        check_plot_path(plot)


def _check_budget(args: argparse.Namespace) -> None:
    """``--budget``: a positive, finite number of seconds (argparse refused what is not a number); the
    rule of ``crosscheck.Oracle``, spelled as an option."""
    from crosscheck._records import check_budget

    if args.budget is not None:
        try:
            check_budget(args.budget, front="cli")
        except ValueError as exc:
            raise UsageError(str(exc)) from exc


def _write_plot_and_bundle(args: argparse.Namespace, report: Any) -> None:
    """Write ``--plot`` and (when the run failed) ``--save-bundle``; the bundle records ``--workload``
    as given, so that ``crosscheck replay`` loads the same workload again."""
    if args.plot:
        _write_plot(args.plot, report)
    if args.save_bundle and not report.passed and report.inputs is None:  # a contained run that halted
        print("crosscheck: --save-bundle: the run stopped before it had inputs: no bundle", file=sys.stderr)
    elif args.save_bundle and not report.passed:
        from crosscheck._report.bundle import save_bundle

        write_file(
            args.save_bundle, "--save-bundle", lambda path: save_bundle(report, path, workload=args.workload)
        )
        print(f"crosscheck: wrote the repro bundle {args.save_bundle}", file=sys.stderr)


def _write_plot(path: str, report: Any) -> None:
    """The PNG, and a line on stderr for what it cannot show (parameters of one axis)."""
    from crosscheck._report.plot import plottable, write_plot

    shown, left_out = plottable(report)
    write_file(path, "--plot", lambda p: write_plot(report, p))  # writes nothing when nothing is shown
    if left_out:
        names = ", ".join(dict.fromkeys(str(c.parameter or c.backend) for c in left_out))
        print(f"crosscheck: --plot: parameters of one axis have no image: {one_line(names)}", file=sys.stderr)
    screened = [c.backend for c in report.comparisons if "ratio" not in c.arrays and c.screening]
    if screened:
        names = ", ".join(dict.fromkeys(screened))
        print(
            "crosscheck: --plot: screened, every direction agrees, no entry checked one by one, so no "
            f"image: {one_line(names)}",
            file=sys.stderr,
        )
    if not shown:
        print("crosscheck: --plot: no comparison to draw, so no plot was written", file=sys.stderr)
