"""``crosscheck sweep``: the case matrix of ``[tool.crosscheck]`` (or the built-in CI matrix), in parallel.

Exit status: 0 every case passed; 1 a case failed, raised, crashed or timed out; 2 a usage error.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from crosscheck._backends import declared_settings
from crosscheck._cli.common import EXIT_FAIL, EXIT_OK, UsageError
from crosscheck._cli.options import (
    add_backend_option,
    add_matrix_options,
    add_placement_options,
    add_tolerance_options,
    check_at_least,
)
from crosscheck._cli.outputs import (
    check_writes,
    write_file,
    write_json,
)
from crosscheck._cli.terminal import escape, make_console, progress_display
from crosscheck._report.text import plain
from crosscheck._sweep.config import MAX_CASES


def register(subparsers: Any) -> None:
    """Add ``sweep`` to the ``crosscheck`` subparsers."""
    parser = subparsers.add_parser(
        "sweep",
        help="run the case matrix of [tool.crosscheck] (or the built-in CI matrix) in parallel; "
        "nox -s crosscheck runs this",
        description="Run every case of the matrix in [tool.crosscheck] of pyproject.toml (found in the "
        "current folder or its parents; without one, the built-in CI matrix) on worker processes or a "
        "Dask cluster, and print one summary table. Options replace the configuration key they name.",
    )
    parser.add_argument("--config", metavar="PATH", help="read [tool.crosscheck] from this TOML file")
    matrix = parser.add_argument_group("matrix (each option repeatable; replaces the key it names)")
    matrix.add_argument("--workload", action="append", metavar="SPEC", help='"stack" or a workload spec')
    add_matrix_options(matrix, ("layers", "batch", "dim", "dtype", "seed", "init"))
    check = parser.add_argument_group("checking")
    add_backend_option(check, "backend to check (repeatable)")
    check.add_argument("--reference", metavar="NAME", help="backend the others are compared with")
    add_tolerance_options(check)
    check.add_argument(
        "--strict",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="fail on entries unjudgeable because of ReLU kinks",
    )
    check.add_argument("--timeout", type=float, metavar="SECONDS", help="per case; past it, a case fails")
    add_placement_options(check)
    where = parser.add_argument_group("where the cases run")
    where.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="worker processes on this machine (default: the number of CPUs; 0: in this process)",
    )
    where.add_argument(
        "--scheduler", metavar="ADDRESS", help="run on this Dask distributed cluster instead (tcp://...)"
    )
    matrix.add_argument(
        "--max-cases",
        type=int,
        default=MAX_CASES,
        metavar="N",
        help=f"refuse a matrix of more cases than this (default {MAX_CASES})",
    )
    out = parser.add_argument_group("output")
    out.add_argument("--json", metavar="PATH", help="write the sweep's JSON report here")
    out.add_argument("--junit", metavar="PATH", help="write a JUnit XML report here (a suite a case)")
    parser.set_defaults(handler=run)


#: Command-line option -> configuration key.
_OVERRIDES = {
    "workload": "workloads",
    "layers": "layers",
    "batch": "batch",
    "dim": "dim",
    "dtype": "dtypes",
    "seed": "seeds",
    "init": "inits",
    "backend": "backends",
    "reference": "reference",
    "rtol": "rtol",
    "atol": "atol",
    "strict": "strict",
    **{name: name for name, _ in declared_settings()},  # --jax-platform: jax_platform
    "timeout": "timeout",
}


def run(args: argparse.Namespace) -> int:
    """Resolve the configuration, run the sweep, render it, write the reports."""
    from crosscheck._sweep.config import ConfigError, cases, options
    from crosscheck._sweep.engine import check_scheduler, check_specs, cpu_count, sweep

    _check_outputs(args)
    if args.jobs is not None and args.jobs < 0:
        raise UsageError(f"`--jobs` must be 0 or more, found {args.jobs}.")
    check_at_least("--max-cases", args.max_cases)
    if args.jobs is not None and args.jobs > cpu_count():
        print(
            f"crosscheck: --jobs {args.jobs} is more than the {cpu_count()} CPUs this process may use; "
            f"running {cpu_count()} workers",
            file=sys.stderr,
        )
        args.jobs = cpu_count()
    if args.jobs is not None and args.scheduler is not None:
        raise UsageError(
            "`--jobs` and `--scheduler` exclude each other: the cases run either on worker processes here "
            "or on the Dask cluster; found both."
        )
    try:
        config = resolve_config(args)
        todo, run_options = cases(config, limit=args.max_cases), options(config)
        check_specs(todo, run_options["backends"], run_options["reference"])
        if args.scheduler is not None:
            check_scheduler(args.scheduler)
    except (ConfigError, ValueError) as exc:
        raise UsageError(str(exc)) from exc
    console = make_console()
    console.print(
        f"crosscheck sweep: {len(todo)} case{'' if len(todo) == 1 else 's'}, {escape(_source(config, args))}",
        highlight=False,
    )
    try:
        with progress_display() as progress:
            progress("sweep", 0, len(todo))
            result = sweep(
                todo,
                **run_options,
                timeout=config.get("timeout"),
                jobs=args.jobs,
                scheduler=args.scheduler,
                progress=lambda done, total: progress("sweep", done, total),
                config=None if config.path is None else str(config.path),
            )
    except (ImportError, ValueError) as exc:  # --scheduler: no distributed, a bad or unreachable address
        raise UsageError(str(exc)) from exc
    render(result, console)
    if args.json:
        write_json(args.json, result.to_dict())
    write_file(args.junit, "--junit", lambda path: write_junit(result, path))
    if result.interrupted is not None:  # the records so far are written; 128 + the signal's number
        return 128 + int(getattr(signal, result.interrupted, signal.SIGINT))
    return EXIT_OK if result.passed else EXIT_FAIL


def _check_outputs(args: argparse.Namespace) -> None:
    """The reports can be written, overwriting no input (the configuration, named or found, and the
    source of a backend or workload named by import string); then made absolute, before any code of
    a backend runs (one that changes the working directory must not move them)."""
    from crosscheck._sweep.config import find_config

    found = None if args.config is not None else find_config()
    inputs = {"--config": args.config, "the configuration this sweep reads": found}
    specs = [*(args.backend or []), args.reference, *(args.workload or [])]
    check_writes(args, {"--json": "json", "--junit": "junit"}, specs=specs, inputs=inputs)


def resolve_config(args: argparse.Namespace):
    """``--config``, else the nearest ``[tool.crosscheck]``, else none; then the command-line options."""
    from crosscheck._sweep.config import SweepConfig, find_config, load_config

    path = args.config or find_config()
    config = load_config(path) if path is not None else SweepConfig()
    return config.merged({key: getattr(args, option) for option, key in _OVERRIDES.items()})


def _source(config, args: argparse.Namespace) -> str:
    """Where the matrix came from, for the first line of the output."""
    from crosscheck._sweep.config import MATRIX_KEYS

    options = [o for o, key in _OVERRIDES.items() if key in MATRIX_KEYS and getattr(args, o) is not None]
    if not config.has_matrix():
        where = "the built-in CI matrix"
    elif config.path is None:
        where = "from the command line"
    else:
        where = f"from {config.path}" + (" and the command line" if options else "")
    return where


def case_label(case: dict[str, Any]) -> str:
    """``gaussian L=8 N=8 d=16 float32 seed=0`` for the stack; ``SPEC float32 seed=0`` otherwise."""
    if case.get("workload", "stack") != "stack":
        return f"{case['workload']} {case['dtype']} seed={case['seed']}"
    return (
        f"{case['init']} L={case['layers']} N={case['batch']} d={case['dim']} {case['dtype']} "
        f"seed={case['seed']}"
    )


def render(result, console: Any) -> None:
    """One table, a case a row and a backend a column, then each problem and the verdict line."""
    from rich.table import Table

    names: list[str] = []
    for record in result.records:
        comparisons = (record["report"] or {}).get("comparisons", [])
        for c in comparisons:  # a workload has one comparison per parameter: one column per backend
            if c["backend"] not in names:
                names.append(c["backend"])
    known = any(record["known_answer"] for record in result.records)
    table = Table(title="crosscheck sweep", title_justify="left")
    for column in ("case", *names, *(["known answer"] if known else []), "verdict", "time"):
        # A backend's name may be an import string: never markup; on a narrow terminal it wraps
        # (overflow="fold"), it never ends in "…".
        table.add_column(escape(column), overflow="fold")
    for record in result.records:
        verdict = "[green]ok[/green]" if record["passed"] else f"[red]{record['status'].upper()}[/red]"
        seconds = f"{record['seconds']:.1f}s" if record["seconds"] is not None else "-"
        extra = [escape(record["known_answer"] or "-")] if known else []
        table.add_row(escape(case_label(record["case"])), *_cells(record, names), *extra, verdict, seconds)
    console.print(table)
    for record in result.records:
        if not record["passed"]:
            line = plain(f"{case_label(record['case'])}: {record['error']}")
            console.print(line, markup=False, highlight=False)
    counts = {k: v for k, v in result.counts().items() if v and k != "passed"}
    n = len(result.records)
    if result.interrupted is not None:
        console.print(
            f"[red]INTERRUPTED[/red] ({result.interrupted}): {n} of {result.planned} cases finished, "
            f"{result.counts()['passed']} passed; the others did not run",
            highlight=False,
        )
    elif counts:
        detail = ", ".join(f"{v} {k}" for k, v in counts.items())
        console.print(f"[red]FAILED[/red]: {n - result.counts()['passed']} of {n} cases ({detail})")
    else:
        console.print(f"[green]PASSED[/green]: all {n} cases agree")


def _cells(record: dict[str, Any], names: list[str]) -> list[str]:
    """A cell per backend: its comparisons together (a workload has one per parameter)."""
    report = record["report"]
    if report is None:
        return ["-"] * len(names)
    cells = []
    for name in names:
        comps = [c for c in report["comparisons"] if c["backend"] == name]
        failing = [c for c in comps if not c["passed"]]
        if not comps:
            status = report["backends"].get(name)
            cells.append(escape(status["status"]) if status else "-")
        elif failing:
            mismatched = sum(c["mismatched"] for c in failing)
            judged = sum(c["judged"] for c in failing)
            cells.append(f"[red]{escape(failing[0]['status'])} {mismatched}/{judged}[/red]")
        else:
            cells.append(_passed(comps))
    return cells


def _passed(comps: list[dict[str, Any]]) -> str:
    """A passing cell: what decided it, the worst ratio of a difference to its tolerance and the term
    that made the tolerance (``ok 3.4% of tol (rounding)``), not the greatest relative difference,
    which an entry near zero or at a kink makes large though the floor or the kink judged it (or
    infinite, where the reference is exactly zero)."""
    near = sum(c.get("unjudgeable", 0) + c.get("two_sided", 0) for c in comps)
    kinks = f"{near} kink" if near else ""
    judged = [c for c in comps if c.get("worst_ratio") is not None and c.get("judged", 0) > 0]
    if judged:
        worst = max(judged, key=lambda c: c["worst_ratio"])
        why = "; ".join(x for x in (escape(worst.get("decided_by") or ""), kinks) if x)
        return f"ok {100 * worst['worst_ratio']:.2g}% of tol" + (f" ({why})" if why else "")
    if any(c.get("judged", 0) > 0 for c in comps):  # a screened comparison: no entry's ratio to show
        return "ok" + (f" ({kinks})" if kinks else "")
    return f"ok, none judged ({kinks})" if kinks else "ok"


def write_junit(result, path: str | Path) -> None:
    """JUnit XML: a suite a case, the comparisons as test cases (via ``crosscheck._report.junit``);
    a case that raised, crashed or timed out is one test case with an ``<error>``."""
    import xml.etree.ElementTree as ET

    from crosscheck._report.junit import junit_suite

    root = ET.Element("testsuites", name="crosscheck sweep")
    for record in result.records:
        name = case_label(record["case"])
        if record["report"] is not None:
            suite = junit_suite(_ReportView(record["report"]), name)  # type: ignore[arg-type]  # duck-typed
        else:
            suite = ET.Element("testsuite", name=name)
            case = ET.SubElement(suite, "testcase", classname=name, name=record["status"])
            text = f"{record['status']}: {record['error']}"
            ET.SubElement(case, "error", message=text, type=record["status"]).text = text
        if record["known_answer"] not in ("", "exact"):
            case = ET.SubElement(suite, "testcase", classname=name, name="known answer")
            ET.SubElement(case, "failure", message=record["known_answer"], type="known answer")
        for key in ("failures", "errors", "skipped"):
            tag = {"failures": "failure", "errors": "error", "skipped": "skipped"}[key]
            suite.set(key, str(len(suite.findall(f"testcase/{tag}"))))
        suite.set("tests", str(len(suite.findall("testcase"))))
        root.append(suite)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


class _ReportView:
    """The attributes ``junit_suite`` reads, over a report's JSON dict (records cross processes as JSON)."""

    def __init__(self, report: dict[str, Any]) -> None:
        from types import SimpleNamespace

        # `parameter`: comparisons of a workload name the parameter; the stack's may not have the key.
        self.comparisons = [SimpleNamespace(**{"parameter": None, **c}) for c in report["comparisons"]]
        self.backends = {k: SimpleNamespace(**v) for k, v in report["backends"].items()}
