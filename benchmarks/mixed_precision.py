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

Usage: ``python benchmarks/mixed_precision.py [--seeds 20] [--dtype bfloat16]``, from the repository
root. Quote the output with the machine, its load (``cat /proc/loadavg``) and the date.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    args = parser.parse_args()
    numpy_dtype(args.dtype)  # ml_dtypes, before anything runs
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
