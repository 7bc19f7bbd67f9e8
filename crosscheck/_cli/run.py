"""``crosscheck run`` and ``crosscheck explain``: cross-check one case (the stack's, or another workload's).

Exit status: 0 every candidate agrees; 1 a disagreement, a non-finite gradient or a failed backend;
2 a usage or input error.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from crosscheck._backends import BUILTINS, DEFAULTS, ORACLE, install_hint
from crosscheck._cli.common import (
    UsageError,
    absolute_outputs,
    add_backend_option,
    add_case_options,
    add_tolerance_options,
    case_options_given,
    check_outputs,
    check_plot_path,
    check_tolerances,
    make_console,
    progress_display,
    render_report,
    source_files,
    write_file,
    write_reports,
)
from crosscheck._engine.quantity import QUANTITIES
from crosscheck._errors import one_line

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
    _add_containment(check)
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
        choices=("auto", "full", "screen"),
        default="auto",
        help="full: the oracle judges every entry; screen: random directional derivatives per layer (per "
        "parameter tensor of a workload), then every entry of one that fails them, within a budget (for "
        "--quantity grad or hvp); auto (default): screen when the full oracle is costly",
    )
    check.add_argument(
        "--quantity",
        choices=tuple(QUANTITIES),
        default="grad",
        help="what to cross-check: grad (default), hvp, the Hessian-vector product along a direction "
        "made from --seed (candidates need an hvp(weights, x, v) method), or update, the parameters after "
        "each optimizer step of a crosscheck.Train workload",
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
        help="seconds the model oracle (of a --workload that is a crosscheck.Workload or Port) may spend "
        "differencing: the tensors it has not judged when they run out are not checked and the run fails; "
        "the report says how much was judged and what finishing would cost (default: no limit)",
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
    out.add_argument("--quiet", action="store_true", help="print only the verdict line")


def run(args: argparse.Namespace) -> int:
    """Run one case of ``--workload`` (default: the stack), loaded once; the options it takes (the
    stack's ``--layers``, ...) set on it, the others refused. A workload given as an import string (code
    from elsewhere) runs in a worker process (``crosscheck._engine.contain``) unless ``--no-isolate``."""
    from crosscheck._engine import contain

    _check_plot_and_bundle(args)  # before the workload's code, or any backend's, runs
    _check_budget(args)
    console = make_console()
    with progress_display() as progress:
        if contain.wanted(args.workload, _isolate(args)):
            report = _contained(args, progress)
        else:
            report = _report(args, progress)
    write_reports(args, report)
    _write_plot_and_bundle(args, report)
    return render_report(report, console, quiet=args.quiet)


def _isolate(args: argparse.Namespace) -> bool | str:
    return "auto" if args.isolate is None else bool(args.isolate)


def _contained(args: argparse.Namespace, progress: Any) -> Any:
    """The report of a run of ``--workload`` in a worker process (the worker runs ``job``); a worker
    that died or hung is a failed report naming the workload."""
    from crosscheck._engine import contain

    request = {k: v for k, v in vars(args).items() if not callable(v)}
    try:
        return contain.contained(JOB, request, timeout=args.timeout, progress=progress)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc
    except contain.WorkerStopped as stopped:
        dtype, seed = args.dtype or "float32", 0 if args.seed is None else args.seed
        return contain.halted(args.workload, stopped, reference=args.reference, dtype=dtype, seed=seed)


#: What a contained run's worker runs: ``job``, below.
JOB = "crosscheck._cli.run:job"


def job(request: dict[str, Any], *, progress: Any) -> Any:
    """In a contained run's worker: the report of the command line's options ``request``, as in
    process (a usage error a ``ValueError``, the parent's exit 2)."""
    try:
        return _report(argparse.Namespace(**request), progress)
    except UsageError as exc:
        raise ValueError(str(exc)) from exc


def _report(args: argparse.Namespace, progress: Any) -> Any:
    """The report of the options ``args``: the workload loaded and configured, then planned and run."""
    from crosscheck._workloads.registry import load_workload

    try:
        workload = load_workload(args.workload)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc
    given = _workload_options(args, workload)
    _check_options(args)
    if "weights" in given or "x" in given:
        given.update(_arrays(args))
    try:
        workload = workload.configure(**given) if given else workload
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc
    return _execute(args, workload, progress)


def _workload_options(args: argparse.Namespace, workload: Any) -> dict[str, Any]:
    """The options the user gave that set the workload (the stack's knobs, ``--weights/--x``,
    ``--explain``), each one the workload takes; ``--quantity`` one it has a judge for."""
    given = {k: v for k, v in case_options_given(args).items() if k not in ("dtype", "seed")}
    given.update({k: getattr(args, k) for k in ("weights", "x") if getattr(args, k) is not None})
    if args.explain:
        given["explain"] = True
    if args.steps is not None:
        given["steps"] = args.steps
    refused = [k for k in given if k not in workload.takes]
    if args.quantity not in workload.quantities:
        refused.append("quantity")
    if "steps" in refused or (args.quantity == "update") != ("update" in workload.quantities):
        raise UsageError(
            f"`--quantity update` and `--steps` go together with a crosscheck.Train workload (a port and an "
            f"optimizer on each side); workload `{workload.name}` checks {', '.join(workload.quantities)}."
        )
    if refused:
        raise UsageError(
            f"`--{refused[0]}` applies to the stack workload only; workload `{workload.name}` defines "
            f"its own arrays (it takes --dtype and --seed)."
        )
    return given


def _execute(args: argparse.Namespace, workload: Any, progress: Any) -> Any:
    """Plan the case (the one memory estimate: refused when too large, said when large) and run it."""
    from crosscheck._engine import run as engine
    from crosscheck._engine.records import Execution, Oracle, Slack

    try:
        slack, oracle = Slack.of(args.rtol, args.atol), Oracle(args.oracle_mode, args.directions, args.budget)
        execution = Execution(repeat=args.repeat, isolate=_isolate(args), timeout=args.timeout)
        planned = engine.plan(
            workload,
            backends=args.backend,
            reference=args.reference,
            dtype=args.dtype or "float32",
            seed=0 if args.seed is None else args.seed,
            quantity=args.quantity,
            slack=slack,
            strict=args.strict,
            oracle=oracle,
            execution=execution,
            progress=progress,
        )
        _memory_note(planned.memory)
        _cost_note(planned)
        return engine.drive(planned)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc


#: A case estimated to need more than this says so on stderr before it starts.
MEMORY_NOTE_BYTES = 2**30


def _memory_note(parts: dict[str, int]) -> None:
    """Say how much memory a large case needs before it starts (the estimate that refuses one that
    cannot fit)."""
    from crosscheck._files import available_memory, format_bytes

    if sum(parts.values()) > MEMORY_NOTE_BYTES:
        print(
            f"crosscheck: this case needs about {format_bytes(sum(parts.values()))} of memory "
            f"({format_bytes(available_memory())} available)",
            file=sys.stderr,
        )


def _cost_note(planned: Any) -> None:
    """Say the oracle's cost (tensors, planned evaluations, rough time) before a run that will take
    long, where the workload's judge estimates it and the oracle is the reference."""
    cost = getattr(planned.judge, "cost", None)
    if planned.reference != ORACLE or not callable(cost):
        return
    found = cost(len(planned.candidates))
    if found.long:
        print(f"crosscheck: {found.line()}", file=sys.stderr)


def _arrays(args: argparse.Namespace) -> dict[str, Any]:
    """The arrays of ``--weights`` and ``--x`` (which determine the case: no case option with them)."""
    kwargs = case_options_given(args)
    if (args.weights is None) != (args.x is None):
        raise UsageError(
            "`--weights` and `--x` must be given together; found only "
            f"`--{'weights' if args.x is None else 'x'}`."
        )
    if kwargs:
        first = next(iter(kwargs))
        raise UsageError(
            f"`--{first}` cannot be combined with `--weights/--x`: the arrays determine the case."
        )
    from crosscheck._files import load_array

    try:
        return {
            "weights": load_array(args.weights, name="weights", ndim=3),
            "x": load_array(args.x, name="x", ndim=2),
        }
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _check_options(args: argparse.Namespace) -> None:
    """Options that contradict each other, and outputs that cannot be written, before any work."""
    check_tolerances(args)
    _check_directions(args)
    if args.quantity == "update" and (args.save_bundle or args.plot):
        raise UsageError(UPDATE_REFUSES["--save-bundle" if args.save_bundle else "--plot"])
    if args.quantity == "hvp" and (args.save_bundle or args.plot):
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
    """Every output can be written (a file, not an input of the run nor the source of a backend or
    workload it loads, not another output's; a plot's image type known; matplotlib there), before any
    work; then each made absolute, so that code that changes the working directory cannot move it."""
    outputs = {
        "--json": args.json,
        "--junit": args.junit,
        "--plot": args.plot,
        "--save-bundle": args.save_bundle,
    }
    sources = source_files([*(args.backend or []), args.reference, args.workload])
    check_outputs(outputs, inputs={"--weights": args.weights, "--x": args.x, **sources})
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError as exc:
            raise UsageError(
                f"`--plot` needs matplotlib, which is not installed: {install_hint('plot')}."
            ) from exc
        check_plot_path(args.plot)
    absolute_outputs(args, ("json", "junit", "plot", "save_bundle"))


def _check_budget(args: argparse.Namespace) -> None:
    """``--budget``: a positive, finite number of seconds (argparse refused what is not a number)."""
    from crosscheck._engine.records import Oracle

    try:
        Oracle(budget=args.budget)
    except ValueError as exc:
        raise UsageError(str(exc).replace("`budget`", "`--budget`")) from exc


def _check_directions(args: argparse.Namespace) -> None:
    if args.directions != 4 and args.oracle_mode == "full":
        raise UsageError(
            "`--directions` applies to screening (`--oracle-mode screen` or `auto`); "
            "`--oracle-mode full` never screens."
        )


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
