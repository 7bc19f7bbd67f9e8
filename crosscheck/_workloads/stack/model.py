"""Everything specific to the ReLU stack: its float64 forward pass, rounding-error model and kinks.

The stack is ``y[0] = x``, ``z[m] = y[m] @ W[m]``, ``y[m + 1] = relu(z[m])`` for ``m < L``, and
``loss = sum(y[L] ** 2)``. Index conventions used throughout: a *kink* ``(layer, row, unit)`` is the
pre-activation ``z[layer][row, unit]``; a gradient entry ``(layer, row, col)`` is
``dloss/dW[layer][row, col]``.

The backward pass written here is used only to *size* tolerances and error bars and to judge which
entries a ReLU sign flip can move. The oracle's values never come from it: they come from evaluating
the loss alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from crosscheck._workloads.stack import threads as _threads

#: Unit roundoff of each supported dtype (half an ulp of 1.0).
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float64": 2.0**-53}
#: Bits of significand: integer arithmetic below 2**p is exact.
_SIGNIFICAND_BITS = {"float32": 24, "float64": 53}
#: Multiple of the modelled standard deviation allowed for rounding. Rounding errors of a sum of many
#: roundings are close to Gaussian; 8 standard deviations is never reached by chance (p < 1e-15)
#: while staying thousands of times tighter than the worst-case bound on deep stacks.
SAFETY = 8.0
#: What each axis of the weights (and of their gradient) means: the index names of every comparison.
INDEX_NAMES = ("layer", "row", "col")


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
    deltas: list[np.ndarray] = [np.empty(0)] * len(fwd.zs)  # every entry is set below
    grads: list[np.ndarray] = [np.empty(0)] * len(fwd.zs)
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


def fresh_sigma(a: np.ndarray, b: np.ndarray, u: float, exact: bool) -> np.ndarray | float:
    """Standard deviation of the rounding one computation of ``a @ b`` adds to each output entry.

    A length-n dot product with terms p_t rounds every partial sum once, and sequential summation makes
    partial sums grow like sqrt(t): modelled as ``u * sqrt(n * sum(p_t**2))``. Zero when exact.
    """
    if exact:
        return 0.0
    return u * np.sqrt(a.shape[-1] * ((a**2) @ (b**2)))


@dataclasses.dataclass(frozen=True)
class RoundingModel:
    """Modelled rounding error of the stack computed in ``dtype``.

    Attributes:
        dtype: the precision modelled.
        z_sigma: standard deviation of the error of each pre-activation (L arrays ``(N, d)``).
        grad_sigma: standard deviation of the error of each gradient entry, ``(L, d, d)``.
        samples: how many Monte Carlo samples estimated them.
        direction_sigma: ``(L, S)``: standard deviation of the error of ``sum(grad[k] * directions[k, s])``
            (when directions were given): the sum's errors are correlated, so it is modelled directly.
    """

    dtype: str
    z_sigma: list[np.ndarray]
    grad_sigma: np.ndarray
    samples: int
    direction_sigma: np.ndarray | None = None

    @property
    def grad_bound(self) -> np.ndarray:
        return SAFETY * self.grad_sigma

    def z_bound(self, layer: int) -> np.ndarray:
        return SAFETY * self.z_sigma[layer]


#: Monte Carlo samples of the rounding model. A gradient entry's variance is estimated from
#: ``samples * N`` (sample, row) terms; when one row dominates it is a ``samples``-sample estimate, whose
#: standard deviation has a relative spread of ~9% at 64 and falls below 0.6 of the true one with
#: probability ~1e-7. The tolerance needs that many: an error ``e`` of true spread ``sigma`` exceeds
#: ``SAFETY * sigma_hat`` with probability ``P(|t_S| > SAFETY)`` (Student's t with S degrees of freedom),
#: ~1e-11 at S = 64, but ~1e-8 at S = 32 and ~1e-6 at S = 16: too likely over the ~10**7 entries of a
#: d = 1024 stack. Their cost is ``O(samples * N * d**2)`` flops in BLAS products, never a
#: ``(samples, d, d)`` array.
MODEL_SAMPLES = 64


#: The samples are drawn in this many independent parts (one random stream each, ``[seed, part]``),
#: which run on separate cores when there are several; the result does not depend on how many.
MODEL_PARTS = 2


def rounding_model(
    fwd: Forward,
    deltas: list[np.ndarray],
    dtype: str,
    *,
    samples: int = MODEL_SAMPLES,
    seed: int = 0,
    directions: np.ndarray | None = None,
) -> RoundingModel:
    """Estimate the rounding error of the stack computed in ``dtype`` by Monte Carlo arithmetic.

    Every matrix product of the forward and backward pass gets independent Gaussian noise of the size
    of the rounding it would add in ``dtype`` (``fresh_sigma``), and the noise travels through the rest
    of the actual computation (masks held at the float64 ones). The spread of the results over
    ``samples`` runs is the model. Propagating actual samples, rather than variances through ``W**2``,
    keeps the correlations: an error in a unit that all later activations depend on scales them all
    alike, which a variance model would count as independent errors and overestimate on deep stacks.
    The gradient's spread is then taken row by row of the batch (``_grad_variance``). The samples run in
    ``MODEL_PARTS`` parts whose mean squares are pooled (weighted by their sizes, in a fixed order).
    """
    scales = _noise_scales(fwd, deltas, dtype)
    along = None if directions is None else _direction_terms(fwd, deltas, directions, scales)
    sizes = [len(part) for part in np.array_split(np.arange(samples), MODEL_PARTS) if len(part)]

    def part(index: int):
        rng = np.random.default_rng([seed, index])
        return index, _sample(fwd, deltas, scales, sizes[index], rng, along)

    flops = 6.0 * samples * fwd.ys[0].size * fwd.weights.shape[1] * len(fwd.weights)
    pooled: list[Any] = [0.0, 0.0, 0.0]
    for index, found in sorted(
        _threads.in_parallel(part, range(len(sizes)), flops=flops), key=lambda r: r[0]
    ):
        share = sizes[index] / sum(sizes)
        pooled = [total + share * np.asarray(more) for total, more in zip(pooled, found, strict=True)]
    z_var, grad_var, direction_var = pooled
    direction_sigma = None if directions is None else np.sqrt(direction_var)
    return RoundingModel(dtype, list(np.sqrt(z_var)), np.sqrt(grad_var), samples, direction_sigma)


def _noise_scales(fwd: Forward, deltas: list[np.ndarray], dtype: str) -> list[tuple[Any, Any, float]]:
    """Per layer: the noise of the forward product ``y @ W``, of the backward ``delta @ W.T`` and the
    variance factor of the gradient product ``y.T @ delta`` (each zero where the product is exact)."""
    u, bits = UNIT_ROUNDOFF[dtype], _SIGNIFICAND_BITS[dtype]
    scales = []
    for m, w in enumerate(fwd.weights):
        forward_sigma = fresh_sigma(fwd.ys[m], w, u, _is_exact(fwd.ys[m], w, bits))
        w_t = np.ascontiguousarray(w.T)
        backward_sigma = fresh_sigma(deltas[m], w_t, u, _is_exact(deltas[m], w_t, bits)) if m else 0.0
        # The fresh rounding of the product y.T @ delta itself: u * sqrt(N * (y**2).T @ delta**2).
        fresh_var = 0.0 if _is_exact(fwd.ys[m].T, deltas[m], bits) else u * u * len(fwd.ys[m])
        scales.append((forward_sigma, backward_sigma, fresh_var))
    return scales


def _sample(fwd, deltas, scales, samples, rng, directions):
    """One part of the Monte Carlo model: mean squares of the sampled errors of every pre-activation
    (L arrays), of every gradient entry and, with ``directions`` (here ``_direction_terms``), of every
    directional derivative."""
    weights = fwd.weights
    y = np.broadcast_to(fwd.ys[0], (samples, *fwd.ys[0].shape))
    noisy_ys, z_var = [y], []
    for m, w in enumerate(weights):
        # x carries no error, so the first product is the float64 one; later ones go to BLAS as one
        # tall product (a broadcast or stacked operand would take a slow, non-BLAS path).
        exact_z = fwd.zs[m] if m == 0 else (y.reshape(-1, y.shape[-1]) @ w).reshape(y.shape)
        z = exact_z + rng.standard_normal(y.shape) * scales[m][0]
        z_var.append(np.mean(np.square(z - fwd.zs[m]), axis=0))
        y = z * fwd.masks[m]
        noisy_ys.append(y)
    g = 2.0 * y  # d(sum(y**2))/dy = 2 * y: an exact multiplication
    grad_var = np.zeros_like(weights)
    direction_var = None if directions is None else np.zeros((len(weights), len(directions[0][2])))
    for m in reversed(range(len(weights))):
        delta = g * fwd.masks[m]
        fresh_var = scales[m][2]
        errors = noisy_ys[m] - fwd.ys[m], delta - deltas[m]
        grad_var[m] = _grad_variance(fwd.ys[m], deltas[m], *errors, fresh_var)
        if directions is not None and direction_var is not None:
            direction_var[m] = _direction_variance(*errors, directions[m])
        if m:
            w_t = np.ascontiguousarray(weights[m].T)
            g = (delta.reshape(-1, delta.shape[-1]) @ w_t).reshape(delta.shape)
            g = g + rng.standard_normal(delta.shape) * scales[m][1]
    return np.stack(z_var), grad_var, 0.0 if direction_var is None else direction_var


def _grad_variance(y, delta, e_y, e_delta, fresh_var: float) -> np.ndarray:
    """Mean square over samples of the propagated error of ``grad = y.T @ delta``, row by row.

    ``y``, ``delta``: ``(N, d)`` at the float64 point; ``e_y``, ``e_delta``: ``(S, N, d)`` their sampled
    errors. To first order the error is ``sum_n a[n]`` with ``a[n] = outer(e_y[n], delta[n]) +
    outer(y[n], e_delta[n])`` (the second-order ``outer(e_y, e_delta)`` is a unit roundoff smaller).
    Rows are independent (each row's forward and backward pass is its own, with its own noise), so
    ``E[(sum_n a[n])**2] = sum_n E[a[n]**2]``: the mean of ``sum_n a[n]**2`` estimates the same variance
    as the mean of ``(sum_n a[n])**2``, without its sampled cross-row terms (zero in expectation, noise
    in a sample), and without forming a ``(S, d, d)`` array. The fresh rounding of the product itself
    is independent of all this: its variance, known exactly (``fresh_var * (y**2).T @ delta**2``), is
    added rather than sampled. Expanded, the whole is one ``(d, K) @ (K, d)`` product (K = S*N + 3N).
    """
    samples, d = e_y.shape[0], y.shape[1]
    y2, delta2 = np.square(y), np.square(delta)
    left = [np.square(e_y).mean(axis=0), y2 * fresh_var, y2, (2.0 / samples) * (e_y * y).reshape(-1, d)]
    right = [delta2, delta2, np.square(e_delta).mean(axis=0), (e_delta * delta).reshape(-1, d)]
    return np.maximum(np.concatenate(left).T @ np.concatenate(right), 0.0)


def _direction_terms(fwd: Forward, deltas: list[np.ndarray], directions: np.ndarray, scales) -> list:
    """What the directional errors need that no sample changes, per layer: ``delta @ D.T`` and
    ``y @ D`` (``(S_dirs, N, d)``) and the variance of the fresh rounding along each direction,
    ``fresh_var * sum((y**2).T @ delta**2 * D**2) = fresh_var * sum_n (y[n]**2) @ D**2 @ delta[n]**2``."""
    squares = np.empty(directions.shape[1:])  # one buffer for every layer's D**2
    terms = []
    for m, (y, delta) in enumerate(zip(fwd.ys, deltas, strict=False)):
        np.square(directions[m], out=squares)
        fresh = np.einsum("nj,knj->k", np.square(delta), np.square(y) @ squares) * scales[m][2]
        terms.append((delta @ np.swapaxes(directions[m], 1, 2), y @ directions[m], fresh))
    return terms


def _direction_variance(e_y, e_delta, terms) -> np.ndarray:
    """Mean square over samples of the error of ``sum(grad * D[s])`` for each direction ``s``.

    With ``a[n]`` as in ``_grad_variance``, ``sum(a[n] * D) = e_y[n] @ D @ delta[n] + y[n] @ D @
    e_delta[n]``: per row, two dot products with ``delta @ D.T`` and ``y @ D`` (``terms``, from
    ``_direction_terms``). Rows are independent, so the squares are summed over rows; the fresh
    rounding's variance (also in ``terms``) is added.
    """
    along_delta, along_y, fresh = terms
    sums = np.einsum("snd,knd->skn", e_y, along_delta) + np.einsum("snd,knd->skn", e_delta, along_y)
    return np.mean(np.sum(np.square(sums), axis=2), axis=0) + fresh


@dataclasses.dataclass(frozen=True)
class KinkEffects:
    """What a ReLU sign flip at an ambiguous pre-activation can do to each gradient entry.

    Attributes:
        kinks: ``(K, 3)`` integer array of ambiguous pre-activations ``(layer, row, unit)``.
        count: ``(L, d, d)``: how many kinks can move the entry by more than the threshold.
        alternative: ``(L, d, d)``: the signed change of the entry if its strongest kink flips.
        culprit: ``(L, d, d)``: index into ``kinks`` of the entry's strongest kink (-1: none).
        minor: ``(L, d, d)``: the summed size of the changes below the threshold.
    """

    kinks: np.ndarray
    count: np.ndarray
    alternative: np.ndarray
    culprit: np.ndarray
    minor: np.ndarray


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


def kink_effects(
    fwd: Forward,
    deltas: list[np.ndarray],
    kinks: np.ndarray,
    threshold: np.ndarray,
    bounds: list[np.ndarray] | None = None,
) -> KinkEffects:
    """For each kink, the signed change of every gradient entry if that kink's ReLU flips.

    Flipping unit ``(m, n, u)`` switches ``dloss/dz[m][n, u]`` between 0 and the upstream gradient
    ``g``: column ``u`` of ``dloss/dW[m]`` moves by ``y[m][n, :] * g``, and the change travels back
    through row ``n`` of every earlier layer. Changes larger than ``threshold`` are counted (one such
    kink per entry can be judged on both sides; more cannot), smaller ones are summed into ``minor``.
    Its forward effect, a change of at most ``bounds[m][n, u]`` in ``y[m + 1][n, u]``, is bounded
    separately (``_forward_effect``): usually rounding-sized, it is all there is in a row whose output
    is zero in float64, and an entry it can move beyond ``threshold`` is not judged.
    """
    shape = fwd.weights.shape
    count = np.zeros(shape, np.int64)
    alternative, best, minor = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    culprit = np.full(shape, -1, dtype=np.int64)
    for index, (m, n, unit) in enumerate(kinks):
        on = fwd.masks[m][n, unit]
        upstream = deltas[m][n, unit] if on else _upstream(fwd, deltas, m, n, unit)
        change = np.zeros(shape[1])
        change[unit] = -upstream if on else upstream
        moved = np.zeros(shape)
        for k in range(m, -1, -1):
            if k < m:
                change = (change @ fwd.weights[k + 1].T) * fwd.masks[k][n]
            moved[k] = np.outer(fwd.ys[k][n], change)
        size = np.abs(moved)
        large = size > threshold
        count += large
        minor += np.where(large, 0.0, size)
        stronger = large & (size > best)
        best[stronger], culprit[stronger], alternative[stronger] = size[stronger], index, moved[stronger]
    if bounds is not None:
        for n in np.unique(kinks[:, 1]):
            _row_bound(fwd, deltas, kinks, bounds, int(n), threshold, count, culprit, minor)
    return KinkEffects(kinks, count, alternative, culprit, minor)


def _row_bound(fwd, deltas, kinks, bounds, n, threshold, count, culprit, minor) -> None:
    """Bound what every possible flip in row ``n`` can do together, forward and backward.

    A flip changes ``y`` by at most its pre-activation's size plus its error; that change travels forward
    (through ``|W|``) and may flip further units whose pre-activations are smaller than it. With every
    unit that may flip held open, the row's contribution to each gradient entry can move by at most
    about ``(|y| + dy) * (|delta| + d_delta) - |y| * |delta|``. Flips at two or more layers interact (one
    opens the path another's change takes), so such a row's entries beyond ``threshold`` are
    unjudgeable. In a row whose output is zero in float64, a flip's forward change is all the signal
    there is: that part is bounded too, added to ``minor`` or, beyond ``threshold``, made unjudgeable.
    The bounds propagate absolute values, so they are safe and loose; they apply only to such rows.
    """
    weights = np.abs(fwd.weights)
    n_layers, d = weights.shape[:2]
    in_row = np.flatnonzero(kinks[:, 1] == n)
    may_flip = np.zeros((n_layers, d), bool)
    may_flip[kinks[in_row, 0], kinks[in_row, 2]] = True
    dy = [np.zeros(d) for _ in range(n_layers + 1)]  # bound of the change of y[k][n]
    for k in range(n_layers):
        z, dz = np.abs(fwd.zs[k][n]), dy[k] @ weights[k]
        may_flip[k] |= (dz > 0) & (z <= dz + bounds[k][n])
        dy[k + 1] = np.where(may_flip[k], z + dz + bounds[k][n], np.where(fwd.masks[k][n], dz, 0.0))
    open_ = [fwd.masks[k][n] | may_flip[k] for k in range(n_layers)]
    interacting = len(np.unique(np.nonzero(may_flip)[0])) > 1
    if not interacting and np.any(fwd.ys[-1][n]):
        # One layer of flips in a live row: each flip's effect is judged on its own (kink_effects); its
        # forward part is a change of rounding size in a row whose output is far from it.
        return
    top = int(np.nonzero(may_flip)[0].max())
    g, d_g = 2.0 * np.abs(fwd.ys[-1][n]), 2.0 * dy[n_layers]
    for k in reversed(range(n_layers)):
        y, delta = np.abs(fwd.ys[k][n]), np.abs(deltas[k][n])
        if interacting and k <= top:
            # Every path may be open: the whole contribution of the row is uncertain.
            d_delta = (g + d_g) * open_[k]
            bound = np.outer(y + dy[k], d_delta) + np.outer(y, delta)
        else:
            d_delta = d_g * open_[k]
            bound = np.outer(y + dy[k], d_delta) + np.outer(dy[k], delta)
        beyond = bound > threshold[k]
        count[k][beyond] = np.maximum(count[k][beyond], 2)
        culprit[k][beyond & (culprit[k] < 0)] = in_row[0]
        minor[k] += np.where(beyond, 0.0, bound)
        g, d_g = (g * open_[k]) @ weights[k].T, d_delta @ weights[k].T


def _upstream(fwd: Forward, deltas: list[np.ndarray], m: int, n: int, unit: int) -> float:
    """``dloss/dy[m + 1][n, unit]`` for a unit that is off (its delta is 0, so recompute it)."""
    if m + 1 == len(fwd.zs):
        return 2.0 * float(fwd.ys[-1][n, unit])
    return float(deltas[m + 1][n] @ fwd.weights[m + 1][unit])
