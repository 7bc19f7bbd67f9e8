"""``crosscheck run --workload SPEC`` for a workload other than the stack: parse, run, render."""

from __future__ import annotations

import argparse

from crosscheck._cli.main import (
    EXIT_FAIL,
    EXIT_OK,
    UsageError,
    _check_output,
    _check_tolerances,
    _console,
    _write_reports,
)

#: Options that only the stack has: (attribute, how the user wrote it, its default).
_STACK_ONLY = (
    ("layers", "--layers", None),
    ("batch", "--batch", None),
    ("dim", "--dim", None),
    ("init", "--init", None),
    ("scale", "--scale", None),
    ("weights", "--weights", None),
    ("x", "--x", None),
    ("oracle_mode", "--oracle-mode", "auto"),
    ("directions", "--directions", 4),
    ("plot", "--plot", None),
    ("save_bundle", "--save-bundle", None),
    ("explain", "--explain", False),
    ("quantity", "--quantity", "grad"),
)


def run_workload_command(args: argparse.Namespace) -> int | None:
    """Run ``args.workload``; None when it is the stack (the caller's own path then runs)."""
    from crosscheck._engine.run import run
    from crosscheck._workloads.registry import load_workload

    try:
        workload = load_workload(args.workload)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc
    if workload.name == "stack":  # TEMPORARY until the CLI refactor folds this module into run
        return None
    for attribute, option, default in _STACK_ONLY:
        if getattr(args, attribute) != default:
            raise UsageError(
                f"`{option}` applies to the stack workload only; workload `{workload.name}` defines its "
                f"own arrays (it takes --dtype and --seed)."
            )
    _check_tolerances(args)
    _check_output(args.json)
    _check_output(args.junit, "--junit")
    options = {k: getattr(args, k) for k in ("seed", "dtype") if getattr(args, k) is not None}
    try:
        report = run(
            workload=workload,
            backends=args.backend,
            reference=args.reference,
            rtol=args.rtol,
            atol=args.atol,
            strict=args.strict,
            **options,
        )
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc
    _write_reports(args, report)
    console = _console()
    if args.quiet:
        verdict = "PASSED" if report.passed else "FAILED: " + "; ".join(report.problems)
        console.print(verdict, markup=False, highlight=False)
    else:
        report.render(console)
    return EXIT_OK if report.passed else EXIT_FAIL
