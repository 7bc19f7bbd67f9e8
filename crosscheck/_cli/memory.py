"""``crosscheck memory``: what does it save? The bytes each variant keeps from forward to backward over
depth and width, and the measured peak of one gradient.

Parse, call ``crosscheck._evidence.memory``, render. No numerics here.
"""

from __future__ import annotations

import argparse
from typing import Any

from crosscheck._cli.common import EXIT_OK, UsageError
from crosscheck._cli.options import add_case_options, check_at_least
from crosscheck._cli.outputs import check_writes, write_json
from crosscheck._cli.terminal import escape, make_console
from crosscheck._files import format_bytes


def register(subparsers: Any) -> None:
    """Add ``memory`` to the ``crosscheck`` subparsers."""
    from crosscheck._evidence.memory import BATCH, DEPTHS, PEAK_SIZE, VARIANTS, WIDTHS

    parser = subparsers.add_parser(
        "memory",
        help="residual bytes of checkpointed and plain variants over depth, and the measured peak",
        description="Tabulate the bytes each variant keeps from forward to backward over depth and "
        "width (the weights excluded), the bytes per layer and the ratio to the plain variant; then "
        "measure the peak of one gradient per variant in a child process.",
    )
    parser.add_argument(
        "--variant", action="append", metavar="NAME", help=f"repeatable (default: {', '.join(VARIANTS)})"
    )
    parser.add_argument("--depths", type=int, nargs="+", default=list(DEPTHS), metavar="L")
    parser.add_argument("--widths", type=int, nargs="+", default=list(WIDTHS), metavar="D")
    add_case_options(parser, defaults={"batch": BATCH})
    parser.add_argument("--no-peak", action="store_true", help="skip the child-process peak measurement")
    parser.add_argument(
        "--peak-size",
        type=int,
        nargs=3,
        metavar=("L", "N", "D"),
        default=[PEAK_SIZE["layers"], PEAK_SIZE["batch"], PEAK_SIZE["dim"]],
        help="layers, batch and width of the peak measurement (default %(default)s)",
    )
    parser.add_argument("--json", metavar="PATH", help="write the tables here")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """``crosscheck memory``: the residual table over depth and width, then the measured peaks."""
    from crosscheck._backends import BackendUnavailable
    from crosscheck._evidence.memory import VARIANTS, measure_peak, residual_table

    check_at_least("--depths", args.depths)
    check_at_least("--widths", args.widths)
    check_at_least("--batch", args.batch)
    check_at_least("--peak-size", args.peak_size)
    check_writes(args, {"--json": "json"})  # before a backend runs: it may change directory
    # A depth or width given twice would be a duplicate column (and a degenerate fit over depth).
    args.depths, args.widths = sorted(set(args.depths)), sorted(set(args.widths))
    variants = list(dict.fromkeys(args.variant or VARIANTS))
    console = make_console()
    try:
        rows = residual_table(variants=variants, depths=args.depths, widths=args.widths, batch=args.batch)
    except BackendUnavailable as exc:
        raise UsageError(str(exc)) from exc
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    _render_rows(console, rows, args)
    peaks = []
    if not args.no_peak:
        layers, batch, dim = args.peak_size
        peaks = [measure_peak(v, layers=layers, batch=batch, dim=dim) for v in variants]
        _render_peaks(console, peaks, layers, batch, dim)
    write_json(args.json, {"residuals": [r.to_dict() for r in rows], "peaks": peaks})
    return EXIT_OK


def _render_rows(console, rows, args) -> None:
    from rich.table import Table

    deepest = max(args.depths)
    table = Table(
        title=f"residual bytes kept from forward to backward (weights excluded), N={args.batch}, float32",
        title_justify="left",
    )
    table.add_column("variant", no_wrap=True)
    table.add_column("ckpt")
    table.add_column("d", justify="right")
    for depth in args.depths:
        table.add_column(f"L={depth}", justify="right")
    for column in ("per layer", "act/layer", "÷ plain", "rerun"):
        table.add_column(column, justify="right")
    fitted = len(args.depths) > 1  # one depth gives no slope
    for r in rows:
        table.add_row(
            escape(r.variant),  # a user's --variant: never markup
            escape(r.checkpoint or "none"),
            str(r.width),
            *(format_bytes(r.bytes_by_depth[d]) for d in args.depths),
            format_bytes(r.slope) if fitted else "-",
            f"{r.per_layer_activations:.2f}" if fitted else "-",
            "-" if r.ratio is None else f"{r.ratio:.3f}",
            str(r.recomputed),
        )
    console.print(table)
    console.print(
        "(per layer: the least-squares slope over depth; act/layer: that slope over the bytes of one "
        f"(N, d) float32 activation; ÷ plain: bytes over the plain variant's at L={deepest}; rerun: layer "
        f"forwards executed again during backward at L={deepest})",
        highlight=False,
    )


def _render_peaks(console, peaks, layers, batch, dim) -> None:
    from rich.table import Table

    table = Table(
        title=f"peak of one gradient, measured in a child process: L={layers}, N={batch}, d={dim}, float32",
        title_justify="left",
    )
    for column in (
        "variant",
        "XLA temp (planned)",
        "peak RSS growth",
        "in activations",
        "÷ plain",
        "seconds",
    ):
        table.add_column(column, justify="left" if column == "variant" else "right", no_wrap=True)
    plain = {
        p["variant"].split("-")[0]: p.get("peak_rss_growth_bytes")
        for p in peaks
        if p["variant"].endswith("-plain")
    }
    for p in peaks:
        if "error" in p:
            table.add_row(escape(p["variant"]), "", escape(p["error"]), "", "", "")
            continue
        growth = p["peak_rss_growth_bytes"]
        base = plain.get(p["variant"].split("-")[0])
        table.add_row(
            escape(p["variant"]),
            format_bytes(p["xla_temp_bytes"]) if "xla_temp_bytes" in p else "-",
            format_bytes(growth),
            f"{growth / p['activation_bytes']:.1f}",
            f"{growth / base:.3f}" if base else "-",
            f"{p['seconds']:.2f}",
        )
    console.print(table)
    console.print(
        "(peak RSS growth: VmHWM minus VmRSS around one gradient, with glibc mapping every block of "
        "64 KiB or more afresh; it depends on the allocator and the machine. XLA temp: the temporary "
        "bytes XLA's buffer assignment plans for the compiled gradient. in activations: over one (N, d) "
        "float32 activation; seconds: that one gradient, wall clock, noisy on a shared machine)",
        highlight=False,
    )
