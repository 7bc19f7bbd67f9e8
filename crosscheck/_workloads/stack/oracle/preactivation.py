"""The stack's whole gradient from finite differences in each layer's outputs: every entry with an error
bar, at about ``L**2 N d**3 / 2`` flops where the entry-by-entry oracle (``fd.estimate``) takes
``L**2 N d**4``.

Why it holds. With ``z[k] = y[k] @ W[k]`` and ``y[k + 1] = relu(z[k])`` (``forward``), layer ``k``'s
weight gradient is exactly ``y[k].T @ delta[k]``, where ``delta[k] = dloss/dz[k] = mask[k] * g[k]`` and
``g[k] = dloss/dy[k + 1]``. So the oracle differences the loss in the ``N d`` outputs of each layer
instead of its ``d**2`` weights:

1. ``g[k][n, j]`` for every unit on at the float64 point (an off unit's ``delta`` is 0, the derivative
   ``jax.nn.relu`` takes at an exact zero too): moving ``y[k + 1][n, j]`` by ``t`` moves row ``n`` of
   ``z[k + 1]`` by ``t * W[k + 1][j]`` and no other row, so each perturbed point is one row of the
   later layers, evaluated in batches by ``perturb``. With the later masks held the loss is exactly a
   quadratic in ``t``: a kink-aware difference, central or one-sided, within the exact distance to the
   next layer's kinks on each side and retried within later ones, an output that no step frees from a
   kink taking its piece's derivative, flagged (``outputs``). The last layer's is the loss's own:
   ``g[L - 1] = 2 y[L]``, exact in float64 (a doubling).
2. ``value[k] = y[k].T @ delta[k]`` in float64. Its error bar propagates each ``delta``'s, through
   ``|y[k]|.T @ error``, adds the product's own rounding (at most ``gamma_N |y[k]|.T @ |delta[k]|``,
   ``gamma_N = N u / (1 - N u)``) and, as ``fd.estimate`` does, the float64 rounding of the shared
   forward pass, which moves the point being differentiated (the rounding model's ``grad_bound``).
3. Kinks, in ``fd.estimate``'s form (``kink`` and ``kink_at`` per entry): an entry whose own
   pre-activation lies nearer than the entry-by-entry oracle's smallest step (``fd.stuck_distance``
   along ``W[k][i, j]``: ``|z[k][n, j]| / |y[k][n, i]|``) is flagged with that kink, as that oracle flags
   it; an entry fed (``y[k][n, i] != 0``) by an output ``(k, n, j)`` whose difference sat on a later
   kink is flagged with that kink (fewer than the entry-by-entry oracle flags: a one-sided difference
   frees an output from a kink on one side, an exact zero of a later layer included, and its value is
   that piece's derivative, the convention's). Where several kinks flag one entry, one that is not an
   exact zero is named (an exact zero the candidate computes exactly is judged; any other leaves the
   entry unjudgeable: the cautious choice).

The values come from loss evaluations alone; the float64 backward pass (``forward.backward``) only sizes
the rounding model, as for ``fd.estimate``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from crosscheck._compare import terms
from crosscheck._compare.constants import UNIT_ROUNDOFF
from crosscheck._workloads.stack import rounding as _stack
from crosscheck._workloads.stack.forward import Forward, backward, forward
from crosscheck._workloads.stack.oracle import fd as _fd
from crosscheck._workloads.stack.oracle import outputs as _outputs
from crosscheck._workloads.stack.oracle import parallel as _parallel
from crosscheck._workloads.stack.oracle import perturb as _perturb

__all__ = ["PreactivationEstimate", "estimate", "flops", "memory"]


@dataclasses.dataclass(frozen=True)
class PreactivationEstimate:
    """The oracle's answer, with the fields a judge reads of ``fd.OracleEstimate``.

    Attributes:
        value: the gradient estimate, ``(L, d, d)`` float64.
        error: a bound on ``|value - exact|`` per entry.
        kink: ``(L, d, d)`` bool: the entry's value is a piece's derivative at a kink no step avoided.
        kink_at: ``(L, d, d, 3)``: for those entries, the kink ``(layer, row, unit)`` (-1 elsewhere).
        evaluations: how many perturbed loss evaluations were made.
        delta, delta_error: ``(L, N, d)``: the estimates of ``dloss/dz[k]`` and their error bounds.
        delta_kink_at: ``(L, N, d, 3)``: the later kink an output's difference sat on (-1 elsewhere).
        rounding: the float64 rounding model that sized the error bars (a judge reuses it).
    """

    value: np.ndarray
    error: np.ndarray
    kink: np.ndarray
    kink_at: np.ndarray
    evaluations: int
    delta: np.ndarray
    delta_error: np.ndarray
    delta_kink_at: np.ndarray
    rounding: _stack.RoundingModel | None = None


def flops(layers: int, batch: int, dim: int) -> float:
    """Matrix-product flops of ``estimate``, counted dense: per output of the ``L - 1`` first layers,
    two perturbed rows through the products after the next (the next is a row of its weights). Only
    units on at the point are perturbed and multiplied, about a quarter of this."""
    # sum over k < L - 1 of N d outputs, 2 rows, (L - 2 - k) products of 2 d**2 flops
    return float(4 * batch * dim**3 * ((layers - 1) * (layers - 2) // 2))


def memory(layers: int, batch: int, dim: int) -> int:
    """Bytes ``estimate`` holds at its peak, about: its answer (value, error bar, kink flags and places:
    41 bytes an entry), the float64 rounding model (its Monte Carlo samples, and three gradient-sized
    arrays while its parts are pooled) and, per core, one batch row's reduced weights, a piece's
    distances to the next layer's kinks (``outputs._sides``: about four float64 arrays of half a layer)
    and ``perturb``'s blocks of rows."""
    entries, f64 = layers * dim * dim, 8
    answer = (2 * f64 + 1 + 3 * 8) * entries
    model = f64 * (_stack.MODEL_SAMPLES * ((layers + 1) * batch * dim + 5 * batch * dim) + 3 * entries)
    per_core = 4 * layers * dim * dim + 4 * f64 * dim * dim // 2 + 4 * f64 * _perturb._CHUNK_VALUES
    return answer + model + per_core * _parallel.workers()


@_parallel.blas_on_one_thread
def estimate(
    weights: np.ndarray, x: np.ndarray, *, progress: Callable[[int, int], None] | None = None
) -> PreactivationEstimate:
    """Estimate the whole gradient of the stack, every entry with an error bound, from finite
    differences of the loss in each layer's outputs.

    Args:
        weights: ``(L, d, d)`` float array (not modified).
        x: ``(N, d)`` float array (not modified).
        progress: called as ``progress(done, total)`` in units of perturbed outputs.
    """
    fwd = forward(weights, x)
    n_layers, d = fwd.weights.shape[:2]
    batch = fwd.ys[0].shape[0]
    units = _Units.empty(n_layers, batch, d)
    units.delta[-1] = 2.0 * fwd.ys[-1]  # zero where the last layer's units are off
    sigmas = _outputs.row_sigmas(fwd)
    # Each piece is one batch row of one layer (its perturbed rows share one path), earlier (costlier)
    # layers first; narrow layers go whole, their NumPy calls too short to share between threads.
    narrow = d < _parallel.MIN_PARALLEL_WIDTH
    rows = [np.arange(batch)] if narrow else [np.array([n]) for n in range(batch)]
    pieces = [(k, block) for k in range(n_layers - 1) for block in rows]
    total = sum(int(np.count_nonzero(fwd.masks[k])) for k in range(n_layers - 1))
    scales = [_on_rms(fwd, k) for k in range(n_layers)]
    deltas, _ = backward(fwd, grads=False)
    done, evaluations = 0, 0

    def piece(item: tuple[int, np.ndarray]) -> tuple[int, int]:
        k, block = item
        return _piece(fwd, k, block, units, sigmas[k + 1], scales[k])

    def model() -> _stack.RoundingModel:
        return _stack.rounding_model(fwd, deltas, "float64")

    with _parallel.beside(model, width=d, flops=_stack.rounding_flops(fwd)) as rounded:
        work = flops(n_layers, batch, d)
        for count, size in _parallel.in_parallel(piece, pieces, flops=work, width=d):
            evaluations += count
            done += size
            if progress is not None:
                progress(done, total)
        rounding = rounded()
    value, error = _assemble(fwd, units, rounding)
    kink, kink_at = _kinks(fwd, units)
    return PreactivationEstimate(
        value, error, kink, kink_at, evaluations, units.delta, units.error, units.kink_at, rounding
    )


@dataclasses.dataclass(frozen=True)
class _Units:
    """Per output ``(layer, row, unit)``: ``delta`` (``dloss/dz``), its error bound and the later kink
    its difference sat on (-1 where none); each piece fills its own rows."""

    delta: np.ndarray
    error: np.ndarray
    kink_at: np.ndarray

    @classmethod
    def empty(cls, layers: int, batch: int, dim: int) -> _Units:
        shape = (layers, batch, dim)
        return cls(np.zeros(shape), np.zeros(shape), np.full((*shape, 3), -1, np.int64))


def _on_rms(fwd: Forward, k: int) -> float:
    """The RMS of layer ``k``'s outputs that are on (what its outputs' steps are capped by)."""
    on = fwd.ys[k + 1][fwd.masks[k]]
    return float(np.sqrt(np.mean(np.square(on)))) if on.size else 0.0


def _piece(fwd: Forward, k: int, block: np.ndarray, units: _Units, sigma: np.ndarray, scale: float):
    """Difference the loss in layer ``k``'s outputs that are on in batch rows ``block``; fill ``units``.
    Returns the number of loss evaluations and of outputs. ``sigma``: ``outputs.row_sigmas(fwd)[k +
    1]``; ``scale``: ``_on_rms(fwd, k)``."""
    on_rows, cols = np.nonzero(fwd.masks[k][block])
    rows = block[on_rows]
    if rows.size == 0:
        return 0, 0
    central_only = _outputs.near_zero_later(fwd, k)
    result = _outputs.differentiate(fwd, k, rows, cols, sigma, scale, central_only)
    units.delta[k][rows, cols] = result["value"]
    units.error[k][rows, cols] = result["error"]
    units.kink_at[k][rows, cols] = result["kink_at"]
    return result["evaluations"], rows.size


def _assemble(fwd: Forward, units: _Units, rounding: _stack.RoundingModel) -> tuple[np.ndarray, np.ndarray]:
    """``value[k] = y[k].T @ delta[k]`` and its error bound, a layer at a time."""
    n_layers, batch, d = units.delta.shape
    u = UNIT_ROUNDOFF["float64"]
    gamma = batch * u / (1 - batch * u)  # a float64 sum of N products, any order (Higham's gamma_N)
    value, error = np.empty((n_layers, d, d)), np.empty((n_layers, d, d))
    for k in range(n_layers):
        y, delta = fwd.ys[k], units.delta[k]
        np.matmul(y.T, delta, out=value[k])
        # Every term is non-negative: the computed sum is within gamma of the exact one.
        np.matmul(np.abs(y).T, units.error[k] + gamma * np.abs(delta), out=error[k])
        error[k] *= 1 + 2 * gamma
        error[k] += terms.modelled(rounding.grad_sigma[k])
    return value, error


#: Groups of flagged entries of one layer: rows ``i``, columns ``j`` and each column's kink ``(P, 3)``.
_Found = list[tuple[np.ndarray, np.ndarray, np.ndarray]]


def _kinks(fwd: Forward, units: _Units) -> tuple[np.ndarray, np.ndarray]:
    """``kink`` and ``kink_at`` per entry (module docstring, 3): exact zeros written first, so that a
    kink that is not one is the one named where several flag an entry."""
    n_layers, _, d = units.delta.shape
    kink, kink_at = np.zeros((n_layers, d, d), bool), np.full((n_layers, d, d, 3), -1, np.int64)
    for k in range(n_layers):
        found = _own_kinks(fwd, k) + _later_kinks(fwd, k, units.kink_at[k])
        for exact in (True, False):
            for rows, cols, at in found:
                zero = np.array([fwd.zs[m][r, c] == 0 for m, r, c in at], bool)
                pick = zero if exact else ~zero
                if pick.any():
                    index = np.ix_(rows, cols[pick])
                    kink[k][index] = True
                    kink_at[k][index] = at[pick][None, :, :]
    return kink, kink_at


def _own_kinks(fwd: Forward, k: int) -> _Found:
    """Layer ``k``'s entries ``(i, j)`` whose own pre-activation ``z[k][n, j]`` lies nearer along
    ``W[k][i, j]`` than the entry-by-entry oracle tries a step (``fd.stuck_distance``): one group per
    such pre-activation, of the rows ``i`` it is that near to along ``W[k][i, j]``."""
    rms = float(np.sqrt(np.mean(np.square(fwd.weights[k]))))
    limit = _fd.stuck_distance(rms)
    y, z = np.abs(fwd.ys[k]), np.abs(fwd.zs[k])
    found = []
    for n in range(len(y)):
        near = np.flatnonzero(z[n] < limit * y[n].max(initial=0.0))
        for j in near:
            rows = np.flatnonzero(z[n, j] < limit * y[n])
            found.append((rows, np.array([j]), np.array([[k, n, j]], np.int64)))
    return found


def _later_kinks(fwd: Forward, k: int, kink_at: np.ndarray) -> _Found:
    """Layer ``k``'s entries fed by an output whose difference sat on a later kink: a group per batch row
    ``n``, of the rows ``i`` with ``y[k][n, i] != 0``, the outputs' columns and their kinks."""
    found = []
    for n in range(kink_at.shape[0]):
        cols = np.flatnonzero(kink_at[n, :, 0] >= 0)
        if cols.size:
            found.append((np.flatnonzero(fwd.ys[k][n]), cols, kink_at[n, cols]))
    return found
