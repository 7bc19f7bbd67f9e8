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

import numpy as np

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


#: Monte Carlo samples of the rounding model: the relative spread of a 64-sample standard deviation is
#: ~9%, and it falls below 0.6 of the true one with probability ~1e-7.
MODEL_SAMPLES = 64


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
    """
    u, bits, weights = UNIT_ROUNDOFF[dtype], _SIGNIFICAND_BITS[dtype], fwd.weights
    rng = np.random.default_rng(seed)
    n_layers = len(weights)
    y = np.broadcast_to(fwd.ys[0], (samples, *fwd.ys[0].shape))
    noisy_ys, z_sigma = [y], []
    for m, w in enumerate(weights):
        sigma = fresh_sigma(fwd.ys[m], w, u, _is_exact(fwd.ys[m], w, bits))
        # x carries no error, so the first product is the float64 one; later ones go to BLAS as one
        # tall product (a broadcast or stacked operand would take a slow, non-BLAS path).
        exact_z = fwd.zs[m] if m == 0 else (y.reshape(-1, y.shape[-1]) @ w).reshape(y.shape)
        z = exact_z + rng.standard_normal(y.shape) * sigma
        z_sigma.append(_rms(z - fwd.zs[m]))
        y = z * fwd.masks[m]
        noisy_ys.append(y)
    g = 2.0 * y  # d(sum(y**2))/dy = 2 * y: an exact multiplication
    grad_sigma = np.zeros_like(weights)
    direction_sigma = None if directions is None else np.zeros(directions.shape[:2])
    for m in reversed(range(n_layers)):
        delta = g * fwd.masks[m]
        y_m = noisy_ys[m]
        sigma = fresh_sigma(fwd.ys[m].T, deltas[m], u, _is_exact(fwd.ys[m].T, deltas[m], bits))
        flat = None if directions is None else directions[m].reshape(directions.shape[1], -1)
        grad_sigma[m], spread = _grad_spread(y_m, delta, fwd.ys[m].T @ deltas[m], sigma, rng, flat)
        if direction_sigma is not None:
            direction_sigma[m] = spread
        if m:
            w_t = np.ascontiguousarray(weights[m].T)
            sigma = fresh_sigma(deltas[m], w_t, u, _is_exact(deltas[m], w_t, bits))
            g = (delta.reshape(-1, delta.shape[-1]) @ w_t).reshape(delta.shape)
            g = g + rng.standard_normal(delta.shape) * sigma
    return RoundingModel(dtype, z_sigma, grad_sigma, samples, direction_sigma)


def _rms(errors: np.ndarray) -> np.ndarray:
    return np.sqrt(np.mean(errors**2, axis=0))


#: Entries of the largest ``(samples, d, d)`` array the rounding model makes at once (256 MiB).
MODEL_CHUNK_VALUES = 1 << 25


def model_chunk(samples: int, dim: int) -> int:
    """How many samples the rounding model carries at once through a layer's ``(d, d)`` gradient."""
    return max(1, min(samples, MODEL_CHUNK_VALUES // (dim * dim)))


def _grad_spread(y_m, delta, exact, sigma, rng, flat) -> tuple[np.ndarray, np.ndarray | None]:
    """The RMS over samples of a layer's gradient error (and of its projections on ``flat``), a chunk
    of samples at a time (``model_chunk``) so that a wide layer's ``(samples, d, d)`` stack is never
    whole in memory. The noise is drawn in the same order, and the squares summed sample after
    sample, as for the whole stack at once: the same numbers, bit for bit."""
    samples, dim = y_m.shape[0], exact.shape[0]
    chunk = model_chunk(samples, dim)
    squares = np.zeros(exact.shape)
    projected = None if flat is None else np.zeros(flat.shape[0])
    for start in range(0, samples, chunk):
        # A contiguous transpose lets the stacked product go to BLAS (a strided one does not).
        part = (
            np.ascontiguousarray(np.swapaxes(y_m[start : start + chunk], 1, 2)) @ delta[start : start + chunk]
        )
        error = part + rng.standard_normal(part.shape) * sigma - exact
        along = None if flat is None else error.reshape(len(error), -1) @ flat.T
        for i in range(len(error)):
            squares += error[i] ** 2
            if projected is not None and along is not None:
                projected += along[i] ** 2
    spread = None if projected is None else np.sqrt(projected / samples)
    return np.sqrt(squares / samples), spread


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
    error is at most ``tiny`` per small product plus ``tiny`` per partial sum. Local errors then travel
    like any perturbation, to first order through the absolute values of the rest of the computation
    (the arithmetic's amplification). A case of ordinary magnitudes has no small factor anywhere: the
    bound is exactly 0 there.
    """
    tiny, bits = float(np.finfo(dtype).tiny), _SIGNIFICAND_BITS[dtype]
    small = float(np.sqrt(2.0**bits * tiny))
    if not any(np.any((a != 0) & (np.abs(a) < small)) for a in [fwd.weights, *fwd.ys, *deltas]):
        return Underflow(np.zeros((len(fwd.zs), *fwd.zs[0].shape)), np.zeros_like(fwd.weights))
    weights = np.abs(fwd.weights)
    e_w = tiny * ((fwd.weights != 0) & (weights < tiny))  # subnormal inputs, read as zero (DAZ)
    e_y = tiny * ((fwd.ys[0] != 0) & (np.abs(fwd.ys[0]) < tiny))
    e_ys, e_zs = [e_y], []
    for m, w in enumerate(fwd.weights):
        y = np.abs(fwd.ys[m])
        e_z = e_y @ weights[m] + y @ e_w[m] + _local(fwd.ys[m], w, small, tiny)
        e_zs.append(e_z)
        e_y = e_z * fwd.masks[m]
        e_ys.append(e_y)
    e_g = 2.0 * e_y
    grad = np.zeros_like(fwd.weights)
    for m in reversed(range(len(fwd.weights))):
        e_delta = e_g * fwd.masks[m]
        delta = np.abs(deltas[m])
        local = _local(fwd.ys[m].T, deltas[m], small, tiny)
        grad[m] = e_ys[m].T @ delta + np.abs(fwd.ys[m]).T @ e_delta + local
        if m:
            local = _local(deltas[m], fwd.weights[m].T, small, tiny)
            e_g = e_delta @ weights[m].T + delta @ e_w[m].T + local
    return Underflow(np.stack(e_zs), grad)


def _local(a: np.ndarray, b: np.ndarray, small: float, tiny: float) -> np.ndarray | float:
    """The underflow ``a @ b`` itself can add to each entry: ``tiny`` for each product that may fall
    below ``2**p * tiny`` (a factor below ``small``) and for each partial sum, where any product may."""
    a_small = ((a != 0) & (np.abs(a) < small)).sum(axis=1)
    b_small = ((b != 0) & (np.abs(b) < small)).sum(axis=0)
    if not (a_small.any() or b_small.any()):
        return 0.0
    count = np.minimum(a_small[:, None] + b_small[None, :], a.shape[1])
    return tiny * (count + a.shape[1] * (count > 0))


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
