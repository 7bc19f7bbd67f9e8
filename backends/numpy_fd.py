"""The NumPy finite-difference oracle: float64, no autodiff, an error bar on every entry.

How it works (see README, "The oracle"). With every ReLU mask held fixed, the loss restricted to one
weight ``W[k][i, j]`` is exactly a quadratic, so a central difference whose step crosses no kink has
no truncation error: its only error is rounding, which shrinks as the step grows. The oracle therefore
takes, per entry, the largest step that crosses no kink:

1. It starts from ``min(h_cap, dist / 8)`` (a power of two), where ``h_cap`` is the RMS of the layer's
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

The error bar of each entry bounds rounding, in two terms: the float64 error of the two loss evaluations
divided by the step, and the error of the shared prefix, which moves the point being differentiated
(both sized by the rounding model of ``crosscheck._stack``, whose backward pass serves only to size
error bars; the estimate itself comes from loss evaluations alone).
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
    #: The oracle always answers in float64, whatever the case's dtype.
    output_dtype = "float64"

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
            "value": np.zeros(shape),
            "error": np.zeros(shape),
            "step": np.zeros(shape),
            "kink": np.zeros(shape, bool),
            "kink_at": np.full(shape + (3,), -1, np.int64),
        }
        total, done, evaluations = shape[0] * shape[1] * shape[2], 0, 0
        for k in range(shape[0]):
            evaluations += _layer(fwd, k, out)
            done += shape[1] * shape[2]
            if progress is not None:
                progress(done, total)
        # The loss evaluations share the rounded prefix of the stack, so the estimate is the derivative
        # at a point moved by float64 rounding; that error is sized by the stack's rounding model.
        deltas, _ = _stack.backward(fwd)
        out["error"] += _stack.rounding_model(fwd, deltas, "float64").grad_bound
        return OracleEstimate(**out, evaluations=evaluations)

    def info(self) -> dict[str, str]:
        return {
            "framework": "numpy",
            "version": np.__version__,
            "device": "cpu",
            "method": "kink-aware central difference, float64",
        }


def _layer(fwd: _stack.Forward, k: int, out: dict[str, np.ndarray]) -> int:
    """Fill ``out[...][k]`` for every entry of layer ``k``; return the number of loss evaluations."""
    w, y, z = fwd.weights[k], fwd.ys[k], fwd.zs[k]
    d = w.shape[0]
    rms = float(np.sqrt(np.mean(w**2)))
    h_cap = 2.0 ** math.floor(math.log2(rms)) if rms > 0 else 1.0
    sigma = _float64_output_sigma(fwd, k)
    step = np.minimum(h_cap, _distance_to_first_kink(y, z) / 8)
    with np.errstate(divide="ignore"):
        step = np.where(step > 0, 2.0 ** np.floor(np.log2(step)), 0.0)
    rows, cols = np.divmod(np.arange(d * d), d)
    step, pending, evaluations = step.ravel(), np.ones(d * d, bool), 0
    where = np.full((d * d, 3), -1, np.int64)
    # At distance 0 (an exact zero in the layer the weight feeds) no step avoids the kink.
    for flat in np.flatnonzero(step == 0):
        where[flat] = (k, *_exact_zero_at(y, z, *divmod(int(flat), d)))
    while True:
        todo = np.flatnonzero(pending & (step >= h_cap * _MIN_STEP_RATIO))
        if todo.size == 0:
            break
        value, error, crossed, at = _central(fwd, k, rows[todo], cols[todo], step[todo], sigma, False)
        evaluations += 2 * todo.size
        ok = todo[~crossed]
        _store(out, k, ok, value[~crossed], error[~crossed], step[ok])
        pending[ok] = False
        where[todo[crossed]] = at[crossed]
        step[todo[crossed]] *= _SHRINK
    stuck = np.flatnonzero(pending)
    if stuck.size:
        # On (or closer than the smallest step to) a kink: take the derivative of the base point's piece.
        h = np.full(stuck.size, h_cap)
        value, error, _, _ = _central(fwd, k, rows[stuck], cols[stuck], h, sigma, True)
        evaluations += 2 * stuck.size
        _store(out, k, stuck, value, error, h)
        out["kink"][k].flat[stuck] = True
        out["kink_at"][k].reshape(-1, 3)[stuck] = where[stuck]
    return evaluations


def _exact_zero_at(y: np.ndarray, z: np.ndarray, i: int, j: int) -> tuple[int, int]:
    """The (row, unit) of the zero pre-activation that ``W[i, j]`` moves (distance 0)."""
    rows = np.flatnonzero((z[:, j] == 0) & (y[:, i] != 0))
    return int(rows[0]), j


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
    """Norm of the float64 rounding error of ``y[L]`` made by layers ``k`` onwards (a variance bound:
    each layer's fresh rounding, propagated through ``W**2``, which can only overestimate it)."""
    u, var = _stack.UNIT_ROUNDOFF["float64"], 0.0
    for m in range(k, len(fwd.zs)):
        var = var @ (fwd.weights[m] ** 2) if m > k else 0.0
        var = (var + _stack.fresh_sigma(fwd.ys[m], fwd.weights[m], u, False) ** 2) * fwd.masks[m]
    return float(np.sqrt(np.sum(var)))


def _central(fwd, k, rows, cols, h, sigma, frozen):
    """Central differences for entries ``(k, rows[s], cols[s])`` with steps ``h[s]``.

    Returns ``(value, error, crossed, where)``: the estimates, their error bounds, whether a mask changed
    at either end, and the first changed mask's ``(layer, row, unit)``.
    """
    n, d = fwd.zs[k].shape
    per_chunk = max(1, _CHUNK_VALUES // (2 * n * d))
    parts = [
        _central_chunk(
            fwd, k, rows[s : s + per_chunk], cols[s : s + per_chunk], h[s : s + per_chunk], sigma, frozen
        )
        for s in range(0, len(rows), per_chunk)
    ]
    return tuple(np.concatenate(p) for p in zip(*parts, strict=True))


def _central_chunk(fwd, k, rows, cols, h, sigma, frozen):
    s = len(rows)
    steps = np.concatenate([h, -h])
    z = np.repeat(fwd.zs[k][None], 2 * s, axis=0)
    # Only column j of z[k] depends on W[k][i, j], and linearly: z[:, j] += h * y[k][:, i].
    z[np.arange(2 * s), :, np.concatenate([cols, cols])] += (
        steps[:, None] * fwd.ys[k][:, np.concatenate([rows, rows])].T
    )
    crossed = np.zeros(2 * s, bool)
    where = np.full((2 * s, 3), -1, np.int64)
    n, d = z.shape[1:]
    for m in range(k, len(fwd.zs)):
        if m > k:
            # One tall product rather than a batch of small ones: BLAS is far faster on it.
            z = (z.reshape(-1, d) @ fwd.weights[m]).reshape(2 * s, n, d)
        base = fwd.masks[m]
        if frozen:
            z *= base
            continue
        changed = z > 0
        np.not_equal(changed, base, out=changed)
        new = changed.reshape(2 * s, -1).any(axis=1) & ~crossed
        if new.any():
            first = changed[new].reshape(int(new.sum()), -1).argmax(axis=1)
            where[new] = np.column_stack([np.full(first.size, m), *np.divmod(first, d)])
            crossed |= new
        np.maximum(z, 0.0, out=z)
    y = z
    losses = np.einsum("snd,snd->s", y, y)
    plus, minus = losses[:s], losses[s:]
    value = (plus - minus) / (2 * h)
    u = _stack.UNIT_ROUNDOFF["float64"]
    n_terms = y.shape[1] * y.shape[2]
    # Each loss is off by at most 2 * sqrt(loss) * ||error of y[L]|| (Cauchy-Schwarz) plus its own sum
    # (worst case, (n - 1) * u * loss). The error of y[L] was modelled at the base point; it scales with
    # the size of y[L], which a large step changes: hence the factor sqrt(loss / base loss).
    base = fwd.loss
    grow = np.sqrt(np.maximum(losses / base, 1.0)) if base > 0 else 1.0
    loss_error = _stack.SAFETY * 2 * np.sqrt(losses) * sigma * grow + u * n_terms * losses
    error = (loss_error[:s] + loss_error[s:]) / (2 * h) + 4 * u * np.abs(value)
    kinked = crossed[:s] | crossed[s:]
    where_first = np.where(crossed[:s, None], where[:s], where[s:])
    return value, error, kinked, where_first
