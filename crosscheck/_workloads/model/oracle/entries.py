"""The workload oracle, entry by entry: finite differences of a float64 loss, with an error bar on every
entry.

It only evaluates a loss (the workload's NumPy ``reference``, its ``surrogate``, or an implementation's
own loss evaluated in float64 without autodiff), never an autodiff system. Each entry is differentiated
by ``stencil.differentiate``: central differences at three steps extrapolated by Richardson's tableau,
one more step only where the error bar is still large, and the one-sided differences of the same
evaluations to see a kink at the point (the gap between them is then added to the error bar, so it
covers either side's slope, whichever convention a backend uses). An entry whose error bar is large
compared with the *model's* gradient scale (a kink, a discontinuity, a loss that is not finite nearby)
is reported as unjudgeable, never silently passed. The model's scale, not the parameter's own: a
parameter whose gradient is zero by construction (a bias the softmax cannot see) has an error bar of
rounding size around zero, and is judged against zero.

About 6 to 10 evaluations per entry for a smooth loss (``stencil.evaluations``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from crosscheck._workloads.model.oracle.batched import Batched, evaluate_one
from crosscheck._workloads.model.oracle.stencil import differentiate, evaluations
from crosscheck._workloads.model.oracle.sums import pairwise

#: An entry is unjudgeable when its error bar exceeds this fraction of |gradient entry| + the model's
#: RMS gradient: a relative error of 1e-4 could otherwise hide under it.
UNJUDGEABLE_FRACTION = 1e-4
#: The first step, as a fraction of the parameter's RMS (of every parameter's for an all-zero one), and
#: for a loss with float32 steps (whose noise needs a large step). Measured with
#: ``benchmarks/oracle_accuracy.py``: from 2**-4 the tableau's first window has converged on the
#: calibration's models (8.2 evaluations an entry against 10.3 from 0.25, no entry unjudgeable). Under
#: float32's noise a smaller first step only adds noise (a ReLU model with a float32 softmax: 78 to 138
#: of 552 entries unjudgeable from 0.25, 265 to 344 from 0.125, with the noise's share at 128 noises).
INITIAL_STEP = 2.0**-4
FLOAT32_STEP = 0.25
#: Loss evaluations per entry of a smooth loss (before any refinement): the cost model.
EVALUATIONS_PER_ENTRY = evaluations()
#: A loss with float32 steps (``precision.probe``): it is differenced from ``FLOAT32_STEP`` down to where
#: its noise wins (``stencil``), and an entry is unjudgeable when its error bar exceeds this fraction of
#: |gradient entry| + the model's RMS gradient.
FLOAT32_FRACTION = 1e-2

#: What a batch of evaluations gives: its losses (one, or an array of them).
_T = TypeVar("_T", bound=npt.ArrayLike)


class Guard(Protocol):
    """Runs one batch of evaluations: ``guard(thunk) -> thunk()``; the judge's guard goes through the
    engine's guarded call and raises ``OracleFailed`` with the reason when the batch failed."""

    def __call__(self, thunk: Callable[[], _T], /) -> _T: ...


#: ``progress(evaluations done, evaluations expected)``.
Tick = Callable[[int, int], None]


class OracleFailed(Exception):
    """A batch of loss evaluations failed (the loss raised, wrote to its inputs, ...): the reason."""


@dataclasses.dataclass(frozen=True)
class WorkloadEstimate:
    """The oracle's answer, each a dict keyed by parameter name.

    Attributes:
        value: the gradient estimate (float64).
        error: its error bar per entry.
        unjudgeable: True where the error bar is too large to judge the entry.
        reason: why an entry is unjudgeable ("" where judgeable).
        evaluations: how many times the loss was evaluated.
        scale: the gradient scale the unjudgeable rule used (the model's RMS gradient).
    """

    value: dict[str, np.ndarray]
    error: dict[str, np.ndarray]
    unjudgeable: dict[str, np.ndarray]
    reason: dict[str, np.ndarray]
    evaluations: int
    scale: float = 0.0


def direct(thunk: Callable[[], _T]) -> _T:
    """The guard of a batch run as it is, outside the engine's guarded call (the oracle on its own)."""
    return thunk()


def base_steps(params: dict[str, np.ndarray]) -> dict[str, float]:
    """Each parameter's scale for a first step: its RMS, else every parameter's RMS, else 1.

    Each tensor's sum of squares is taken once, a block at a time (``sums.pairwise``: the numbers of
    ``np.sum(np.square(v))`` for ``v`` in float64), for its RMS (``np.mean``'s: that sum over the count)
    and the overall's (two squared copies of the model a call, made whole). A parameter in
    another dtype (the point's own, float32, say) is cast to float64 a block at a time: the same numbers
    as from a float64 copy of it, which is not made."""
    squares = {k: _squares(np.asarray(v)) for k, v in params.items()}
    rms = {k: math.sqrt(float(squares[k] / v.size)) if v.size else 0.0 for k, v in params.items()}
    sizes = sum(v.size for v in params.values())
    overall = math.sqrt(sum(float(q) for q in squares.values()) / max(sizes, 1))
    return {k: r if r > 0 else (overall if overall > 0 else 1.0) for k, r in rms.items()}


def _squares(v: np.ndarray) -> float:
    """``np.sum(np.square(v))`` of ``v`` in float64, to the bit, a block at a time (each block cast)."""
    flat = v.reshape(-1)

    def block(a: int, b: int) -> np.ndarray:
        return np.array([np.sum(np.square(np.asarray(flat[a:b], np.float64)))])

    return pairwise(flat.size, block)[0]


def read_only(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Views the loss cannot write to (the oracle edits the arrays underneath between evaluations)."""
    out = {}
    for k, v in arrays.items():
        view = v.view()
        view.flags.writeable = False
        out[k] = view
    return out


class Evaluator:
    """Evaluations of ``loss`` at points near ``base``, in batches through ``guard``, counted.

    The loss sees read-only views of private float64 arrays, which ``batch`` edits for each point (the
    tensors ``varying``, default all). A ``oracle.batched.Batched`` loss is given each batch whole: it makes
    one call for many points where it can.
    """

    def __init__(
        self,
        loss,
        base: dict[str, np.ndarray],
        *,
        guard: Guard,
        progress: Tick | None,
        expected: int,
        varying: Sequence[str] | None = None,
    ) -> None:
        self.loss, self.base, self.guard, self.progress = loss, base, guard, progress
        self.work = {k: v.copy() for k, v in base.items()}
        self.views = read_only(self.work)
        self.expected, self.count = expected, 0
        self.varying = list(base) if varying is None else list(varying)

    def at_base(self) -> float:
        self.count += 1
        return float(self.guard(lambda: evaluate_one(self.loss, self.views)))

    def batch(self, shape: tuple[int, ...], perturb: Callable[[tuple[int, ...]], Callable[[], None]]):
        """The loss at every point ``pos`` of ``shape``: ``perturb(pos)`` edits ``work`` and returns
        what puts it back."""

        def run() -> np.ndarray:
            if isinstance(self.loss, Batched):  # one call for many points where it can
                return self.loss.evaluate(shape, perturb, self.work, self.views, self.varying, self.expected)
            out = np.empty(shape)
            for pos in np.ndindex(shape):
                restore = perturb(pos)
                try:
                    out[pos] = evaluate_one(self.loss, self.views)
                finally:
                    restore()
            return out

        out = self.guard(run)
        self.count += int(np.prod(shape))
        # Refinement can spend more than planned: the plan grows with it, so done never exceeds it.
        self.expected = max(self.expected, self.count)
        if self.progress is not None:
            self.progress(self.count, self.expected)
        return out


def estimate(
    loss: Callable[[dict[str, np.ndarray]], Any],
    params: dict[str, np.ndarray],
    *,
    names: Sequence[str] | None = None,
    guard: Guard = direct,
    progress: Tick | None = None,
    scale: float | None = None,
    noise: float = 0.0,
    float32: bool = False,
) -> WorkloadEstimate:
    """Differentiate ``loss(params) -> float`` with respect to every entry of ``names`` (default: all).

    Args:
        loss: a float64 function of the parameters dict; it receives read-only arrays.
        params: the point, as arrays (converted to float64 copies).
        names: the parameters to differentiate (the others stay at the point).
        guard: runs each batch of evaluations (the judge's guarded call).
        progress: called with (evaluations done, evaluations expected).
        scale: the model's gradient scale for the unjudgeable rule (default: the RMS of this estimate).
        noise: the measured rounding of one evaluation of the loss (0: ``EPS64 * |loss|`` only).
        float32: the noise is float32's (the loss has float32 steps): a coarser step and error bar.
    """
    base = {k: np.array(v, dtype=np.float64) for k, v in params.items()}
    chosen = list(base) if names is None else list(names)
    flat = np.concatenate([base[k].ravel() for k in chosen]) if chosen else np.zeros(0)
    owner = np.concatenate([np.full(base[k].size, i) for i, k in enumerate(chosen)]).astype(int)
    offsets = np.cumsum([0] + [base[k].size for k in chosen])
    steps = base_steps(base)
    h0 = (FLOAT32_STEP if float32 else INITIAL_STEP) * np.array([steps[k] for k in chosen])[owner]
    evaluator = Evaluator(
        loss, base, guard=guard, progress=progress, expected=EVALUATIONS_PER_ENTRY * flat.size, varying=chosen
    )

    def evaluate(xi: np.ndarray, index: np.ndarray) -> np.ndarray:
        index = np.broadcast_to(index, xi.shape)  # SciPy passes it broadcastable, maybe as floats

        def perturb(pos: tuple[int, ...]) -> Callable[[], None]:
            i = int(index[pos])
            array = evaluator.work[chosen[owner[i]]].reshape(-1)  # a view: edits reach ``work``
            local = i - offsets[owner[i]]
            array[local] = xi[pos]
            return lambda: array.__setitem__(local, flat[i])

        return evaluator.batch(xi.shape, perturb)

    known = scale

    def magnitude(value: np.ndarray) -> np.ndarray:
        return np.abs(np.nan_to_num(value)) + (_rms(value) if known is None else known)

    loss0 = evaluator.at_base()
    value, error, kink = differentiate(
        evaluate, flat, h0, np.arange(flat.size), loss0, noise, float32, magnitude
    )
    scale = _rms(value) if scale is None else scale
    fraction = FLOAT32_FRACTION if float32 else UNJUDGEABLE_FRACTION
    return _split(chosen, base, offsets, value, error, kink, evaluator.count, scale, fraction)


def _rms(value: np.ndarray) -> float:
    finite = value[np.isfinite(value)]
    return math.sqrt(float(np.mean(finite**2))) if finite.size else 0.0


def _split(names, base, offsets, value, error, kink, evaluations, scale, fraction) -> WorkloadEstimate:
    out: dict[str, dict[str, np.ndarray]] = {"value": {}, "error": {}, "unjudgeable": {}, "reason": {}}
    for i, name in enumerate(names):
        shape = base[name].shape
        v = value[offsets[i] : offsets[i + 1]].reshape(shape)
        e = error[offsets[i] : offsets[i + 1]].reshape(shape)
        sided = kink[offsets[i] : offsets[i + 1]].reshape(shape)
        finite = np.isfinite(v)
        loose = ~finite | ~(e <= fraction * (np.abs(np.nan_to_num(v)) + scale))
        out["value"][name] = np.where(finite, v, 0.0)
        out["error"][name] = np.where(finite, e, np.inf)
        out["unjudgeable"][name] = loose
        out["reason"][name] = reasons(finite, loose, sided)
    return WorkloadEstimate(**out, evaluations=int(evaluations), scale=float(scale))


def reasons(finite: np.ndarray, loose: np.ndarray, sided: np.ndarray) -> np.ndarray:
    """Why each entry is unjudgeable ("" where it is judgeable), as an object array."""
    return np.where(
        ~finite,
        "the loss is not finite near the point",
        np.where(
            loose & sided,
            "a kink: the one-sided derivatives differ",
            np.where(loose, "finite differences do not converge", ""),
        ),
    ).astype(object)
