"""``crosscheck run --workload SPEC`` for a workload other than the stack: parse, run, render."""

from __future__ import annotations

import argparse

from crosscheck._cli.common import (
    UsageError,
    check_output,
    check_tolerances,
    make_console,
    render_report,
    write_reports,
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
    from crosscheck._workloads.base import load_workload

    try:
        workload = load_workload(args.workload)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc
    if workload is None:
        return None
    for attribute, option, default in _STACK_ONLY:
        if getattr(args, attribute) != default:
            raise UsageError(
                f"`{option}` applies to the stack workload only; workload `{workload.name}` defines its "
                f"own arrays (it takes --dtype and --seed)."
            )
    check_tolerances(args)
    check_output(args.json)
    check_output(args.junit, "--junit")
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
    write_reports(args, report)
    return render_report(report, make_console(), quiet=args.quiet)
