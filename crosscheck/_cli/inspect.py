"""``crosscheck inspect``: is it really checkpointed? How each backend differentiates (scan, checkpoint,
where), the residuals it keeps from forward to backward, and its gradient against the plain variant's.

Parse, call ``crosscheck._evidence.inspect``, render. No numerics here.
"""

from __future__ import annotations

import argparse
from typing import Any

from crosscheck._backends import DECLARED
from crosscheck._cli.common import EXIT_FAIL, EXIT_OK, UsageError
from crosscheck._cli.options import add_backend_option, add_case_options, check_at_least
from crosscheck._cli.outputs import check_writes, write_json
from crosscheck._cli.terminal import escape, make_console
from crosscheck._files import format_bytes

#: What `inspect` looks at when no backend is named: every built-in with a structure to inspect (each
#: framework's backends, in the registry's order: jax, jax-plain, ..., torch, torch-plain, ...).
INSPECTED = tuple(name for framework in DECLARED for name in framework.backends)


def register(subparsers: Any) -> None:
    """Add ``inspect`` to the ``crosscheck`` subparsers."""
    parser = subparsers.add_parser(
        "inspect",
        help="show how each backend differentiates (scan? checkpoint? where?) and what it keeps",
        description="Inspect each backend's gradient computation against what it claims, list the "
        "residuals it keeps from forward to backward, and compare it with the plain variant. Exit 1 "
        "when a claim is contradicted (e.g. a backend claims checkpointing and is not checkpointed).",
    )
    add_backend_option(parser, f"backend to inspect (repeatable; default: {', '.join(INSPECTED)})")
    add_case_options(parser, defaults={"layers": 8, "batch": 4, "dim": 8, "seed": 0})
    parser.add_argument("--json", metavar="PATH", help="write every backend's findings here (a list)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """``crosscheck inspect``: exit 1 when a backend's claims are contradicted."""
    from crosscheck._backends import BackendUnavailable, load_backend
    from crosscheck._engine.call import guarded
    from crosscheck._evidence.inspect import stack_inputs

    check_at_least("--layers", args.layers)
    check_at_least("--batch", args.batch)
    check_at_least("--dim", args.dim)
    check_writes(args, {"--json": "json"}, specs=args.backend or ())  # before a backend runs
    weights, x = stack_inputs(layers=args.layers, batch=args.batch, dim=args.dim, seed=args.seed)
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
        # Inspecting runs the backend's code: guarded like every call, a sys.exit in it is its failure.
        out = guarded(
            lambda b=backend: _inspect(b, weights, x, plain_cache), (), inputs={"weights": weights, "x": x}
        )
        if out.error is not None:
            console.print(f"{spec}: failed: {out.error}", markup=False, highlight=False)
            results.append({"backend": str(spec), "ok": False, "error": out.error})
            failed = True
            continue
        structure, record = out.value
        results.append(record)
        _render_structure(console, structure, record["vs_plain"])
        failed |= not structure.ok
    write_json(args.json, results)
    flagged = [str(r["backend"]) for r in results if not r["ok"]]
    console.print(
        f"FAILED: {', '.join(flagged)} not as claimed" if flagged else "PASSED: every claim holds",
        highlight=False,
        markup=False,
    )
    return EXIT_FAIL if failed else EXIT_OK


def _inspect(backend: Any, weights: Any, x: Any, cache: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    from crosscheck._evidence.inspect import inspect_backend

    structure = inspect_backend(backend, weights, x)
    record = structure.to_dict()
    record["vs_plain"] = _vs_plain(structure, backend, weights, x, cache)
    return structure, record


def _vs_plain(structure, backend, weights, x, cache) -> dict[str, Any] | None:
    import numpy as np

    from crosscheck._backends import BackendUnavailable, load_backend
    from crosscheck._evidence.inspect import plain_sibling, ulp_difference

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

    from crosscheck._evidence.inspect import grouped

    verdict = "ok" if structure.ok else "NOT AS CLAIMED"
    claims = structure.claims if structure.claims is not None else "nothing"
    # The backend's name, framework, claims and what its program shows are its own text: never markup.
    name, framework = escape(structure.backend), escape(structure.framework or "?")
    console.print(f"\n[bold]{name}[/bold] ({framework}): {verdict}; claims {escape(claims)}")
    for line in structure.evidence:
        console.print(f"  {line}", highlight=False, markup=False)
    for problem in structure.problems:
        console.print(f"  [red]problem:[/red] {escape(problem)}", highlight=False)
    if vs_plain is not None:
        same = vs_plain["entries_differ"] == 0
        text = (
            "bit for bit"
            if same
            else f"{vs_plain['entries_differ']} entries differ, by at most {vs_plain['max_ulps']:.3g} ulp"
        )
        console.print(f"  gradient vs {vs_plain['plain']}: {text}", highlight=False, markup=False)
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
        cells = (str(count), str(r.shape), r.dtype, f"{r.nbytes:,}", r.role, r.origin)
        table.add_row(*(escape(cell) for cell in cells))
    console.print(table)
