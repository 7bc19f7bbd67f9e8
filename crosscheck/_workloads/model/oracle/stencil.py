"""Derivatives of a one-dimensional function at a point from few evaluations: Richardson's tableau.

Every item (an entry, or a direction ``t -> loss(theta + t v)``) is differenced at steps ``h``, ``h/2``,
``h/4`` (``LEVELS``): two evaluations a step, the loss at the point shared by every item, so six
evaluations an item. Central differences ``D(h) = (f(h) - f(-h)) / 2h = f' + c2 h^2 + c4 h^4 + ...`` are
extrapolated to ``h -> 0`` along the tableau ``T[j][k] = (4^k T[j][k-1] - T[j-1][k-1]) / (4^k - 1)``;
the estimate is the last diagonal entry, and its error bar ``ESTIMATE_SAFETY`` times its distance to the
diagonal entry before (the error of a lower-order estimate, which bounds the last one's in the tableau's
asymptotic regime) plus the stencil's rounding (``STENCIL_ROUNDING`` roundings of one evaluation over
the last step). Where that error bar exceeds ``REFINE_TO`` of the item's magnitude (the caller's: the
value plus the model's scale), the item gets one more step, half the last (two evaluations), up to
``MAX_LEVELS``: the cost goes where accuracy needs it. The tableau spans the last ``LEVELS`` steps only
(a step that straddled a kink drops out of it), and the estimate of the window with the smallest error
bar is kept (a smaller step can only add rounding once the tableau has converged). So an item is not
refined once its error bar is under the rounding's share at the next step (``_worth_halving``): no
window ending there could replace it.

A central difference cannot see a kink at the point: it converges, with a small error, to the average
of the two slopes. The same evaluations give the one-sided differences ``(f(+-h) - f(0)) / +-h``,
extrapolated along their own tableau (factors ``2^k``: their error has every power of ``h``); where the
forward and backward estimates differ beyond their own error bars, a kink is suspected, the gap is added
to the error bar (it covers either slope), and the item is refined too (a kink near the point, not at it,
leaves the stencil as the step shrinks). No evaluation is spent on one-sided differences of their own.

A loss with float32 steps (``precision.probe``) has float32's noise, measured: its share of the error
bar is ``NOISE_ROUNDING`` noises over the last step, the error bar always covers the one-sided
estimates' gap (the noise inflates their own error estimates, under which a kink would hide: a ReLU
crossed inside every step moves the central differences smoothly enough to fool the tableau), and an
item is refined, one halving at a time, while its error bar exceeds the noise's share at the next step
(``_worth_halving``): down to where the noise wins, and no further (SciPy's ``derivative``, from a
quarter of the RMS and halved at most once, left entries of a ReLU model 14 times outside its bars).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: Safety factor on the tableau's error estimate (the distance between its last two diagonal entries).
ESTIMATE_SAFETY = 4.0
#: The stencil's rounding: this many roundings of one evaluation per unit of the last step.
STENCIL_ROUNDING = 128.0
#: ... under float32's *measured* noise (``precision.probe``: the RMS noise of one evaluation): the
#: tableau's estimate carries about one noise over the last step (weights (64, -20, 1) / 45 on central
#: differences of noise / (sqrt(2) h) each), so this many is that many standard deviations; measured on a
#: ReLU model with a float32 softmax (``tests/workloads/model/oracle/test_stencil.py``), the worst
#: |error| / bar was 0.25.
NOISE_ROUNDING = 32.0
#: Steps differenced before any refinement (h to h/8).
LEVELS = 4
#: Steps in one tableau (h, h/2, h/4: an estimate of order h^6); the window before it must agree.
WINDOW = 3
#: At most this many steps (the last ``h / 2**(MAX_LEVELS - 1)``).
MAX_LEVELS = 10
#: An item is refined while its error bar exceeds this fraction of its magnitude.
REFINE_TO = 1e-9
EPS64 = float(np.finfo(np.float64).eps)

#: ``evaluate(x, index) -> values``: the function of item ``index[i]`` at ``x[..., i]``.
Evaluate = Callable[[np.ndarray, np.ndarray], np.ndarray]


def evaluations(float32: bool = False) -> int:
    """Evaluations an item costs before any refinement (the cost model)."""
    return 2 * LEVELS


def _tableau(columns: np.ndarray, factor: float) -> tuple[np.ndarray, np.ndarray]:
    """Richardson's tableau over ``columns`` (levels x items, step halved at each level): the last
    diagonal entry and its distance to the one before."""
    rows = [columns[0]]
    diagonal = [columns[0]]
    for j in range(1, columns.shape[0]):
        row = [columns[j]]
        for k in range(1, j + 1):
            weight = factor**k
            row.append((weight * row[k - 1] - rows[k - 1]) / (weight - 1.0))
        rows = row
        diagonal.append(row[-1])
    if len(diagonal) < 2:
        return diagonal[-1], np.full(columns.shape[1], np.inf)
    return diagonal[-1], np.abs(diagonal[-1] - diagonal[-2])


def _estimates(store: np.ndarray, loss0: float, rounding: float, float32: bool = False):
    """From ``store``: ``f(x0 + hp)``, ``f(x0 - hm)``, ``hp`` and ``hm`` at each level (4 x levels x
    items, the last ``WINDOW`` + 1 levels at most): the central estimate, its error bar, and whether the
    one-sided estimates differ beyond their own error bars (a kink). Under float32's noise (``float32``)
    the error bar always covers the one-sided estimates' gap (``_estimates`` of ``noisy``)."""
    plus, minus, hp, hm = store
    slopes = (plus - minus) / (hp + hm)
    central, error = _tableau(slopes[-WINDOW:], 4.0)
    if slopes.shape[0] > WINDOW:  # the window before: its estimate must agree too
        before, _ = _tableau(slopes[-WINDOW - 1 : -1], 4.0)
        error = np.maximum(error, np.abs(central - before))
    forward, e_fwd = _tableau(((plus - loss0) / hp)[-WINDOW:], 2.0)
    backward, e_bwd = _tableau(((loss0 - minus) / hm)[-WINDOW:], 2.0)
    last = np.minimum(hp[-1], hm[-1])
    stencil = (NOISE_ROUNDING if float32 else STENCIL_ROUNDING) * rounding / last
    error = ESTIMATE_SAFETY * np.nan_to_num(error, nan=np.inf) + stencil
    sided = ESTIMATE_SAFETY * (np.nan_to_num(e_fwd, nan=np.inf) + np.nan_to_num(e_bwd, nan=np.inf))
    gap = np.abs(forward - backward)
    with np.errstate(invalid="ignore"):
        kink = ~(gap <= sided + 2 * stencil)
    if float32:  # noise inflates the one-sided error estimates: a kink hides under them
        return central, error + np.nan_to_num(gap, nan=np.inf), kink
    return central, error + np.where(kink, np.nan_to_num(gap, nan=np.inf), 0.0), kink


def differentiate(
    evaluate: Evaluate,
    x0: np.ndarray,
    h0,
    index: np.ndarray,
    loss0: float,
    noise: float = 0.0,
    float32: bool = False,
    magnitude: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(value, error bar, kink)`` of the derivative of every item at ``x0`` (see the module docstring).

    ``noise`` is the rounding of one evaluation when it is known to exceed ``EPS64 * |loss0|``;
    ``magnitude(value)`` the size each item's error bar is refined against (default: ``|value|`` + the
    values' RMS); ``float32``: the noise is float32's, and an item is refined only while halving the step
    can still narrow its error bar (``_worth_halving``)."""
    x0 = np.asarray(x0, np.float64).ravel()
    n = x0.size
    h = np.broadcast_to(np.asarray(h0, np.float64), (n,)).copy()
    index = np.broadcast_to(np.asarray(index), (n,))
    rounding = max(EPS64 * float(np.nan_to_num(abs(loss0), nan=0.0)), noise)
    first, most = LEVELS, MAX_LEVELS
    store = np.full((4, most, n), np.nan)  # f(x0 + hp), f(x0 - hm), hp, hm per level

    def run(level: int, items: np.ndarray) -> None:
        step = h[items] * 2.0**-level
        up, down = x0[items] + step, x0[items] - step
        with np.errstate(all="ignore"):
            found = np.asarray(evaluate(np.stack([up, down]), index[items]), np.float64)
        store[0, level, items], store[1, level, items] = found[0], found[1]
        store[2, level, items], store[3, level, items] = up - x0[items], x0[items] - down

    everything = np.arange(n)
    for level in range(first):
        run(level, everything)
    with np.errstate(all="ignore"):
        value, error, kink = _estimates(store[:, :first], loss0, rounding, float32)
        active = everything
        for level in range(first, most):
            size = _magnitude(value) if magnitude is None else magnitude(value)
            wanted = ~(error[active] <= REFINE_TO * size[active])
            wanted &= _worth_halving(error[active], h[active] * 2.0 ** -(level - 1), rounding, float32)
            active = active[wanted]
            if not active.size:
                break
            run(level, active)
            window = store[:, max(level - WINDOW, 0) : level + 1, active]
            v, e, k = _estimates(window, loss0, rounding, float32)
            better = ~(e >= error[active])  # the smallest error bar of any window is kept
            chosen = active[better]
            value[chosen], error[chosen], kink[chosen] = v[better], e[better], k[better]
    return value, error, kink


def _worth_halving(error: np.ndarray, last: np.ndarray, rounding: float, float32: bool = False) -> np.ndarray:
    """Whether the next step (half of ``last``) can narrow an error bar: a window ending there carries at
    least the rounding's share ``STENCIL_ROUNDING * rounding / step`` (under float32's noise
    ``NOISE_ROUNDING``; twice the last's), so the step is halved while the error bar exceeds that: the
    truncation estimate (with the gap of a kink) still outweighs the rounding's share. A bar already
    under it is the smallest any later window can give (only a smaller bar replaces a kept one), so
    stopping there changes no estimate, only spares the evaluations."""
    share = (NOISE_ROUNDING if float32 else STENCIL_ROUNDING) * rounding
    return ~(error <= 2.0 * share / last)


def _magnitude(value: np.ndarray) -> np.ndarray:
    finite = value[np.isfinite(value)]
    scale = float(np.sqrt(np.mean(finite**2))) if finite.size else 0.0
    return np.abs(np.nan_to_num(value)) + scale
