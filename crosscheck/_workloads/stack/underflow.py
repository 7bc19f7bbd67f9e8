"""Underflow in the stack: what values below the smallest normal number can do to it (the tolerance's
``underflow`` term; 0 for a case of ordinary magnitudes)."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from crosscheck._compare.constants import SIGNIFICAND_BITS, STORAGE_ROUNDOFF
from crosscheck._compare.dtypes import finfo
from crosscheck._workloads.stack.forward import Forward


@dataclasses.dataclass(frozen=True)
class Underflow:
    """What underflow can do to the stack computed in a dtype: absolute error bounds.

    Attributes:
        z: ``(L, N, d)`` bounds of the pre-activations' underflow error.
        grad: ``(L, d, d)`` bounds of the gradient entries' underflow error (0 where nothing can
            underflow, as in any case of ordinary magnitudes).
    """

    z: np.ndarray
    grad: np.ndarray


def underflow(fwd: Forward, deltas: list[np.ndarray], dtype: str) -> Underflow:
    """Bound the error of values falling below the smallest normal number ``tiny`` of ``dtype``.

    Hardware may flush such values to zero (XLA on CPU does; PyTorch keeps gradual underflow, which
    rounds them to a subnormal spacing instead): each operation whose result, or an input, is below
    ``tiny`` can be off by up to ``tiny``. Where can that happen? A dot product's partial sums are all
    multiples of twice ``tiny`` unless some product is below ``2**p * tiny`` (``p`` significand bits),
    which needs a factor below ``sqrt(2**p * tiny)``: for such a dot product of ``n`` terms, the local
    error is at most ``tiny`` per small product plus ``tiny`` per partial sum. A 16-bit dtype sums in
    float32 (whose range no such case leaves) and stores the result: its local error is ``tiny`` where
    the stored result is below ``tiny`` (``_stored``). Local errors then travel like any perturbation,
    to first order through the absolute values of the rest of the computation (the arithmetic's
    amplification). A case of ordinary magnitudes has no small factor anywhere: the bound is exactly 0
    there.
    """
    tiny, bits = float(finfo(dtype).tiny), SIGNIFICAND_BITS[dtype]
    if dtype in STORAGE_ROUNDOFF:
        results = [*fwd.zs, *(y.T @ d for y, d in zip(fwd.ys, deltas, strict=False))]
        results += [d @ w.T for d, w in zip(deltas[1:], fwd.weights[1:], strict=True)]
        inputs, small = [fwd.weights, fwd.ys[0], *results], tiny
        local: Any = functools.partial(_stored, tiny=tiny)
    else:
        inputs, small = [fwd.weights, *fwd.ys, *deltas], float(np.sqrt(2.0**bits * tiny))
        local = functools.partial(_local, small=small, tiny=tiny)
    if not any(_has_small(a, small) for a in inputs):
        # Read-only zeros of the right shapes: no gradient-sized array for a bound that is 0.
        zero = np.zeros(())
        return Underflow(
            np.broadcast_to(zero, (len(fwd.zs), *fwd.zs[0].shape)), np.broadcast_to(zero, fwd.weights.shape)
        )
    return _propagate(fwd, deltas, tiny, local)


def _propagate(fwd: Forward, deltas: list[np.ndarray], tiny: float, local: Any) -> Underflow:
    """Each product's local underflow error (``local(a, b)``), carried through the rest of the pass."""
    weights = np.abs(fwd.weights)
    e_w = tiny * ((fwd.weights != 0) & (weights < tiny))  # subnormal inputs, read as zero (DAZ)
    e_y = tiny * ((fwd.ys[0] != 0) & (np.abs(fwd.ys[0]) < tiny))
    e_ys, e_zs = [e_y], []
    for m, w in enumerate(fwd.weights):
        y = np.abs(fwd.ys[m])
        e_z = e_y @ weights[m] + y @ e_w[m] + local(fwd.ys[m], w)
        e_zs.append(e_z)
        e_y = e_z * fwd.masks[m]
        e_ys.append(e_y)
    e_g = 2.0 * e_y
    grad = np.zeros_like(fwd.weights)
    for m in reversed(range(len(fwd.weights))):
        e_delta = e_g * fwd.masks[m]
        delta = np.abs(deltas[m])
        grad[m] = e_ys[m].T @ delta + np.abs(fwd.ys[m]).T @ e_delta + local(fwd.ys[m].T, deltas[m])
        if m:
            e_g = e_delta @ weights[m].T + delta @ e_w[m].T + local(deltas[m], fwd.weights[m].T)
    return Underflow(np.stack(e_zs), grad)


def _has_small(values: np.ndarray, small: float) -> bool:
    """Whether any value is nonzero and below ``small`` in size, looked at a layer (or row) at a time:
    never a temporary of the weights' size."""
    return any(
        np.any((part != 0) & (np.abs(part) < small))
        for part in np.asarray(values).reshape(-1, values.shape[-1])
    )


def _stored(a: np.ndarray, b: np.ndarray, tiny: float) -> np.ndarray:
    """The underflow of storing ``a @ b`` (summed in float32) in a 16-bit dtype: ``tiny`` where the
    result is below it and not zero (flushed, or rounded to a subnormal spacing)."""
    result = np.abs(a @ b)
    return tiny * ((result != 0) & (result < tiny))


def _local(a: np.ndarray, b: np.ndarray, small: float, tiny: float) -> np.ndarray | float:
    """The underflow ``a @ b`` itself can add to each entry: ``tiny`` for each product that may fall
    below ``2**p * tiny`` (a factor below ``small``) and for each partial sum, where any product may."""
    a_small = ((a != 0) & (np.abs(a) < small)).sum(axis=1)
    b_small = ((b != 0) & (np.abs(b) < small)).sum(axis=0)
    if not (a_small.any() or b_small.any()):
        return 0.0
    count = np.minimum(a_small[:, None] + b_small[None, :], a.shape[1])
    return tiny * (count + a.shape[1] * (count > 0))


def overflow(fwd: Forward, deltas: list[np.ndarray], dtype: str) -> str:
    """Where the stack's float64 values pass the largest finite number of ``dtype`` (a float16 case of
    large magnitudes), said as the cause of a non-finite result; ``""`` when none does."""
    largest = float(finfo(dtype).max)
    named = [(f"pre-activation z[{m}]", z) for m, z in enumerate(fwd.zs)]
    named += [(f"backward signal into layer {m}", d) for m, d in enumerate(deltas)]
    named += [
        (f"gradient of layer {m}", y.T @ d) for m, (y, d) in enumerate(zip(fwd.ys, deltas, strict=False))
    ]
    for what, values in named:
        peak = float(np.max(np.abs(values), initial=0.0))
        if peak > largest:
            return (
                f"{dtype} overflows on this case: the {what} reaches {peak:.3g}, "
                f"above {dtype}'s largest {largest:.6g}"
            )
    return ""
