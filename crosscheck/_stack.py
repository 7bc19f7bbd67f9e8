"""Everything specific to the ReLU stack: its float64 forward pass, rounding-error model and kinks.

The stack is ``y[0] = x``, ``z[m] = y[m] @ W[m]``, ``y[m + 1] = relu(z[m])`` for ``m < L``, and
``loss = sum(y[L] ** 2)``. Index conventions used throughout: a *kink* ``(layer, row, unit)`` is the
pre-activation ``z[layer][row, unit]``; a gradient entry ``(layer, row, col)`` is ``dloss/dW[layer][row, col]``.

The backward pass written here is used only to *size* tolerances and to judge which entries a ReLU
sign flip can move. The oracle never uses it: its values come from evaluating the loss alone.
"""

from __future__ import annotations

import dataclasses

import numpy as np

#: Unit roundoff of each supported dtype (half an ulp of 1.0).
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float64": 2.0**-53}
#: Bits of significand: integer arithmetic below 2**p is exact.
_SIGNIFICAND_BITS = {"float32": 24, "float64": 53}
#: Multiple of the modelled standard deviation allowed for rounding. Rounding errors of a sum of many
#: roundings are close to Gaussian; 8 standard deviations is never reached by chance (p < 1e-15)
#: while staying thousands of times tighter than the worst-case bound on deep stacks.
SAFETY = 8.0


@dataclasses.dataclass(frozen=True)
class Forward:
    """The float64 forward pass: ``ys`` (L + 1 arrays ``(N, d)``), ``zs`` and ``masks`` (L arrays)."""

    weights: np.ndarray
    ys: list[np.ndarray]
    zs: list[np.ndarray]
    masks: list[np.ndarray]

    @property
    def loss(self) -> float:
        return float(np.sum(self.ys[-1] ** 2))


def forward(weights: np.ndarray, x: np.ndarray) -> Forward:
    """Run the stack in float64 (the inputs' values are kept exactly)."""
    weights = np.asarray(weights, dtype=np.float64)
    y = np.asarray(x, dtype=np.float64)
    ys, zs, masks = [y], [], []
    for w in weights:
        z = y @ w
        mask = z > 0  # derivative 0 at an exact zero, as jax.nn.relu
        y = np.where(mask, z, 0.0)
        ys.append(y)
        zs.append(z)
        masks.append(mask)
    return Forward(weights, ys, zs, masks)


def backward(fwd: Forward) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Return ``(deltas, grads)``: ``deltas[m] = dloss/dz[m]`` and ``grads[m] = dloss/dW[m]``."""
    g = 2.0 * fwd.ys[-1]
    deltas, grads = [None] * len(fwd.zs), [None] * len(fwd.zs)
    for m in reversed(range(len(fwd.zs))):
        delta = g * fwd.masks[m]
        deltas[m], grads[m] = delta, fwd.ys[m].T @ delta
        g = delta @ fwd.weights[m].T
    return deltas, grads


def _is_exact(a: np.ndarray, b: np.ndarray, bits: int) -> bool:
    """Whether ``a @ b`` is exact in any summation order with a ``bits``-bit significand."""
    if not (np.all(a == np.round(a)) and np.all(b == np.round(b))):
        return False
    return float(np.max(np.abs(a) @ np.abs(b), initial=0.0)) < 2.0**bits


def _matmul_variance(a, var_a, b, var_b, u, exact):
    """Variance of the error of ``a @ b``: propagated input errors plus fresh rounding.

    Fresh rounding of a length-n dot product with terms p_t is modelled as ``u**2 * n * sum(p_t**2)``:
    every partial sum rounds once, and sequential summation makes partial sums grow like sqrt(t).
    """
    n = a.shape[-1]
    var = 0.0
    if var_a is not None:
        var = var + var_a @ (b**2)
    if var_b is not None:
        var = var + (a**2) @ var_b
    if not exact:
        var = var + (u**2 * n) * ((a**2) @ (b**2))
    return var


@dataclasses.dataclass(frozen=True)
class RoundingModel:
    """Modelled rounding error of the stack computed in ``dtype``.

    Attributes:
        dtype: the precision modelled.
        z_sigma: standard deviation of the error of each pre-activation (L arrays ``(N, d)``).
        grad_sigma: standard deviation of the error of each gradient entry, ``(L, d, d)``.
    """

    dtype: str
    z_sigma: list[np.ndarray]
    grad_sigma: np.ndarray

    @property
    def grad_bound(self) -> np.ndarray:
        return SAFETY * self.grad_sigma

    def z_bound(self, layer: int) -> np.ndarray:
        return SAFETY * self.z_sigma[layer]


def rounding_model(fwd: Forward, deltas: list[np.ndarray], dtype: str) -> RoundingModel:
    """Propagate rounding-error variances through the forward and backward pass in ``dtype``.

    Errors are propagated through the actual (signed) weights, not their absolute values: that is what
    keeps the model tight on deep stacks, where the worst-case bound grows like ``(|W|)**L``.
    """
    u, bits, weights = UNIT_ROUNDOFF[dtype], _SIGNIFICAND_BITS[dtype], fwd.weights
    var_y, z_sigma, var_ys = None, [], [None]
    for m, w in enumerate(weights):
        y = fwd.ys[m]
        var_z = _matmul_variance(y, var_y, w, None, u, _is_exact(y, w, bits))
        var_z = np.broadcast_to(var_z, y.shape)
        z_sigma.append(np.sqrt(var_z))
        var_y = var_z * fwd.masks[m]
        var_ys.append(var_y)
    var_g = 4.0 * var_y  # d(sum(y**2))/dy = 2 * y, an exact multiplication
    grad_var = np.zeros_like(weights)
    for m in reversed(range(len(weights))):
        delta, var_delta = deltas[m], var_g * fwd.masks[m]
        y, w = fwd.ys[m], weights[m]
        grad_var[m] = _matmul_variance(y.T, None if var_ys[m] is None else var_ys[m].T, delta,
                                       var_delta, u, _is_exact(y.T, delta, bits))
        if m:
            var_g = _matmul_variance(delta, var_delta, w.T, None, u, _is_exact(delta, w.T, bits))
    return RoundingModel(dtype, z_sigma, np.sqrt(grad_var))


@dataclasses.dataclass(frozen=True)
class KinkImpact:
    """Which gradient entries a ReLU sign flip can move, and by how much.

    Attributes:
        kinks: ``(K, 3)`` integer array of ambiguous pre-activations ``(layer, row, unit)``.
        impact: ``(L, d, d)``: sum over those kinks of how far flipping one moves each entry.
        culprit: ``(L, d, d)``: index into ``kinks`` of the kink that moves each entry most (-1: none).
    """

    kinks: np.ndarray
    impact: np.ndarray
    culprit: np.ndarray


def ambiguous_kinks(fwd: Forward, bounds: list[np.ndarray]) -> np.ndarray:
    """Pre-activations whose sign a computation with error ``bounds`` may get wrong.

    An exact zero computed exactly (bound 0) is not ambiguous: the convention, derivative 0, applies.
    """
    found = [
        np.column_stack([np.full(len(rows), m), rows, units])
        for m, (z, b) in enumerate(zip(fwd.zs, bounds, strict=True))
        for rows, units in [np.nonzero((b > 0) & (np.abs(z) <= b))]
    ]
    return np.concatenate(found).astype(np.int64) if found else np.zeros((0, 3), np.int64)


def kink_impact(fwd: Forward, deltas: list[np.ndarray], kinks: np.ndarray) -> KinkImpact:
    """For each kink, how much flipping its ReLU moves each gradient entry (backward effect).

    Flipping unit ``(m, n, u)`` switches ``dloss/dz[m][n, u]`` between 0 and the upstream gradient
    ``g``: column ``u`` of ``dloss/dW[m]`` moves by ``|y[m][n, :]| * |g|``, and the change travels back
    through row ``n`` of every earlier layer. Its forward effect is at most ``|z|``, i.e. rounding-sized.
    """
    weights = fwd.weights
    shape = weights.shape
    impact, best = np.zeros(shape), np.zeros(shape)
    culprit = np.full(shape, -1, dtype=np.int64)
    for index, (m, n, unit) in enumerate(kinks):
        upstream = deltas[m][n, unit] if fwd.masks[m][n, unit] else _upstream(fwd, deltas, m, n, unit)
        change = np.zeros(shape[1])
        change[unit] = abs(upstream)
        for k in range(m, -1, -1):
            if k < m:
                change = np.abs(change @ np.abs(weights[k + 1]).T) * fwd.masks[k][n]
            moved = np.outer(np.abs(fwd.ys[k][n]), change)
            impact[k] += moved
            larger = moved > best[k]
            best[k][larger], culprit[k][larger] = moved[larger], index
    return KinkImpact(kinks, impact, culprit)


def _upstream(fwd: Forward, deltas: list[np.ndarray], m: int, n: int, unit: int) -> float:
    """``dloss/dy[m + 1][n, unit]`` for a unit that is off (its delta is 0, so recompute it)."""
    if m + 1 == len(fwd.zs):
        return 2.0 * float(fwd.ys[-1][n, unit])
    return float(deltas[m + 1][n] @ fwd.weights[m + 1][unit])
