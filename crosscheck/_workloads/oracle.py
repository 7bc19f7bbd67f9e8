"""The workload oracle: finite differences of a NumPy float64 loss, with an error bar on every entry.

It only evaluates the loss (the workload's ``reference``, or its ``surrogate``), never an autodiff
system. Each entry is differentiated by ``scipy.differentiate.derivative`` (an order-8 central stencil,
the step halved each iteration until two successive estimates agree to ~1e-8), whose ``error`` is the
difference between the last two estimates. The error bar adds the rounding of the stencil.

A central difference cannot see a kink at (or very near) the point: it converges, with a small error
estimate, to the average of the two slopes. So every entry is also differentiated one-sidedly, forward
and backward; where the two disagree beyond their own error bars, the gap is added to the error bar (so
it covers either side's slope, whichever convention a backend uses). An entry whose error bar is large
compared with the gradient (a kink, a discontinuity, a loss that is not finite nearby) is reported as
unjudgeable, never silently passed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

#: Safety factor on SciPy's error estimate (the difference of the last two estimates).
ESTIMATE_SAFETY = 2.0
#: The stencil's rounding: this many float64 unit roundoffs of |loss| per unit of the final step.
STENCIL_ROUNDING = 32.0
#: An entry is unjudgeable when its error bar exceeds this fraction of |gradient entry| + the
#: parameter's RMS gradient: a relative error of 1e-4 could otherwise hide under it.
UNJUDGEABLE_FRACTION = 1e-4
#: The first step, as a fraction of the parameter's RMS (1 for an all-zero parameter).
INITIAL_STEP = 0.25
EPS64 = float(np.finfo(np.float64).eps)


@dataclasses.dataclass(frozen=True)
class WorkloadEstimate:
    """The oracle's answer, each a dict keyed by parameter name.

    Attributes:
        value: the gradient estimate (float64).
        error: its error bar per entry.
        unjudgeable: True where the error bar is too large to judge the entry.
        reason: why an entry is unjudgeable ("" where judgeable).
        evaluations: how many times the loss was evaluated.
    """

    value: dict[str, np.ndarray]
    error: dict[str, np.ndarray]
    unjudgeable: dict[str, np.ndarray]
    reason: dict[str, np.ndarray]
    evaluations: int


def estimate(
    loss: Callable[[dict[str, np.ndarray]], float], params: dict[str, np.ndarray]
) -> WorkloadEstimate:
    """Differentiate ``loss(params) -> float`` with respect to every entry of every parameter.

    Args:
        loss: a NumPy float64 function of the parameters dict; it must not modify its argument.
        params: the point, as arrays (converted to float64 copies).
    """
    from scipy.differentiate import derivative

    base = {k: np.array(v, dtype=np.float64) for k, v in params.items()}
    names = list(base)
    flat = np.concatenate([base[k].ravel() for k in names]) if names else np.zeros(0)
    owner = np.concatenate([np.full(base[k].size, i) for i, k in enumerate(names)])
    offsets = np.cumsum([0] + [base[k].size for k in names])
    rms = np.array([math.sqrt(float(np.mean(base[k] ** 2))) for k in names])
    h0 = INITIAL_STEP * np.where(rms > 0, rms, 1.0)[owner]
    work = {k: v.copy() for k, v in base.items()}
    count = [0]

    def evaluate(xi: np.ndarray, index: np.ndarray) -> np.ndarray:
        out = np.empty(xi.shape)
        index = np.broadcast_to(index, xi.shape)  # SciPy passes it broadcastable, maybe as floats
        for pos in np.ndindex(xi.shape):
            i = int(index[pos])
            array = work[names[owner[i]]].reshape(-1)  # a view: edits reach ``work``
            local = i - offsets[owner[i]]
            array[local] = xi[pos]
            try:
                out[pos] = float(loss(work))
            except (ArithmeticError, ValueError):
                out[pos] = np.nan
            array[local] = flat[i]
            count[0] += 1
        return out

    loss0 = abs(float(loss(work)))
    index = np.arange(flat.size)
    found = {}
    with np.errstate(all="ignore"):
        for direction in (0, 1, -1):
            res = derivative(evaluate, flat, args=(index,), initial_step=h0, step_direction=direction)
            h_final = h0 * 2.0 ** -np.maximum(res.nit, 1)
            rounding = STENCIL_ROUNDING * EPS64 * loss0 / h_final
            found[direction] = (res.df, ESTIMATE_SAFETY * np.nan_to_num(res.error, nan=np.inf) + rounding)
    (value, error), (forward, e_fwd), (backward, e_bwd) = found[0], found[1], found[-1]
    with np.errstate(invalid="ignore"):
        gap = np.abs(forward - backward)
        kink = ~(gap <= e_fwd + e_bwd)
    error = error + np.where(kink, np.nan_to_num(gap, nan=np.inf), 0.0)
    return _split(names, base, offsets, np.asarray(value, np.float64), error, kink, count[0])


def _split(names, base, offsets, value, error, kink, evaluations) -> WorkloadEstimate:
    out: dict[str, dict[str, np.ndarray]] = {"value": {}, "error": {}, "unjudgeable": {}, "reason": {}}
    for i, name in enumerate(names):
        shape = base[name].shape
        v = value[offsets[i] : offsets[i + 1]].reshape(shape)
        e = error[offsets[i] : offsets[i + 1]].reshape(shape)
        sided = kink[offsets[i] : offsets[i + 1]].reshape(shape)
        finite = np.isfinite(v)
        scale = math.sqrt(float(np.mean(np.where(finite, v, 0.0) ** 2)))
        loose = ~finite | ~(e <= UNJUDGEABLE_FRACTION * (np.abs(np.nan_to_num(v)) + scale))
        reason = np.where(
            ~finite,
            "the loss is not finite near the point",
            np.where(
                loose & sided,
                "a kink: the one-sided derivatives differ",
                np.where(loose, "finite differences do not converge", ""),
            ),
        ).astype(object)
        out["value"][name] = np.where(finite, v, 0.0)
        out["error"][name] = np.where(finite, e, np.inf)
        out["unjudgeable"][name] = loose
        out["reason"][name] = reason
    return WorkloadEstimate(**out, evaluations=int(evaluations))
