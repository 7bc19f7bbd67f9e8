"""The ReLU stack's rounding-error model: what one computation of each product adds, and the bounds
made of it (its float64 passes are ``forward``'s, its kink judgements ``kinks``').

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
from typing import Any, NamedTuple

import numpy as np

# The stack's tolerance terms are built by ``crosscheck._compare.terms``; the unit roundoffs are
# everyone's (``crosscheck._compare.constants``).
from crosscheck._compare import terms
from crosscheck._compare.constants import SIGNIFICAND_BITS
from crosscheck._compare.dtypes import roundoffs
from crosscheck._types import Floats
from crosscheck._workloads.stack.forward import Forward
from crosscheck._workloads.stack.oracle import parallel as _parallel

#: What each axis of the weights (and of their gradient) means: the index names of every comparison.
INDEX_NAMES = ("layer", "row", "col")
#: What a kink's index means: the pre-activation ``z[layer][row, unit]`` (a comparison's ``kinks``).
KINK_NAMES = ("layer", "row", "unit")


def _is_exact(a: np.ndarray, b: np.ndarray, bits: int) -> bool:
    """Whether ``a @ b`` is exact in any summation order with a ``bits``-bit significand."""
    if not (np.all(a == np.round(a)) and np.all(b == np.round(b))):
        return False
    return float(np.max(np.abs(a) @ np.abs(b), initial=0.0)) < 2.0**bits


def fresh_sigma(
    a: np.ndarray, b: np.ndarray, u: float, exact: bool, b_squared: np.ndarray | None = None
) -> np.ndarray | float:
    """Standard deviation of the rounding one computation of ``a @ b`` adds to each output entry.

    A length-n dot product with terms p_t rounds every partial sum once, and sequential summation makes
    partial sums grow like sqrt(t): modelled as ``u * sqrt(n * sum(p_t**2))``. Zero when exact.
    ``b_squared``: ``b ** 2`` when the caller has it.
    """
    if exact:
        return 0.0
    return u * np.sqrt(a.shape[-1] * ((a**2) @ (np.square(b) if b_squared is None else b_squared)))


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
        z_stored: for a 16-bit dtype, the standard deviation of storing each pre-activation (L arrays):
            a rounding that keeps the sign (so no ReLU flips by it, and ``z_sigma`` leaves it out) but
            moves the stored value and travels on; ``None`` for float32 and float64.
    """

    dtype: str
    z_sigma: list[np.ndarray]
    grad_sigma: np.ndarray
    samples: int
    direction_sigma: np.ndarray | None = None
    z_stored: list[np.ndarray] | None = None

    @property
    def grad_bound(self) -> np.ndarray:
        return terms.modelled(self.grad_sigma)

    def z_bound(self, layer: int) -> np.ndarray:
        """What rounding can move a pre-activation's sign by (8 sigma)."""
        return terms.modelled(self.z_sigma[layer])

    def scaled(self, factor: float) -> RoundingModel:
        """The same model at a unit roundoff ``factor`` times this one's: Monte Carlo arithmetic's
        noise is proportional to the unit roundoff (first order), so every sigma scales with it (a
        device whose float32 products round at bfloat16's unit: ``device.Arithmetic``)."""
        if factor == 1.0:
            return self
        stored = None if self.z_stored is None else [a * factor for a in self.z_stored]
        return dataclasses.replace(
            self,
            z_sigma=[a * factor for a in self.z_sigma],
            grad_sigma=self.grad_sigma * factor,
            direction_sigma=None if self.direction_sigma is None else self.direction_sigma * factor,
            z_stored=stored,
        )

    def value_bound(self, layer: int) -> np.ndarray:
        """What rounding can move a stored pre-activation (or activation) by: ``z_bound`` with the
        storing's rounding (8 sigma of both)."""
        if self.z_stored is None:
            return self.z_bound(layer)
        return terms.modelled(np.sqrt(np.square(self.z_sigma[layer]) + np.square(self.z_stored[layer])))


#: Monte Carlo samples of the rounding model. A gradient entry's variance is estimated from
#: ``samples * N`` (sample, row) terms; when one row dominates it is a ``samples``-sample estimate, whose
#: standard deviation has a relative spread of ~9% at 64 and falls below 0.6 of the true one with
#: probability ~5e-7. The tolerance needs that many: an error ``e`` of true spread ``sigma`` exceeds
#: ``SAFETY * sigma_hat`` with probability ``P(|t_S| > SAFETY)`` (Student's t with S degrees of freedom):
#: 3e-11 at S = 64, 4e-9 at S = 32, 6e-7 at S = 16. Over the 8e6 entries of a d = 1024 stack that is
#: 3e-4 expected false alarms a run at 64 samples, but 0.03 at 32: fewer samples would buy speed with
#: a check that fails healthy runs. Their cost is ``O(samples * N * d**2)`` flops in BLAS products,
#: never a ``(samples, d, d)`` array, so the 64 are no longer what a run waits for.
MODEL_SAMPLES = 64


#: The samples are drawn in this many independent parts (one random stream each, ``[seed, part]``),
#: which run on separate cores when there are several; the result does not depend on how many.
MODEL_PARTS = 2


@_parallel.blas_on_one_thread
def rounding_model(
    fwd: Forward,
    deltas: list[np.ndarray],
    dtype: str,
    *,
    samples: int = MODEL_SAMPLES,
    seed: int = 0,
    directions: np.ndarray | None = None,
    entries: bool = True,
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
    With ``entries=False`` only the pre-activations' and the directions' spreads are made (``grad_sigma``
    is then zeros: for a caller that needs the directional spreads alone).
    """
    scales = _noise_scales(fwd, deltas, dtype)
    along = None if directions is None else _direction_terms(fwd, deltas, directions, scales)
    sizes = [len(part) for part in np.array_split(np.arange(samples), MODEL_PARTS) if len(part)]

    def part(index: int):
        rng = np.random.default_rng([seed, index])
        return index, _sample(fwd, deltas, scales, sizes[index], rng, along, entries)

    flops = rounding_flops(fwd, samples)
    pooled: list[Any] = []
    for index, found in sorted(
        _parallel.in_parallel(part, range(len(sizes)), flops=flops), key=lambda r: r[0]
    ):
        share = sizes[index] / sum(sizes)
        # In place, in the same order (0 + a == a exactly): no temporary of a gradient's size.
        weighted = [
            np.multiply(more, share, out=more) if _own(more) else share * np.asarray(more) for more in found
        ]
        if not pooled:
            pooled = weighted
            continue
        for i, more in enumerate(weighted):
            if _own(pooled[i]):
                pooled[i] += more
            else:
                pooled[i] = pooled[i] + more
    z_var, grad_var, direction_var = pooled
    direction_sigma = None if directions is None else np.sqrt(direction_var)
    grad_sigma = np.sqrt(grad_var, out=grad_var) if entries else np.zeros(fwd.weights.shape)
    stored = [scale.stored_z for scale in scales] if roundoffs(dtype)[1] else None
    return RoundingModel(dtype, list(np.sqrt(z_var)), grad_sigma, samples, direction_sigma, stored)


def _own(value: Any) -> bool:
    """Whether ``value`` is a float64 array a part made (and may be scaled in place)."""
    return isinstance(value, np.ndarray) and value.dtype == np.float64 and value.ndim > 0


def rounding_flops(fwd: Forward, samples: int = MODEL_SAMPLES) -> float:
    """About the flops of ``rounding_model`` (its forward, backward and gradient products)."""
    return 6.0 * samples * fwd.ys[0].size * fwd.weights.shape[1] * len(fwd.weights)


class _Scales(NamedTuple):
    """One layer's noise: of the forward product ``y @ W`` (its sum), of the backward ``delta @ W.T``,
    the variance factor of the gradient product ``y.T @ delta`` (each zero where the product is exact),
    and for a 16-bit dtype the rounding of storing
    each pre-activation (a standard deviation) and each gradient entry (a variance)."""

    forward: Any
    backward: Any
    fresh_var: float
    stored_z: Any = 0.0
    stored_grad: Any = 0.0


def _noise_scales(fwd: Forward, deltas: list[np.ndarray], dtype: str) -> list[_Scales]:
    """Per layer, the noise of each product (``_Scales``).

    A 16-bit dtype (``roundoffs``) sums each product in float32 (``u``) and rounds its result once to
    its own ``s``: an error uniform within half a spacing, ``s * |value|`` at most, of standard
    deviation ``s * |value| / sqrt(3)`` (0 for float32 and float64, whose results are their sums)."""
    (u, s), bits = roundoffs(dtype), SIGNIFICAND_BITS[dtype]
    scales = []
    for m, w in enumerate(fwd.weights):
        w2 = fwd.squared_weight(m)
        exact = _is_exact(fwd.ys[m], w, bits)
        forward_sigma = fresh_sigma(fwd.ys[m], w, u, exact, w2)
        stored_z = _stored(fwd.zs[m], s, exact)
        w_t = np.ascontiguousarray(w.T)  # a layer at a time, not kept
        exact = _is_exact(deltas[m], w_t, bits)
        backward_sigma: Any = 0.0
        if m:
            sigma = fresh_sigma(deltas[m], w_t, u, exact, w2.T)
            stored = _stored(deltas[m] @ w_t, s, exact)
            backward_sigma = np.sqrt(np.square(sigma) + np.square(stored)) if np.ndim(stored) else sigma
        # The fresh rounding of the product y.T @ delta itself: u * sqrt(N * (y**2).T @ delta**2).
        exact = _is_exact(fwd.ys[m].T, deltas[m], bits)
        fresh_var = 0.0 if exact else u * u * len(fwd.ys[m])
        stored_grad = np.square(_stored(fwd.ys[m].T @ deltas[m], s, exact)) if s and not exact else 0.0
        scales.append(_Scales(forward_sigma, backward_sigma, fresh_var, stored_z, stored_grad))
    return scales


def _stored(value: np.ndarray, s: float, exact: bool) -> Floats:
    """The standard deviation of storing ``value`` at unit roundoff ``s``: ``s * |value| / sqrt(3)``."""
    return 0.0 if exact or not s else (s / np.sqrt(3.0)) * np.abs(value)


def _sample(fwd, deltas, scales, samples, rng, directions, entries=True):
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
        z = exact_z + rng.standard_normal(y.shape) * scales[m].forward
        z_var.append(np.mean(np.square(z - fwd.zs[m]), axis=0))
        if np.ndim(scales[m].stored_z):  # storing z keeps its sign: after the sign's variance
            z = z + rng.standard_normal(y.shape) * scales[m].stored_z
        y = z * fwd.masks[m]
        noisy_ys.append(y)
    g = 2.0 * y  # d(sum(y**2))/dy = 2 * y: an exact multiplication
    grad_var = np.zeros_like(weights) if entries else np.zeros(0)
    direction_var = None if directions is None else np.zeros((len(weights), len(directions[0][2])))
    for m in reversed(range(len(weights))):
        delta = g * fwd.masks[m]
        fresh_var = scales[m].fresh_var
        errors = noisy_ys[m] - fwd.ys[m], delta - deltas[m]
        if entries:
            grad_var[m] = _grad_variance(fwd.ys[m], deltas[m], *errors, fresh_var) + scales[m].stored_grad
        if directions is not None and direction_var is not None:
            direction_var[m] = _direction_variance(*errors, directions[m])
        if m:
            # W.T contiguous for BLAS, made a layer at a time (never a transposed copy of every layer)
            w_t = np.ascontiguousarray(weights[m].T)
            g = (delta.reshape(-1, delta.shape[-1]) @ w_t).reshape(delta.shape)
            del w_t
            g = g + rng.standard_normal(delta.shape) * scales[m].backward
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
    along = np.empty(directions.shape[1:])  # one buffer for every layer's D (in float64), then D**2
    terms = []
    for m, (y, delta) in enumerate(zip(fwd.ys, deltas, strict=False)):
        along[...] = directions[m]  # int8 signs are taken in float64 here, a layer at a time
        moved = delta @ np.swapaxes(along, 1, 2), y @ along
        np.square(along, out=along)
        fresh = np.einsum("nj,knj->k", np.square(delta), np.square(y) @ along) * scales[m].fresh_var
        if np.ndim(scales[m].stored_grad):  # a 16-bit dtype stores each gradient entry: its own rounding
            fresh = fresh + np.einsum("ij,kij->k", scales[m].stored_grad, along)
        terms.append((*moved, fresh))
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
