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

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
_CASE_OPTIONS = ("layers", "batch", "dim", "dtype", "seed", "init", "scale")


class UsageError(Exception):
    """A mistake of the user's: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + message
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    from crosscheck._workloads.stack.case import DTYPES, INITS

    parser = _Parser(prog="crosscheck", description="Cross-check gradients across backends.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command, help_text in (
        ("run", "cross-check one case"),
        ("explain", "cross-check one case and say, layer by layer, where a disagreement starts"),
    ):
        _add_run_options(
            sub.add_parser(command, help=help_text, description=help_text[0].upper() + help_text[1:] + "."),
            DTYPES,
            INITS,
        )
    matrix = sub.add_parser(
        "matrix",
        help="run the CI matrix of cases (nox -s crosscheck)",
        description="Run the fixed CI matrix of cases and print one summary table.",
    )
    matrix.add_argument(
        "--backend",
        action="append",
        metavar="NAME_OR_IMPORT_STRING",
        help="backend to check (repeatable; default: every built-in)",
    )
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


def _add_run_options(run: argparse.ArgumentParser, dtypes, inits) -> None:
    case = run.add_argument_group("case (generated inputs)")
    case.add_argument(
        "--workload",
        metavar="NAME_OR_IMPORT_STRING",
        help="what to check: a built-in workload (default stack) or package.module:attribute naming a "
        "crosscheck.Workload; another workload takes only --dtype and --seed of these options",
    )
    case.add_argument("--layers", type=int, help="number of layers L (default 8)")
    case.add_argument("--batch", type=int, help="rows N of x (default 8)")
    case.add_argument("--dim", type=int, help="width d (default 16)")
    case.add_argument("--dtype", choices=dtypes, help="float dtype of the inputs (default float32)")
    case.add_argument("--seed", type=int, help="random seed (default 0)")
    case.add_argument("--init", choices=inits, help="how inputs are drawn (default gaussian)")
    case.add_argument("--scale", type=float, help="factor applied to x (default 1.0)")
    own = run.add_argument_group("your own inputs")
    own.add_argument("--weights", metavar="FILE", help="weights (L, d, d) as .npy or .npz")
    own.add_argument("--x", metavar="FILE", help="inputs (N, d) as .npy or .npz")
    check = run.add_argument_group("checking")
    check.add_argument(
        "--backend",
        action="append",
        metavar="NAME_OR_IMPORT_STRING",
        help="backend to check (repeatable): jax, torch, numpy-fd, "
        "package.module:attribute (default: every built-in but the reference)",
    )
    check.add_argument(
        "--reference",
        default="numpy-fd",
        metavar="NAME",
        help="backend the others are compared with (default numpy-fd, the oracle)",
    )
    check.add_argument("--rtol", type=float, help="user slack: relative (needs --atol)")
    check.add_argument("--atol", type=float, help="user slack: absolute (needs --rtol)")
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
        return 130


def _run(args: argparse.Namespace) -> int:
    from crosscheck._engine.run import run

    if args.workload is not None:
        from crosscheck._cli.workload import run_workload_command

        status = run_workload_command(args)  # None: the stack, below
        if status is not None:
            return status
    kwargs = {k: getattr(args, k) for k in _CASE_OPTIONS if getattr(args, k) is not None}
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
    _check_tolerances(args)
    _check_output(args.json)
    _check_output(args.junit, "--junit")
    _check_output(args.save_bundle, "--save-bundle")
    if args.directions != 4 and (args.oracle_mode == "full" or args.quantity == "hvp"):
        which = "`--oracle-mode full`" if args.oracle_mode == "full" else "`--quantity hvp`"
        raise UsageError(
            f"`--directions` applies to screening (`--oracle-mode screen` or `auto`); {which} never screens."
        )
    if args.quantity == "hvp" and (args.save_bundle or args.plot):
        raise UsageError("`--save-bundle` and `--plot` are not available with `--quantity hvp` yet.")
    _check_output(args.plot, "--plot")
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError as exc:
            raise UsageError(
                "`--plot` needs matplotlib, which is not installed: pip install 'crosscheck[plot]'."
            ) from exc
    console = _console()
    try:
        with _progress_display() as progress:
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
    _write_reports(args, report)
    if args.plot:
        from crosscheck._report.plot import write_plot

        try:
            write_plot(report, args.plot)
        except OSError as exc:
            raise UsageError(f"cannot write `--plot` {args.plot}: {exc.strerror or exc}") from exc
    if args.save_bundle and not report.passed:
        from crosscheck._report.bundle import save_bundle

        try:
            save_bundle(report, args.save_bundle)
        except OSError as exc:
            raise UsageError(
                f"cannot write `--save-bundle` {args.save_bundle}: {exc.strerror or exc}"
            ) from exc
        print(f"crosscheck: wrote the repro bundle {args.save_bundle}", file=sys.stderr)
    if args.quiet:
        verdict = "PASSED" if report.passed else "FAILED: " + "; ".join(report.problems)
        console.print(verdict, markup=False, highlight=False)
    else:
        report.render(console)
    return EXIT_OK if report.passed else EXIT_FAIL


def _matrix(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from crosscheck._sweep import matrix as _matrix_module
    from crosscheck._sweep.matrix import render_matrix, run_matrix

    _check_output(args.json)
    _check_output(args.junit, "--junit")
    console = _console()
    try:
        with _progress_display() as progress:
            rows = run_matrix(
                _matrix_module.CASES, backends=args.backend, strict=args.strict, progress=progress
            )
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc
    render_matrix(rows, console)
    from crosscheck._report.junit import case_name

    _write_junit(args.junit, [(case_name(row.report), row.report) for row in rows])
    if args.json:
        reports = [dict(row.report.to_dict(), known_answer=row.known_answer) for row in rows]
        try:
            Path(args.json).write_text(json.dumps(reports, indent=2) + "\n")
        except OSError as exc:
            raise UsageError(f"cannot write `--json` {args.json}: {exc.strerror or exc}") from exc
    return EXIT_OK if all(row.passed for row in rows) else EXIT_FAIL


def _cost(args: argparse.Namespace) -> int:
    from crosscheck._cli.cost import run

    return run(args)


def _ste(args: argparse.Namespace) -> int:
    from crosscheck._cli.ste import run

    return run(args)


def _check_tolerances(args: argparse.Namespace) -> None:
    if (args.rtol is None) != (args.atol is None):
        raise UsageError(
            "`--rtol` and `--atol` must be given together or not at all; found only "
            f"`--{'rtol' if args.atol is None else 'atol'}`."
        )


def _check_output(path: str | None, option: str = "--json") -> None:
    """Fail before the work, not after it, when a report cannot be written."""
    from pathlib import Path

    if path is not None and not Path(path).resolve().parent.is_dir():
        raise UsageError(f"cannot write `{option}` {path}: its folder does not exist.")


def _write_reports(args: argparse.Namespace, report) -> None:
    """Write one run's ``--json`` and ``--junit`` files, when asked for."""
    from crosscheck._report.junit import case_name

    if args.json:
        try:
            report.write_json(args.json)
        except OSError as exc:
            raise UsageError(f"cannot write `--json` {args.json}: {exc.strerror or exc}") from exc
    _write_junit(args.junit, [(case_name(report), report)])


def _write_junit(path: str | None, reports) -> None:
    from crosscheck._report.junit import write_junit

    if path is None:
        return
    try:
        write_junit(reports, path)
    except OSError as exc:
        raise UsageError(f"cannot write `--junit` {path}: {exc.strerror or exc}") from exc


def _replay(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from crosscheck._engine.replay import replay
    from crosscheck._report.bundle import load_bundle

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
    console = _console()
    console.print(table)
    replayed = [row for row in rows if row["spec"] is not None]
    same = all(row["status"] == "bit for bit" for row in replayed)
    console.print("REPRODUCED bit for bit" if same and replayed else "NOT REPRODUCED", highlight=False)
    return EXIT_OK if same and replayed else EXIT_FAIL


def _console():
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=max(console.width, 132))
    return console


def _load_arrays(weights_path: str, x_path: str) -> dict:
    from crosscheck._workloads.stack.case import check_inputs, load_array

    try:
        weights = load_array(weights_path, name="weights")
        x = load_array(x_path, name="x")
        weights, x = check_inputs(weights, x)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return {"weights": weights, "x": x}


class _progress_display:
    """A rich progress bar on stderr, shown only once work is expected to take a couple of seconds."""

    def __enter__(self):
        import time

        from rich.console import Console
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

        self._time = time.perf_counter
        self._first: dict[str, tuple[float, int]] = {}
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._tasks: dict[str, int] = {}
        return self.update

    def update(self, description: str, done: int, total: int) -> None:
        now = self._time()
        if description not in self._tasks:
            # Show the bar only when the rate so far predicts more than ~2 s still to go.
            first_time, first_done = self._first.setdefault(description, (now, done))
            rate = (done - first_done) / (now - first_time) if now > first_time else 0.0
            if rate <= 0 or (total - done) / rate < 2.0:
                return
            self._bar.start()
            self._tasks[description] = self._bar.add_task(description, total=total)
        self._bar.update(self._tasks[description], completed=done)

    def __exit__(self, *exc):
        if self._tasks:  # stopping a bar that never started still writes a newline to stderr
            self._bar.stop()
        return False
