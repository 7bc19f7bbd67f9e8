"""The stack in bfloat16: crosscheck against ``torch.testing.assert_close`` with its bfloat16 defaults.

Over ``--seeds`` seeds (default 20) of the stack (L = 8, N = 8, Gaussian), in bfloat16, each candidate's
gradient is judged twice against the float64 oracle's (on the same rounded arrays):

- crosscheck: the candidate's comparison passed (tolerances from the stack's rounding model with
  bfloat16's unit roundoff for storing and float32's for summing);
- ``assert_close``: ``torch.testing.assert_close(candidate, oracle, rtol=1.6e-2, atol=1e-5)``, the
  defaults PyTorch uses for bfloat16, one pair of numbers for every entry.

Healthy candidates are JAX and PyTorch computing in bfloat16 (and a NumPy gradient storing each product
in bfloat16 after a float32 sum, as the planted ones do); a flag on one is a false alarm. Planted bugs
(the NumPy gradient with a bug) not flagged are misses. A bug that scales the gradient by ``1 + eps``
stands for errors of every size: the smallest ``eps`` flagged on every seed is the detection limit on
this case; each bug is also judged in float32 (what "check in float32 too" finds). The second table
gives the flags of every candidate by width ``d`` (2 to 32): where a bug is caught on every seed while
the healthy ones pass, the smallest size at which it is caught.

With ``--ports``, the same on the two example ports, GPT-2 (``examples.port.gpt2``) and the convnet
(``examples.port.convnet``), healthy and with their planted bugs (``BUGS``): the JAX port's gradients
against PyTorch's, both computed in the dtype, judged by crosscheck (``reference="torch"``: each
side's rounding measured by its float32 re-run, capped by ``permit.LOW_PERMIT_ULPS``) and by
``assert_close`` with the dtype's defaults; each bug in float32 too. It also prints, per case, the
largest median rounding each side measured, in the dtype's unit roundoffs of the entry's scale (what
the cap must allow), and how many healthy seeds pass with the default reference (the model oracle)
over ``--oracle-seeds`` seeds (``--float32-seeds``: how many seeds of each bug in float32, default
``--seeds``; the float32 column is the same for both 16-bit dtypes).

Usage: ``python benchmarks/mixed_precision.py [--seeds 20] [--dtype bfloat16] [--ports]``, from the
repository root. Quote the output with the machine, its load (``cat /proc/loadavg``) and the date.
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import crosscheck
from crosscheck._compare import permit
from crosscheck._compare.dtypes import numpy_dtype

#: torch.testing.assert_close's defaults (rtol, atol) by dtype.
ASSERT_CLOSE = {"bfloat16": (1.6e-2, 1e-5), "float16": (1e-3, 1e-5), "float32": (1.3e-6, 1e-5)}
WIDTHS = (2, 4, 8, 16, 32)
EPSILONS = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)


def _grad(weights, x, *, mask_at=None, last_relu=True, mean=False, transpose=False, scale=1.0):
    """The stack's gradient in the arrays' dtype: products summed in float32 (NumPy's bfloat16
    matmul), each result stored in the dtype; with one planted bug when asked."""
    dtype, f32 = weights.dtype, np.float32
    ys, masks, y = [x], [], x
    for k, w in enumerate(weights):
        z = (y.astype(f32) @ w.astype(f32)).astype(dtype)
        mask = (z > 0) | (k == len(weights) - 1 and not last_relu)
        y = np.where(mask, z, 0).astype(dtype)
        ys.append(y)
        masks.append(mask)
    g = (2 * y.astype(f32) / (y.size if mean else 1)).astype(dtype)
    grads = np.empty(weights.shape, f32)
    for k in reversed(range(len(weights))):
        delta = g if k == mask_at else np.where(masks[k], g, 0).astype(dtype)
        grads[k] = ys[k].astype(f32).T @ delta.astype(f32)
        g = (delta.astype(f32) @ weights[k].astype(f32).T).astype(dtype)
    grads = grads.transpose(0, 2, 1) if transpose else grads
    return (grads * scale).astype(dtype)


def _named(name: str, **bug: Any) -> Callable:
    def grad(weights, x):
        return _grad(weights, x, **bug)

    grad.__name__ = name
    return grad


HEALTHY: list[Any] = ["jax", "torch", _named("numpy_lowp")]
BUGS = [
    _named("transposed", transpose=True),
    _named("mean_not_sum", mean=True),
    _named("no_last_relu", last_relu=False),
    _named("mask_dropped_at_layer_5", mask_at=5),
    *(_named(f"scaled_{eps:g}", scale=1 + eps) for eps in EPSILONS),
]


def _assert_close(value: np.ndarray, reference: np.ndarray, dtype: str) -> bool:
    import torch

    rtol, atol = ASSERT_CLOSE[dtype]
    try:
        torch.testing.assert_close(
            torch.tensor(value.astype(np.float64)), torch.tensor(reference), rtol=rtol, atol=atol
        )
    except AssertionError:
        return False
    return True


def verdicts(dtype: str, seed: int, dim: int, candidates: list[Any]) -> dict[str, tuple[bool, bool]]:
    """``{candidate: (crosscheck passed, assert_close passed)}`` on one case."""
    report = crosscheck.run(dim=dim, dtype=dtype, seed=seed, backends=candidates)
    reference = report.gradients[report.reference]["weights"]
    out = {}
    for comparison in report.comparisons:
        value = report.gradients[comparison.backend]["weights"]
        out[comparison.backend] = (comparison.passed, _assert_close(value, reference, dtype))
    return out


def _flags(dtype: str, seeds: int, dim: int, candidates: list[Any]) -> dict[str, list[int]]:
    """``{candidate: [crosscheck flags, assert_close flags]}`` over ``seeds`` seeds."""
    flagged: dict[str, list[int]] = {}
    for seed in range(seeds):
        for name, (ours, theirs) in verdicts(dtype, seed, dim, candidates).items():
            counts = flagged.setdefault(name, [0, 0])
            counts[0] += not ours
            counts[1] += not theirs
    return flagged


def _port_cases():
    from examples.port import convnet, gpt2

    for model, module in (("gpt2", gpt2), ("convnet", convnet)):
        yield model, "healthy", module.port
        for bug in module.BUGS:
            yield model, bug, getattr(module, bug)


def _port_flags(port: Any, dtype: str, seeds: int) -> tuple[int, int, float, int]:
    """Over ``seeds`` seeds: crosscheck's flags, assert_close's flags, the largest median rounding of
    either side in ``dtype``'s unit roundoffs (``rounding_of_permitted`` x the cap), and how many passes
    carried the 16-bit verdict ("check in float32 too")."""
    ours = theirs = said = 0
    used = 0.0
    for seed in range(seeds):
        report = crosscheck.run(workload=port, reference="torch", backends=["jax"], dtype=dtype, seed=seed)
        ours += not report.passed
        torch_grads, jax_grads = report.gradients["torch"], report.gradients["jax"]
        theirs += not all(_assert_close(jax_grads[k], torch_grads[k], dtype) for k in torch_grads)
        for result in report.backends.values():
            used = max(used, result.notes.get("rounding_of_permitted") or 0.0)
        verdict = report.backends["jax"].verdict
        said += bool(report.passed and verdict is not None and "check in float32 too" in verdict.text)
    return ours, theirs, used * permit.permit_ulps(dtype), said


def ports(dtype: str, seeds: int, oracle_seeds: int, float32_seeds: int) -> None:
    """The GPT-2 and convnet columns: healthy and planted bugs, crosscheck against assert_close."""
    print(f"# {platform.node()}: ports in {dtype}, seeds 0..{seeds - 1}, reference torch")
    print(
        f"\n| model | case | crosscheck flags ({dtype}) | assert_close flags | crosscheck flags (float32) "
        f"| largest median rounding ({dtype} u) | passes saying 'check in float32 too' |"
    )
    print("|---|---|---|---|---|---|---|")
    healthy = {}
    for model, case, port in _port_cases():
        ours, theirs, used, said = _port_flags(port, dtype, seeds)
        in32 = (
            f"{_port_flags(port, 'float32', float32_seeds)[0]}/{float32_seeds}"
            if case != "healthy" and float32_seeds
            else ""
        )
        row = (case, f"{ours}/{seeds}", f"{theirs}/{seeds}", in32, f"{used:.2f}", f"{said}/{seeds}")
        print(f"| {model} | " + " | ".join(row) + " |", flush=True)
        if case == "healthy":
            healthy[model] = port
    for model, port in healthy.items():
        passed = sum(crosscheck.run(workload=port, dtype=dtype, seed=s).passed for s in range(oracle_seeds))
        print(f"\n{model} healthy, the model oracle as reference: {passed}/{oracle_seeds} pass", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    parser.add_argument("--ports", action="store_true", help="the GPT-2 and convnet ports instead")
    parser.add_argument("--oracle-seeds", type=int, default=5, help="healthy ports with the model oracle")
    parser.add_argument("--float32-seeds", type=int, default=None, help="bugs in float32 (default: --seeds)")
    args = parser.parse_args()
    numpy_dtype(args.dtype)  # ml_dtypes, before anything runs
    if args.ports:
        wide = args.seeds if args.float32_seeds is None else args.float32_seeds
        ports(args.dtype, args.seeds, args.oracle_seeds, wide)
        return
    n = args.seeds
    print(f"# {platform.node()}: {args.dtype}, seeds 0..{n - 1}, L=8 N=8 d=16, Gaussian")
    low = _flags(args.dtype, n, 16, HEALTHY + BUGS)
    wide = _flags("float32", n, 16, BUGS)
    healthy = {getattr(c, "__name__", c) for c in HEALTHY}
    head = f"crosscheck flags ({args.dtype}) | assert_close flags | crosscheck flags (float32)"
    print(f"\n| candidate | kind | {head} |")
    print("|---|---|---|---|---|")
    for name, (ours, theirs) in low.items():
        kind, in32 = ("healthy", "") if name in healthy else ("bug", f"{wide[name][0]}/{n}")
        print(f"| {name} | {kind} | {ours}/{n} | {theirs}/{n} | {in32} |")
    print(f"\nFlags in {args.dtype} by width d (crosscheck / assert_close, of {n} seeds):\n")
    names = list(low)
    print("| d | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for dim in WIDTHS:
        counts = _flags(args.dtype, n, dim, HEALTHY + BUGS)
        print(f"| {dim} | " + " | ".join(f"{counts[k][0]} / {counts[k][1]}" for k in names) + " |")


if __name__ == "__main__":
    main()
