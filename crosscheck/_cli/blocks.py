"""``crosscheck blocks``: a ``crosscheck.Blocks`` checked block by block, here or on a Dask cluster.

Exit status: 0 every block was checked and agrees with its port; 1 a block differs or was not checked;
2 a usage error.
"""

from __future__ import annotations

import argparse
from typing import Any

from crosscheck._cli.common import EXIT_FAIL, EXIT_OK, UsageError
from crosscheck._cli.options import add_backend_option, add_placement_options, placement_options
from crosscheck._cli.outputs import absolute_outputs, check_writes, write_json
from crosscheck._cli.terminal import make_console, progress_display


def register(subparsers: Any) -> None:
    """Add ``blocks`` to the ``crosscheck`` subparsers."""
    parser = subparsers.add_parser(
        "blocks",
        help="check a model block by block (a crosscheck.Blocks), here or on a Dask cluster",
        description="Record each block's inputs and cotangent from one PyTorch forward and backward pass "
        "of the model, then check each block as a crosscheck.Port on them, one block at a time (or each "
        "block a task on a Dask cluster), and name the first block that differs.",
    )
    parser.add_argument(
        "--workload",
        required=True,
        metavar="SPEC",
        help="package.module:attribute naming a crosscheck.Blocks (or a function returning one)",
    )
    check = parser.add_argument_group("checking (each block's port)")
    add_backend_option(check, "backend to check (repeatable; default: the port's jax and torch)")
    check.add_argument("--reference", default="numpy-fd", metavar="NAME", help="default: the oracle")
    check.add_argument("--dtype", default="float32", choices=("float32", "float64"), help="default float32")
    check.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    check.add_argument("--strict", action="store_true", help="fail on unjudgeable entries")
    check.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="per block; past it, a block fails by name and the others go on (default: no limit)",
    )
    add_placement_options(check)
    where = parser.add_argument_group("where the blocks run")
    where.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="check each block as a task on this Dask distributed cluster (tcp://...); a worker builds "
        "its block only",
    )
    where.add_argument(
        "--directory",
        metavar="PATH",
        help="write the blocks' recordings here (with --scheduler: a folder every worker reads; default: "
        "a temporary folder)",
    )
    out = parser.add_argument_group("output")
    out.add_argument("--json", metavar="PATH", help="write the blockwise check's JSON report here")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Check the blocks and print one line per block, the verdict and what the check cannot see."""
    from crosscheck._records import check_timeout
    from crosscheck._sweep.block_rules import check_directory, check_sides
    from crosscheck._sweep.blocks import check_blocks

    check_writes(args, {"--json": "json"}, specs=[args.workload, *(args.backend or []), args.reference])
    if ":" not in args.workload:
        raise UsageError(
            f"`--workload` of `crosscheck blocks` must be an import string `package.module:attribute` "
            f"naming a crosscheck.Blocks, found {args.workload!r}."
        )
    placement = placement_options(args)
    try:
        check_sides(args.backend, args.reference, front="cli")
        check_directory(args.directory, "--directory")
        check_timeout(args.timeout, front="cli")
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    absolute_outputs(args, ("directory",))
    try:
        with progress_display() as progress:  # on stderr, as blocks finish
            result = check_blocks(
                args.workload,
                backends=args.backend,
                reference=args.reference,
                dtype=args.dtype,
                seed=args.seed,
                strict=args.strict,
                scheduler=args.scheduler,
                directory=args.directory,
                timeout=args.timeout,
                **placement,
                progress=lambda done, total: progress("blocks", done, total),
            )
    except (ValueError, TypeError, ImportError) as exc:
        raise UsageError(str(exc)) from exc
    write_json(args.json, result.to_dict())
    console = make_console()
    for line in result.lines():  # the columns' spaces kept, control characters not; long lines unwrapped
        console.print(
            "".join(c for c in line if c.isprintable()), highlight=False, markup=False, soft_wrap=True
        )
    return EXIT_OK if result.passed else EXIT_FAIL
