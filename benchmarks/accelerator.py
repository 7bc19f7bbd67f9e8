"""What the JAX side's own arithmetic does to a port's module outputs, where JAX runs (a TPU, a GPU, the CPU).

For each port and each JAX matmul precision, the JAX port's forward pass is captured module by module in
float32 and in float64 (the same capture a port check makes), and each module's float32 output is
compared with its float64 one in units of the float32 permit the module check uses (``terms.bound``):
the median and the largest ratio, and the share of entries beyond 1 (past ``REDRAWN_SHARE`` of them, a
check calls the re-run "not the same computation"), and the same against what the device's arithmetic
permits (``crosscheck._compare.device``). On a CPU every ratio is far below 1; on a TPU at the default
precision (one bfloat16 pass per product) many are beyond float32's permit. Run from the
repository root, where the JAX side is to run::

    python benchmarks/accelerator.py --ports examples.port.convnet:port --json out.json
    JAX_PLATFORMS=cpu python benchmarks/accelerator.py        # the same on the host CPU

Prints one line per port, precision and module (the worst modules first), and the platform it ran on.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PORTS = (
    "examples.port.convnet:port",
    "examples.port.transformer_linen:port",
    "examples.port.scanned_linen:port",
    "examples.port.gpt2:port",
)
PRECISIONS = ("default", "high", "highest")


def ratios(narrow: np.ndarray, wide: np.ndarray, device: Any = None) -> dict[str, float]:
    """``|narrow - wide|`` over the float32 permit of ``wide`` (``terms.bound``; with ``device``, what
    that device's arithmetic permits too), summarised."""
    from crosscheck._compare import terms

    diff = np.abs(np.asarray(narrow, np.float64) - np.asarray(wide, np.float64)).reshape(-1)
    limit = np.asarray(terms.bound(np.asarray(wide, np.float64), device=device), np.float64).reshape(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(limit > 0, diff / limit, 0.0)
    r = np.nan_to_num(r, nan=0.0, posinf=0.0)
    scale = np.abs(np.asarray(wide, np.float64)).reshape(-1)
    rel = float(np.max(diff) / max(float(np.max(scale)), 1e-300)) if diff.size else 0.0
    return {
        "median": float(np.median(r)) if r.size else 0.0,
        "max": float(np.max(r)) if r.size else 0.0,
        "beyond": float(np.mean(r > 1.0)) if r.size else 0.0,
        "max_rel": rel,
    }


def measure(spec: str, precision: str, seed: int) -> dict[str, Any]:
    import jax

    from crosscheck._compare.device import Arithmetic, level
    from crosscheck._workloads.port.judge import capture
    from crosscheck._workloads.registry import load_workload

    view = load_workload(spec)
    point = view.point(dtype="float32", seed=seed)
    wide = {k: v.astype(np.float64) for k, v in point.params.items()}
    wide_in = {k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in point.inputs.items()}
    start = time.perf_counter()
    with jax.default_matmul_precision(None if precision == "default" else precision):
        main = capture.jax_capture(view.prepared, point.params, point.inputs)
        other = capture.jax_capture(view.prepared, wide, wide_in)
    seconds = time.perf_counter() - start
    others = {r.name: r for r in other}
    arithmetic = Arithmetic(jax.devices()[0].platform, level(None if precision == "default" else precision))
    rows = []
    for r in main:
        o = others.get(r.name)
        if o is None or not r.outputs or not o.outputs:
            continue
        row = {"module": r.name or "(model)", "type": r.module_type, **ratios(r.outputs[0], o.outputs[0])}
        within = ratios(r.outputs[0], o.outputs[0], arithmetic)
        row.update({"device_median": within["median"], "device_beyond": within["beyond"]})
        rows.append(row)
    return {
        "port": spec,
        "precision": precision,
        "seconds": round(seconds, 2),
        "modules": rows,
    }


#: ``--verdicts``: what a check says where JAX runs, each ``(workload, reference)``; a workload is the
#: stack (``stack:DIM``) or a port's import string. The planted bugs must fail at their module.
CHECKS = (
    ("stack:256", "numpy-fd"),
    ("examples.port.convnet:port", "torch"),
    ("examples.port.convnet:port", "numpy-fd"),
    ("examples.port.convnet:kernel_dot_t", "torch"),
    ("examples.port.transformer_linen:port", "torch"),
    ("examples.port.transformer_linen:port", "numpy-fd"),
    ("examples.port.transformer_linen:swapped_qk", "torch"),
    ("examples.port.scanned_linen:port", "torch"),
    ("examples.port.scanned_linen:epsilon", "torch"),
    ("examples.port.gpt2:port", "torch"),
    ("examples.port.gpt2_equinox:port", "torch"),
    ("examples.port.llama_nnx:port", "torch"),
)


def verdict(spec: str, reference: str, precision: str) -> dict[str, Any]:
    """One check, in this process (the chip is held by one program): passed, and the verdict's words."""
    import importlib

    import jax

    import crosscheck

    start = time.perf_counter()
    with jax.default_matmul_precision(None if precision == "default" else precision):
        if spec.startswith("stack:"):
            dim = int(spec.partition(":")[2])
            report = crosscheck.run(dim=dim, batch=8, reference=reference, backends=["jax"])
        else:
            module, _, attribute = spec.partition(":")
            port = getattr(importlib.import_module(module), attribute)
            report = crosscheck.run(workload=port, reference=reference, backends=["jax"])
    jax_result = report.backends.get("jax")
    said = getattr(jax_result, "verdict", None)
    port = (getattr(jax_result, "notes", None) or {}).get("port", {})
    failing = [c for c in report.comparisons if not c.passed]
    return {
        "workload": spec,
        "reference": reference,
        "precision": precision,
        "passed": bool(report.passed),
        "seconds": round(time.perf_counter() - start, 1),
        "verdict": port.get("text") or (said.text if said is not None else ""),
        "starts_in": port.get("module") or "",
        "first_failure": (failing[0].message.splitlines()[0] if failing else ""),
        "classification": report.classification.get("kind", ""),
        "classified": report.classification.get("text", ""),
        "runs": [(r["run"], r["passed"], r.get("first")) for r in report.classification.get("runs", [])],
        "rounding": (getattr(jax_result, "notes", None) or {}).get("rounding", ""),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ports", default=",".join(PORTS), help="comma-separated import strings")
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worst", type=int, default=6, help="modules printed per port and precision")
    parser.add_argument("--json", help="write every module's figures here")
    parser.add_argument(
        "--verdicts",
        metavar="N",
        nargs="?",
        const=len(CHECKS),
        type=int,
        help="instead, run the first N checks of CHECKS (all by default) at each precision",
    )
    parser.add_argument(
        "--checks",
        help="with --verdicts: these checks instead, comma-separated WORKLOAD@REFERENCE "
        "(examples.port.convnet:port@torch, stack:256@numpy-fd)",
    )
    args = parser.parse_args(argv)
    import jax

    device = jax.devices()[0]
    print(f"JAX {jax.__version__} on {device.platform} ({device.device_kind})", flush=True)
    if args.verdicts is not None:
        checks = CHECKS[: args.verdicts]
        if args.checks:
            checks = tuple(tuple(c.split("@", 1)) for c in args.checks.split(","))
        return _verdicts(checks, args.precisions.split(","), args.json)
    results = []
    for spec in args.ports.split(","):
        for precision in args.precisions.split(","):
            try:
                found = measure(spec, precision, args.seed)
            except Exception as exc:  # one port's failure is a line, not the end of the run
                print(f"{spec} {precision}: failed: {type(exc).__name__}: {exc}", flush=True)
                continue
            results.append(found)
            rows = sorted(found["modules"], key=lambda r: -r["beyond"])
            redrawn = sum(r["beyond"] > 0.01 for r in rows)
            device_redrawn = sum(r["device_beyond"] > 0.01 for r in rows)
            medians = [r["median"] for r in rows]
            print(
                f"{spec} [{precision}] {found['seconds']} s: {len(rows)} modules, {redrawn} with >1 % of "
                f"entries beyond the float32 permit ({device_redrawn} beyond the device's); median ratio "
                f"{np.median(medians):.3g}, largest {max(r['max'] for r in rows):.3g}",
                flush=True,
            )
            for r in rows[: args.worst]:
                print(
                    f"    {r['module']:<32} {r['type']:<14} median {r['median']:.3g} max {r['max']:.3g} "
                    f"beyond {100 * r['beyond']:.1f} % rel {r['max_rel']:.2e}; device's permit: median "
                    f"{r['device_median']:.3g} beyond {100 * r['device_beyond']:.1f} %",
                    flush=True,
                )
    if args.json:
        info = {"platform": device.platform, "device_kind": device.device_kind, "jax": jax.__version__}
        Path(args.json).write_text(json.dumps({"device": info, "results": results}, indent=1))
    return 0


def _verdicts(checks: tuple, precisions: list[str], out: str | None) -> int:
    rows = []
    for spec, reference in checks:
        for precision in precisions:
            try:
                row = verdict(spec, reference, precision)
            except Exception as exc:  # one check's failure is a line
                row = {"workload": spec, "reference": reference, "precision": precision, "error": repr(exc)}
            rows.append(row)
            print(json.dumps(row), flush=True)
            if out:
                Path(out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
