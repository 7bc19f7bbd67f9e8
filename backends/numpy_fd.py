"""The NumPy finite-difference oracle: float64, no autodiff, an error bar on every entry.

How it works (see README, "The oracle"). With every ReLU mask held fixed, the loss restricted to one
weight ``W[k][i, j]`` is exactly a quadratic, so a central difference whose step crosses no kink has
no truncation error: its only error is rounding, which shrinks as the step grows. The oracle therefore
takes, per entry, the largest step that crosses no kink:

1. It starts from ``min(h_cap, dist / 2)`` (a power of two), where ``h_cap`` is the RMS of the layer's
   weights and ``dist`` the exact distance, along that weight, to the first kink of the layer the weight
   feeds (that layer's pre-activations move linearly with the weight).
2. It evaluates the loss at ``w +- h`` for all entries of a layer at once (reusing the unchanged prefix
   of the stack) and compares every ReLU mask at the perturbed points with the base point. The masks
   being piecewise-linear in ``h``, equal masks at both ends prove that no kink was crossed.
3. Entries whose step crossed a kink retry with a quarter of the step, down to ``h_cap * 2**-40``. An
   entry that still crosses sits on a kink (an exact zero pre-activation, or one closer than that): its
   value is the derivative of the piece the point belongs to, i.e. the loss evaluated with the masks held
   at the base point, which follows ``jax.nn.relu``'s convention (derivative 0 at 0); the entry is
   flagged with the kink's ``(layer, row, unit)``.

The error bar of each entry is a rounding-error bound: the float64 forward error of both loss
evaluations (modelled as in ``crosscheck._stack``, times its safety factor) divided by the step.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from crosscheck import _stack

__all__ = ["FiniteDifferenceOracle", "OracleEstimate"]

#: Entries of one perturbed batch (2 * S * N * d float64 values), sized to stay cache-friendly.
_CHUNK_VALUES = 1 << 19
#: Steps shrink by this factor after a crossing, down to h_cap * _MIN_STEP_RATIO.
_SHRINK, _MIN_STEP_RATIO = 0.25, 2.0**-40


@dataclasses.dataclass(frozen=True)
class OracleEstimate:
    """The oracle's answer.

    Attributes:
        value: the gradient estimate, ``(L, d, d)`` float64.
        error: a bound on ``|value - exact|`` per entry.
        step: the step used per entry.
        kink: ``(L, d, d)`` bool: no step avoided a kink, so the piece's derivative was taken.
        kink_at: ``(L, d, d, 3)``: for those entries, the kink ``(layer, row, unit)`` crossed (-1 elsewhere).
        evaluations: how many perturbed loss evaluations were made.
    """

    value: np.ndarray
    error: np.ndarray
    step: np.ndarray
    kink: np.ndarray
    kink_at: np.ndarray
    evaluations: int


class FiniteDifferenceOracle:
    """Finite-difference gradient of the ReLU stack in float64, with an error bound per entry."""

    name = "numpy-fd"

    def grad(self, weights: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Return the float64 gradient estimate, shape ``(L, d, d)``."""
        return self.estimate(weights, x).value

    def estimate(
        self,
        weights: np.ndarray,
        x: np.ndarray,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> OracleEstimate:
        """Estimate the gradient with an error bound per entry.

        Args:
            weights: ``(L, d, d)`` float array (not modified).
            x: ``(N, d)`` float array (not modified).
            progress: called as ``progress(done, total)`` in units of perturbed entries.
        """
        fwd = _stack.forward(weights, x)
        shape = fwd.weights.shape
        out = {
            "value": np.zeros(shape), "error": np.zeros(shape), "step": np.zeros(shape),
            "kink": np.zeros(shape, bool), "kink_at": np.full(shape + (3,), -1, np.int64),
        }
        total, done, evaluations = shape[0] * shape[1] * shape[2], 0, 0
        for k in range(shape[0]):
            evaluations += _layer(fwd, k, out)
            done += shape[1] * shape[2]
            if progress is not None:
                progress(done, total)
        return OracleEstimate(**out, evaluations=evaluations)

    def info(self) -> dict[str, str]:
        return {"framework": "numpy", "version": np.__version__, "device": "cpu",
                "method": "kink-aware central difference, float64"}


def _layer(fwd: _stack.Forward, k: int, out: dict[str, np.ndarray]) -> int:
    """Fill ``out[...][k]`` for every entry of layer ``k``; return the number of loss evaluations."""
    w, y, z = fwd.weights[k], fwd.ys[k], fwd.zs[k]
    d = w.shape[0]
    rms = float(np.sqrt(np.mean(w**2)))
    h_cap = 2.0 ** math.floor(math.log2(rms)) if rms > 0 else 1.0
    sigma = _float64_output_sigma(fwd, k)
    step = np.minimum(h_cap, _distance_to_first_kink(y, z) / 2)
    with np.errstate(divide="ignore"):
        step = np.where(step > 0, 2.0 ** np.floor(np.log2(step)), 0.0)
    rows, cols = np.divmod(np.arange(d * d), d)
    step, pending, evaluations = step.ravel(), np.ones(d * d, bool), 0
    while True:
        todo = np.flatnonzero(pending & (step >= h_cap * _MIN_STEP_RATIO))
        if todo.size == 0:
            break
        value, error, crossed, _ = _central(fwd, k, rows[todo], cols[todo], step[todo], sigma, False)
        evaluations += 2 * todo.size
        ok = todo[~crossed]
        _store(out, k, ok, value[~crossed], error[~crossed], step[ok])
        pending[ok] = False
        step[todo[crossed]] *= _SHRINK
    stuck = np.flatnonzero(pending)
    if stuck.size:
        # On (or closer than the smallest step to) a kink: take the derivative of the base point's piece.
        h = np.full(stuck.size, h_cap)
        _, _, _, where = _central(fwd, k, rows[stuck], cols[stuck], h, sigma, False)
        value, error, _, _ = _central(fwd, k, rows[stuck], cols[stuck], h, sigma, True)
        evaluations += 4 * stuck.size
        _store(out, k, stuck, value, error, h)
        out["kink"][k].flat[stuck] = True
        out["kink_at"][k].reshape(-1, 3)[stuck] = where
    return evaluations


def _store(out, k, flat, value, error, step):
    out["value"][k].flat[flat] = value
    out["error"][k].flat[flat] = error
    out["step"][k].flat[flat] = step


def _distance_to_first_kink(y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``dist[i, j]``: how far ``W[i, j]`` can move before some ``z[n, j]`` changes sign."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.abs(z)[:, None, :] / np.abs(y)[:, :, None]
    ratio[np.broadcast_to((y == 0)[:, :, None], ratio.shape)] = np.inf
    return ratio.min(axis=0)


def _float64_output_sigma(fwd: _stack.Forward, k: int) -> float:
    """Norm of the modelled float64 rounding error of ``y[L]`` made by layers ``k`` onwards."""
    u, var = _stack.UNIT_ROUNDOFF["float64"], None
    for m in range(k, len(fwd.zs)):
        var = _stack._matmul_variance(fwd.ys[m], var, fwd.weights[m], None, u, False)
        var = var * fwd.masks[m]
    return float(np.sqrt(np.sum(var)))


def _central(fwd, k, rows, cols, h, sigma, frozen):
    """Central differences for entries ``(k, rows[s], cols[s])`` with steps ``h[s]``.

    Returns ``(value, error, crossed, where)``: the estimates, their error bounds, whether a mask changed
    at either end, and the first changed mask's ``(layer, row, unit)``.
    """
    n, d = fwd.zs[k].shape
    per_chunk = max(1, _CHUNK_VALUES // (2 * n * d))
    parts = [
        _central_chunk(fwd, k, rows[s:s + per_chunk], cols[s:s + per_chunk], h[s:s + per_chunk],
                       sigma, frozen)
        for s in range(0, len(rows), per_chunk)
    ]
    return tuple(np.concatenate(p) for p in zip(*parts, strict=True))


def _central_chunk(fwd, k, rows, cols, h, sigma, frozen):
    s = len(rows)
    steps = np.concatenate([h, -h])
    z = np.repeat(fwd.zs[k][None], 2 * s, axis=0)
    # Only column j of z[k] depends on W[k][i, j], and linearly: z[:, j] += h * y[k][:, i].
    z[np.arange(2 * s), :, np.concatenate([cols, cols])] += steps[:, None] * fwd.ys[k][:, np.concatenate([rows, rows])].T
    crossed = np.zeros(2 * s, bool)
    where = np.full((2 * s, 3), -1, np.int64)
    for m in range(k, len(fwd.zs)):
        if m > k:
            z = y @ fwd.weights[m]
        base = fwd.masks[m]
        mask = np.broadcast_to(base, z.shape) if frozen else z > 0
        if not frozen:
            changed = mask != base
            first = changed.reshape(2 * s, -1).argmax(axis=1)
            new = ~crossed & changed.reshape(2 * s, -1)[np.arange(2 * s), first]
            where[new] = np.column_stack([np.full(new.sum(), m), *np.divmod(first[new], z.shape[2])])
            crossed |= new
        y = np.where(mask, z, 0.0)
    losses = np.einsum("snd,snd->s", y, y)
    plus, minus = losses[:s], losses[s:]
    value = (plus - minus) / (2 * h)
    u = _stack.UNIT_ROUNDOFF["float64"]
    n_terms = y.shape[1] * y.shape[2]
    # Each loss is off by at most 2 * sqrt(loss) * ||error of y[L]|| (Cauchy-Schwarz) plus its own sum.
    loss_error = _stack.SAFETY * (2 * np.sqrt(losses) * sigma + u * math.sqrt(n_terms) * losses)
    error = (loss_error[:s] + loss_error[s:]) / (2 * h) + 4 * u * np.abs(value)
    kinked = crossed[:s] | crossed[s:]
    where_first = np.where(crossed[:s, None], where[:s], where[s:])
    return value, error, kinked, where_first
