"""Hessian-vector products of the stack: the direction, the oracle's HVP and the HVP cross-check.

The oracle's HVP uses no autodiff. ``H v = d/dt grad(W + t v)`` at ``t = 0``, and along the line the
stack is exactly polynomial while no pre-activation changes sign: ``z[m](t)`` has degree ``m + 1``, the
loss degree ``2L``, every gradient entry degree ``2L - 1``. So:

1. The *kink radius* ``R``: with the masks held at the base point, the coefficients of every
   ``z[m](t)`` are computed exactly (a polynomial forward pass); a unit keeps its sign for
   ``|t| < R_unit`` where ``sum_{j>=1} |c_j| R**j = |c_0|`` (a bound, found by bisection). Up to
   ``R = min R_unit`` held masks are the true masks, so the gradient along the line *is* a polynomial.
2. The finite-difference oracle's gradient (loss evaluations only, with its error bar) at ``2L``
   Chebyshev nodes ``t_j`` in ``[-r, r]``, ``r = min(R / 2, 1/4)``, row by row of ``x`` (the loss is a
   sum over rows; each row has its own radius).
3. ``H v`` is the derivative at 0 of the degree ``2L - 1`` interpolant: ``sum_j w_j grad(t_j)``, exact
   for such a polynomial (no truncation error). Its error bar is ``sum_j |w_j| (error_j + 2L u |grad_j|)``
   (the oracle's error bars and the rounding of the point ``W + t_j v``).

An entry is flagged when an oracle gradient entry at some node had to take the derivative of a piece
(a kink within its step), and every entry is flagged when ``R`` is below ``2**-24`` (a kink within reach
along ``v``: the one-sided Hessians may differ, and the product is ambiguous).

The direction ``v`` is ``standard_normal`` from ``numpy.random.default_rng([seed, 0x487650])``, scaled
per layer to the RMS of that layer's weights, in the case's dtype (user arrays use seed 0).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np

from crosscheck._compare import terms
from crosscheck._compare.constants import OTHER_DTYPE, UNIT_ROUNDOFF
from crosscheck._workloads.stack.forward import backward, forward
from crosscheck._workloads.stack.oracle import parallel as _parallel

#: Second word of the direction's seed: the gradient's screening directions use other streams.
DIRECTION_STREAM = 0x487650
#: Below this kink radius (in units of the direction, itself scaled like the weights) every entry is
#: unjudgeable: float64 rounding divided by the radius would reach float32 precision.
MIN_RADIUS = UNIT_ROUNDOFF["float32"]
#: The largest node: the polynomial is exact at any size, but rounding grows with the weights' change.
MAX_RADIUS = 0.25


def direction(weights: np.ndarray, seed: int) -> np.ndarray:
    """The HVP direction ``v`` of a case: Gaussian, each layer scaled to its weights' RMS."""
    rng = np.random.default_rng([int(seed), DIRECTION_STREAM])
    v = rng.standard_normal(weights.shape)
    rms = np.sqrt(np.mean(np.asarray(weights, np.float64) ** 2, axis=(1, 2)))
    return (v * np.where(rms > 0, rms, 1.0)[:, None, None]).astype(weights.dtype)


def direction_record(v: np.ndarray, seed: int) -> dict[str, Any]:
    """How ``v`` was made, for the JSON report (enough to rebuild it, and a hash to check it)."""
    return {
        "generator": f"numpy.random.default_rng([{int(seed)}, {DIRECTION_STREAM:#x}]).standard_normal",
        "scaling": "each layer times the RMS of its weights",
        "dtype": v.dtype.name,
        "norm": float(np.linalg.norm(v.astype(np.float64))),
        "sha256": hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest(),
    }


@dataclasses.dataclass(frozen=True)
class HvpEstimate:
    """The oracle's Hessian-vector product.

    Attributes:
        value, error: ``(L, d, d)``: the estimate and a bound on its error per entry.
        kink: ``(L, d, d)`` bool: entries that cannot be judged.
        reason: why (one string; "" when nothing is flagged).
        radius: the smallest kink radius ``R`` along ``v`` (of any row); ``kink_at`` the
            pre-activation ``(layer, row, unit)`` that sets it.
        nodes: the ``t_j`` used (``2L`` per row); evaluations: loss evaluations in all.
    """

    value: np.ndarray
    error: np.ndarray
    kink: np.ndarray
    reason: str
    radius: float
    kink_at: tuple[int, int, int]
    nodes: np.ndarray
    evaluations: int


@_parallel.blas_on_one_thread
def kink_radius(weights: np.ndarray, x: np.ndarray, v: np.ndarray) -> tuple[float, tuple[int, int, int]]:
    """How far along ``v`` (``|t|``) no pre-activation can change sign, and the one that limits it."""
    fwd = forward(weights, x)
    v = np.asarray(v, np.float64)
    coeffs = [fwd.ys[0]]  # y[m](t) = sum_j coeffs[j] * t**j, masks held at the base point
    best, where = np.inf, (-1, -1, -1)
    for m, (w, mask) in enumerate(zip(fwd.weights, fwd.masks, strict=True)):
        z = [c @ w for c in coeffs] + [np.zeros_like(fwd.zs[m])]
        for j, c in enumerate(coeffs):
            z[j + 1] = z[j + 1] + c @ v[m]
        radius = _unit_radius(np.abs(np.stack(z)))
        flat = int(np.argmin(radius))
        if radius.flat[flat] < best:
            row, unit = map(int, np.unravel_index(flat, radius.shape))
            best, where = float(radius.flat[flat]), (m, row, unit)
        coeffs = [c * mask for c in z]
    return best, where


def _unit_radius(c: np.ndarray) -> np.ndarray:
    """Per unit, the ``t > 0`` with ``sum_{j>=1} c[j] t**j = c[0]`` (inf for a constant polynomial)."""
    const = ~np.any(c[1:] > 0, axis=0)
    lo, hi = np.zeros(c.shape[1:]), np.ones(c.shape[1:])
    powers = np.arange(1, len(c))[:, None, None]

    def grows(t):
        return np.sum(c[1:] * t[None] ** powers, axis=0) >= c[0]

    for _ in range(64):  # find an upper end (the sum grows without bound)
        short = ~grows(hi) & ~const
        if not short.any():
            break
        hi = np.where(short, hi * 16, hi)
    for _ in range(60):
        mid = (lo + hi) / 2
        over = grows(mid)
        lo, hi = np.where(over, lo, mid), np.where(over, mid, hi)
    return np.where(const, np.inf, np.where(c[0] > 0, lo, 0.0))


def _derivative_weights(n: int, r: float) -> tuple[np.ndarray, np.ndarray]:
    """Chebyshev nodes on ``[-r, r]`` and weights ``w`` with ``sum w_j p(t_j) = p'(0)`` for degree < n."""
    cheb = np.polynomial.chebyshev
    unit = np.cos((2 * np.arange(n) + 1) * np.pi / (2 * n))
    # p(t) = sum_i c_i T_i(t / r), c = C^-1 p(nodes); p'(0) = sum_i c_i T_i'(0) / r.
    slope = np.array([cheb.chebval(0.0, cheb.chebder(np.eye(n)[i])) for i in range(n)])
    weights = np.linalg.solve(cheb.chebvander(unit, n - 1).T, slope) / r
    return unit * r, weights


@_parallel.blas_on_one_thread
def oracle_hvp(
    oracle: Any, weights: np.ndarray, x: np.ndarray, v: np.ndarray, *, layers: Any = None
) -> HvpEstimate:
    """The finite-difference oracle's ``H v`` (see the module docstring), float64, with error bars.

    The loss is a sum over the rows of ``x``, so ``H v`` is the sum of each row's, and each row is
    differentiated within its own kink radius: a row near a kink costs precision to that row's share
    only (7 to 16 times tighter error bars than one radius for all rows, on gaussian d = 16 cases).
    The rows run in parallel (``parallel``); ``layers`` restricts the estimate (NaN elsewhere).
    """
    w64, v64 = np.asarray(weights, np.float64), np.asarray(v, np.float64)
    radii, radius, at = _radii(w64, x, v64)
    shape = w64.shape
    if not radius > MIN_RADIUS:
        reason = f"a ReLU kink within reach along v (radius {radius:.3g} < 2**-24)"
        nan = np.full(shape, np.nan)
        return HvpEstimate(nan, nan.copy(), np.ones(shape, bool), reason, radius, at, np.zeros(0), 0)
    two_l_u = 2 * len(w64) * UNIT_ROUNDOFF["float64"]

    def at_node(point: np.ndarray, row: np.ndarray, c: float):
        est = oracle.estimate(point, row, layers=layers)
        return c * est.value, abs(c) * (est.error + two_l_u * np.abs(est.value)), est.kink, est.evaluations

    flops = 4.0 * len(w64) ** 2 * x.shape[0] * shape[1] ** 4  # 2L nodes x a one-row oracle, per row
    value, error, kink, evaluations, nodes = _along_v(w64, x, v64, radii, at_node, flops)
    reason = "the oracle's step crosses a ReLU kink at a node along v" if kink.any() else ""
    return HvpEstimate(value, error, kink, reason, radius, at, nodes, evaluations)


@dataclasses.dataclass(frozen=True)
class HvpScreenEstimate:
    """The oracle's ``H v`` along random directions: ``value[k, s]`` estimates
    ``sum((H v)[k] * directions[k, s])``.

    Attributes:
        directions: ``(L, S, d, d)``.
        value, error: ``(L, S)``: the estimates and a bound on their errors.
        kink: ``(L, S)`` bool: directions that cannot be judged (their layer is checked entry by entry).
        reason, radius, kink_at, nodes, evaluations: as in ``HvpEstimate``.
    """

    directions: np.ndarray
    value: np.ndarray
    error: np.ndarray
    kink: np.ndarray
    reason: str
    radius: float
    kink_at: tuple[int, int, int]
    nodes: np.ndarray
    evaluations: int


@_parallel.blas_on_one_thread
def oracle_hvp_screen(
    oracle: Any, weights: np.ndarray, x: np.ndarray, v: np.ndarray, directions: np.ndarray
) -> HvpScreenEstimate:
    """``sum((H v)[k] * directions[k, s])`` with error bars, from the oracle's screening alone.

    The directional derivative along ``D`` is linear in the gradient, so it commutes with the
    derivative along ``v``: at every node the oracle's screened derivatives (two loss evaluations per
    direction) replace its full gradient, and the same node weights give ``D . H v`` exactly for the
    polynomial. The error bar is ``sum_j |w_j| (error_j + 2L u sum(|D| |grad_j|))``: the screened
    derivatives' own bars, and the rounding of the point ``W + t_j v`` bounded entry by entry as in
    ``oracle_hvp`` (``|grad_j|`` from a float64 backward pass, which only sizes this bar).
    """
    w64, v64 = np.asarray(weights, np.float64), np.asarray(v, np.float64)
    radii, radius, at = _radii(w64, x, v64)
    shape = directions.shape[:2]
    if not radius > MIN_RADIUS:
        reason = f"a ReLU kink within reach along v (radius {radius:.3g} < 2**-24)"
        nan = np.full(shape, np.nan)
        return HvpScreenEstimate(
            directions, nan, nan.copy(), np.ones(shape, bool), reason, radius, at, np.zeros(0), 0
        )
    two_l_u = 2 * len(w64) * UNIT_ROUNDOFF["float64"]
    magnitude = np.abs(directions).reshape(*shape, -1)
    signs = bool(np.all(magnitude == 1.0))  # +-1 directions: sum(|D| |g|) is sum(|g|), no pass over D

    def at_node(point: np.ndarray, row: np.ndarray, c: float):
        sc = oracle.screen(point, row, directions, keep_model=False)
        _, grads = backward(forward(point, row))
        size = np.abs(np.stack(grads)).reshape(shape[0], -1)
        if signs:
            along = np.broadcast_to(size.sum(axis=1)[:, None], shape)
        else:
            along = np.einsum("ksp,kp->ks", magnitude, size)
        return c * sc.value, abs(c) * (sc.error + two_l_u * along), sc.kink, sc.evaluations

    flops = 8.0 * len(w64) ** 2 * x.shape[0] * shape[1] * w64.shape[1] ** 2
    value, error, kink, evaluations, nodes = _along_v(w64, x, v64, radii, at_node, flops)
    reason = "the oracle's step crosses a ReLU kink at a node along v" if kink.any() else ""
    return HvpScreenEstimate(directions, value, error, kink, reason, radius, at, nodes, evaluations)


def _radii(w64: np.ndarray, x: np.ndarray, v64: np.ndarray):
    """Each row's kink radius along ``v``, the smallest, and the pre-activation ``(layer, row, unit)``
    that sets it."""
    radii = [kink_radius(w64, x[n : n + 1], v64) for n in range(x.shape[0])]
    row = int(np.argmin([r for r, _ in radii]))
    radius, (layer, _, unit) = radii[row]
    return radii, radius, (layer, row, unit)


def _along_v(w64, x, v64, radii, at_node, flops):
    """``sum_j at_node(W + t_j v, x[n], w_j)`` over each row's nodes, summed over rows.

    ``at_node`` returns ``(weighted value, weighted error, kink flags, evaluations)``. Rows run in
    parallel; every sum is taken in the same order (nodes, then rows), so the result is the same bits
    whatever the threads do.
    """
    n_layers = len(w64)

    def one_row(n: int):
        nodes, coef = _derivative_weights(2 * n_layers, min(radii[n][0] / 2, MAX_RADIUS))
        total: list[Any] = [0.0, 0.0, False, 0]
        for t, c in zip(nodes, coef, strict=True):
            value, error, kink, evaluations = at_node(w64 + t * v64, x[n : n + 1], c)
            total = [total[0] + value, total[1] + error, total[2] | kink, total[3] + evaluations]
        return n, nodes, total

    pieces = _parallel.in_parallel(one_row, range(x.shape[0]), flops=flops, width=w64.shape[1])
    rows = sorted(pieces, key=lambda r: r[0])
    value, error, kink, evaluations = rows[0][2]
    for _, _, (more_value, more_error, more_kink, more_evaluations) in rows[1:]:
        value, error = value + more_value, error + more_error
        kink, evaluations = kink | more_kink, evaluations + more_evaluations
    return value, error, np.asarray(kink), evaluations, np.concatenate([r[1] for r in rows])


#: How the candidate's own rounding is measured: its HVP re-run in the other precision.
RERUN_HELP = terms.measured_help(
    "the candidate's own rounding",
    "|its HVP - its HVP re-run in the other precision|",
    "that difference's RMS over the layer",
    then=", scaled by the unit-roundoff ratio for a float64 case",
)


def rerun_usable(value: np.ndarray, again: np.ndarray, dtype: str) -> bool:
    """Whether ``again`` is a finite re-run of ``value`` in the other precision."""
    return (
        again.dtype.name == OTHER_DTYPE[dtype]
        and again.shape == value.shape
        and bool(np.all(np.isfinite(again)))
    )


def rerun_fallback(value: np.ndarray, dtype: str) -> np.ndarray:
    """Without a re-run: a bound of 2L unit roundoffs of each layer's largest entry."""
    u = UNIT_ROUNDOFF[dtype]
    scale = np.max(np.abs(value.astype(np.float64)), axis=(1, 2), keepdims=True)
    return terms.modelled(2 * len(value) * u) * np.broadcast_to(scale, value.shape)


#: Said with the ``rerun`` term of a candidate whose two precisions differ beyond float32 rounding.
CAPPED = ", capped at what float32 permits: its two precisions differ beyond float32 rounding"


def measured_delta(value: np.ndarray, again: np.ndarray, dtype: str) -> tuple[np.ndarray, bool]:
    """``value - again``, capped at what float32 permits (``_compare.terms.cap``, from the float64 one) when
    the typical entry is beyond it, so that no candidate sets its own tolerance; and whether it was."""
    wide = again if dtype == "float32" else value
    delta, ratio = terms.cap(value.astype(np.float64) - again.astype(np.float64), wide, terms.rms(wide))
    return delta, ratio > 1.0


def rerun_term(value: np.ndarray, again: np.ndarray, dtype: str) -> tuple[np.ndarray, str]:
    """The ``rerun`` tolerance term of a candidate whose HVP in the case's ``dtype`` is ``value`` and in
    the other precision ``again``.

    Rounding errors scale with the unit roundoff, so the difference between the candidate's float32
    and float64 answers *is* (to within float64 rounding) its float32 error on this case, kink flips
    between the two precisions included; for a float64 case it is scaled down by ``2**-53 / 2**-24``.
    The layer RMS guards entries where the two happen to agree by chance. Returns the term and a note.
    """
    other = OTHER_DTYPE[dtype]
    if not rerun_usable(value, again, dtype):
        note = f"no {other} re-run (it returned {again.dtype.name}): 2L unit roundoffs of the layer max"
        return rerun_fallback(value, dtype), note
    signed, capped = measured_delta(value, again, dtype)
    delta = np.abs(signed)
    note = f"re-run in {other}" + (CAPPED if capped else "")
    rms = np.sqrt(np.mean(delta**2, axis=(1, 2), keepdims=True))
    return terms.measured(delta, rms, widen=terms.widening(dtype)), note
