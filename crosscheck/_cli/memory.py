"""``crosscheck inspect`` (is it really checkpointed?) and ``crosscheck memory`` (what does it save?).

Registered by ``crosscheck._cli.main``; parse, call ``_inspect`` / ``_memory``, render. No numerics here.
"""

from __future__ import annotations

import argparse
from typing import Any

from crosscheck._cli.common import (
    EXIT_FAIL,
    EXIT_OK,
    UsageError,
    add_backend_option,
    add_case_options,
    check_at_least,
    check_output,
    format_bytes,
    make_console,
    write_json,
)

#: What `inspect` looks at when no backend is named: every built-in with a structure to inspect.
INSPECTED = ("jax", "jax-plain", "jax-remat-scan", "jax-segments", "torch", "torch-plain", "torch-segments")


def add_parsers(sub: Any) -> None:
    """Add the ``inspect`` and ``memory`` subcommands to the ``crosscheck`` parser."""
    from crosscheck._tools.memory import BATCH, DEPTHS, PEAK_SIZE, VARIANTS, WIDTHS

    inspect = sub.add_parser(
        "inspect",
        help="show how each backend differentiates (scan? checkpoint? where?) and what it keeps",
        description="Inspect each backend's gradient computation against what it claims, list the "
        "residuals it keeps from forward to backward, and compare it with the plain variant. Exit 1 "
        "when a claim is contradicted (e.g. a backend claims checkpointing and is not checkpointed).",
    )
    add_backend_option(inspect, f"backend to inspect (repeatable; default: {', '.join(INSPECTED)})")
    add_case_options(inspect, defaults={"layers": 8, "batch": 4, "dim": 8, "seed": 0})
    inspect.add_argument("--json", metavar="PATH", help="write every backend's findings here (a list)")
    memory = sub.add_parser(
        "memory",
        help="residual bytes of checkpointed and plain variants over depth, and the measured peak",
        description="Tabulate the bytes each variant keeps from forward to backward over depth and "
        "width (the weights excluded), the bytes per layer and the ratio to the plain variant; then "
        "measure the peak of one gradient per variant in a child process.",
    )
    memory.add_argument(
        "--variant", action="append", metavar="NAME", help=f"repeatable (default: {', '.join(VARIANTS)})"
    )
    memory.add_argument("--depths", type=int, nargs="+", default=list(DEPTHS), metavar="L")
    memory.add_argument("--widths", type=int, nargs="+", default=list(WIDTHS), metavar="D")
    add_case_options(memory, defaults={"batch": BATCH})
    memory.add_argument("--no-peak", action="store_true", help="skip the child-process peak measurement")
    memory.add_argument(
        "--peak-size",
        type=int,
        nargs=3,
        metavar=("L", "N", "D"),
        default=[PEAK_SIZE["layers"], PEAK_SIZE["batch"], PEAK_SIZE["dim"]],
        help="layers, batch and width of the peak measurement (default %(default)s)",
    )
    memory.add_argument("--json", metavar="PATH", help="write the tables here")


def run_inspect(args: argparse.Namespace) -> int:
    """``crosscheck inspect``: exit 1 when a backend's claims are contradicted."""
    from crosscheck._registry import BackendUnavailable, load_backend
    from crosscheck._tools.inspect import inspect_backend
    from crosscheck._workloads.stack.case import Case, make_inputs

    check_at_least("--layers", args.layers)
    check_at_least("--batch", args.batch)
    check_at_least("--dim", args.dim)
    check_output(args.json)
    weights, x = make_inputs(Case(layers=args.layers, batch=args.batch, dim=args.dim, seed=args.seed))
    console, results, failed = make_console(), [], False
    console.print(f"crosscheck inspect: layers={args.layers}, batch={args.batch}, dim={args.dim}, float32")
    plain_cache: dict[str, Any] = {}
    for spec in args.backend or INSPECTED:
        try:
            backend = load_backend(spec)
        except BackendUnavailable as exc:
            console.print(f"{spec}: unavailable ({exc})", markup=False, highlight=False)
            failed |= args.backend is not None
            continue
        except (ValueError, TypeError) as exc:
            raise UsageError(str(exc)) from exc
        structure = inspect_backend(backend, weights, x)
        record = structure.to_dict()
        record["vs_plain"] = _vs_plain(structure, backend, weights, x, plain_cache)
        results.append(record)
        _render_structure(console, structure, record["vs_plain"])
        failed |= not structure.ok
    write_json(args.json, results)
    flagged = [r["backend"] for r in results if not r["ok"]]
    console.print(
        f"FAILED: {', '.join(flagged)} not as claimed" if flagged else "PASSED: every claim holds",
        highlight=False,
    )
    return EXIT_FAIL if failed else EXIT_OK


def _vs_plain(structure, backend, weights, x, cache) -> dict[str, Any] | None:
    import numpy as np

    from crosscheck._registry import BackendUnavailable, load_backend
    from crosscheck._tools.inspect import plain_sibling, ulp_difference

    sibling = plain_sibling(structure)
    if sibling is None or sibling == structure.backend:
        return None
    try:
        if sibling not in cache:
            cache[sibling] = np.asarray(load_backend(sibling).grad(weights, x))
    except BackendUnavailable:
        return None
    differ, ulps = ulp_difference(np.asarray(backend.grad(weights, x)), cache[sibling])
    return {"plain": sibling, "entries_differ": differ, "max_ulps": ulps}


def _render_structure(console, structure, vs_plain) -> None:
    from rich.table import Table

    from crosscheck._tools.inspect import grouped

    verdict = "ok" if structure.ok else "NOT AS CLAIMED"
    claims = structure.claims if structure.claims is not None else "nothing"
    console.print(
        f"\n[bold]{structure.backend}[/bold] ({structure.framework or '?'}): {verdict}; claims {claims}"
    )
    for line in structure.evidence:
        console.print(f"  {line}", highlight=False)
    for problem in structure.problems:
        console.print(f"  [red]problem:[/red] {problem}", highlight=False)
    if vs_plain is not None:
        same = vs_plain["entries_differ"] == 0
        text = (
            "bit for bit"
            if same
            else f"{vs_plain['entries_differ']} entries differ, by at most {vs_plain['max_ulps']:.3g} ulp"
        )
        console.print(f"  gradient vs {vs_plain['plain']}: {text}", highlight=False)
    if not structure.residuals:
        return
    table = Table(
        title=f"residuals kept for backward: {format_bytes(structure.residual_bytes)}, "
        f"{format_bytes(structure.activation_bytes)} besides the weights",
        title_justify="left",
    )
    for column in ("count", "shape", "dtype", "bytes each", "role", "origin"):
        table.add_column(column, justify="right" if column in ("count", "bytes each") else "left")
    for count, r in grouped(structure.residuals):
        table.add_row(str(count), str(r.shape), r.dtype, f"{r.nbytes:,}", r.role, r.origin)
    console.print(table)


def run_memory(args: argparse.Namespace) -> int:
    """``crosscheck memory``: the residual table over depth and width, then the measured peaks."""
    from crosscheck._registry import BackendUnavailable
    from crosscheck._tools.memory import VARIANTS, measure_peak, residual_table

    check_at_least("--depths", args.depths)
    check_at_least("--widths", args.widths)
    check_at_least("--batch", args.batch)
    check_at_least("--peak-size", args.peak_size)
    check_output(args.json)
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
            r.variant,
            r.checkpoint or "none",
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
            table.add_row(p["variant"], "", p["error"], "", "", "")
            continue
        growth = p["peak_rss_growth_bytes"]
        base = plain.get(p["variant"].split("-")[0])
        table.add_row(
            p["variant"],
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
