"""The precision a "float64" loss really computes in: its noise under tiny perturbations.

Real models keep float32 steps in a float64 run (Hugging Face computes the attention softmax, RMSNorm and
T5's LayerNorm in float32 whatever the input's dtype): the loss comes back as a float64 number, but it
carries float32's rounding. Differencing it as if it were float64 makes every error bar about 2**29 times
too small: a healthy derivative is called wrong, two healthy implementations "compute a different
function", and a gradient that is zero by construction is drowned in noise the oracle did not expect.

``probe`` evaluates the loss at ``2 * HALF + 1`` points on a line through the point, ``PROBE_STEP`` of
each tensor's RMS apart (far enough that float32 steps round differently at each, near enough that a
cubic fits the smooth part to float64 rounding), and returns the RMS residual of that cubic fit: the
noise of one evaluation. A float64 loss's noise is a few float64 unit roundoffs of its terms; a loss with
float32 steps has noise of float32's size. The float32 evaluation of the same loss tells the two apart
whatever the cancellation in the sum: it differs from the float64 one by float32's rounding of the
terms, about ``2**29`` float64 noises, and by about one noise for a loss with float32 steps.

``probed`` (what the oracle runs) fits the ``2 * FIRST + 1`` middle points first and stops there when
their noise is float64's beyond doubt (``CLEAR`` times it would still be: 8 evaluations of a forward
pass each saved); otherwise it goes on to every point and finds what ``probe`` finds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from crosscheck._workloads.model.oracle.entries import Evaluator, Guard, base_steps
from crosscheck._workloads.model.oracle.line import Line, Walker
from crosscheck._workloads.model.oracle.stencil import EPS64

#: The probe's points on each side of the point.
HALF = 8
#: The probe's loss evaluations, at most (counted toward the oracle's budget).
PROBE_EVALUATIONS = 2 * HALF + 1
#: ``probed``'s first points on each side (``2 * FIRST + 1`` evaluations, 5 degrees of freedom left).
FIRST = 4
#: ``probed`` stops at its first points where this many times their noise would still be float64's (a
#: loss with float32 steps, or one that bends on the probe's scale, is above float64's at 9 points too):
#: the residual over 9 points of a loss with float32 steps is float32's noise, 2**14 and more above the
#: bounds (Hugging Face's zoo: 3e-7 to 7e-5 of the tighter one), a float64 loss's 245 to 3,800 below it,
#: and the 17 points' residual 0.74 to 1.97 times the 9's (38 losses: ``docs/measurements/real-size.md``,
#: "the noise probe from 9 points").
CLEAR = 2.0**6
#: Spacing of the probe's points, as a fraction of each tensor's RMS.
PROBE_STEP = 2.0**-20
#: Entries of the probe's signs drawn at once (``_signs``: an int64 array of 8 MiB at most).
DRAW = 1 << 20
#: A loss whose noise exceeds this fraction of |float32 loss - float64 loss| has float32 steps (a
#: float64 one is ~2**-29 of it; one with float32 steps ~1): the geometric middle, with margin.
FLOAT32_NOISE = 2.0**-15
#: ... and exceeds this many float64 unit roundoffs of |loss| (when the float32 loss is not known).
FLOAT64_NOISE_ULPS = 2.0**12
#: ... and stays under this many times that gap (or a float32 unit roundoff of |loss|, where the gap is
#: small by chance): float32 steps inside a float64 loss round at most about as much as the whole float32
#: loss does (Hugging Face's zoo: 0.04 to 1.2 times the gap); a residual far
#: above it is the loss's own curvature on the probe's scale (BEiT's zero ``cls_token`` under a LayerNorm
#: of epsilon 1e-12: 5.7e4 times the gap), not rounding.
ROUNDING_CEILING = 2.0**8
#: The probe's direction: fixed, so the same case is probed the same way.
SEED = 24


@dataclasses.dataclass(frozen=True)
class Precision:
    """What the probe found: ``noise`` (RMS residual of one evaluation), whether the loss computes in
    float32 somewhere (``float32``), and a sentence that says so."""

    noise: float
    float32: bool
    text: str
    #: The probe's loss evaluations (``probed``: 9, or 17 where the first 9 leave a doubt).
    evaluations: int = PROBE_EVALUATIONS

    def to_dict(self) -> dict[str, Any]:
        out = {"noise": self.noise, "float32": self.float32, "text": self.text}
        return {**out, "evaluations": self.evaluations}


def probe(
    loss: Callable[[dict[str, np.ndarray]], Any],
    params: dict[str, np.ndarray],
    guard: Guard,
    line: Line | None = None,
) -> float:
    """The RMS residual of a cubic fit to ``loss`` along a fixed random line through ``params``; with an
    adapter's ``line`` (``oracle.line``) the points are formed on its side, the same points to the bit
    (``signs * (t * step * PROBE_STEP)``: the sign exact, the step times a power of two exact)."""
    t = np.arange(-HALF, HALF + 1, dtype=np.float64)
    return _residual(t, _losses(loss, params, guard, line)(t))


def probed(
    loss: Callable[[dict[str, np.ndarray]], Any],
    params: dict[str, np.ndarray],
    guard: Guard,
    line: Line | None,
    value: float,
    low: float | None,
    name: str,
    plan: Callable[[int], Any] | None = None,
    cache: dict | None = None,
) -> Precision:
    """``judge`` of ``probe``'s noise, from the ``2 * FIRST + 1`` middle points alone where ``CLEAR``
    times their noise would still be float64's; ``value`` and ``low`` the float64 and float32 losses at
    the point, ``plan(n)`` told of each stage's ``n`` evaluations before they are made (a budget's),
    ``cache`` where the line's signs are kept for the run's other probes (``_along``)."""
    t = np.arange(-HALF, HALF + 1, dtype=np.float64)
    middle = np.abs(t) <= FIRST
    evaluate = _losses(loss, params, guard, line, cache)
    values = np.empty(t.size)
    if plan is not None:
        plan(int(middle.sum()))
    values[middle] = evaluate(t[middle])
    noise = _residual(t[middle], values[middle])
    if math.isfinite(noise) and not _above_float64(CLEAR * noise, value, low):
        return dataclasses.replace(judge(noise, value, low, name), evaluations=int(middle.sum()))
    if plan is not None:
        plan(int((~middle).sum()))
    values[~middle] = evaluate(t[~middle])
    return dataclasses.replace(judge(_residual(t, values), value, low, name), evaluations=t.size)


def _residual(t: np.ndarray, values: np.ndarray) -> float:
    """The RMS residual of a cubic fit to ``values`` at ``t`` (centred on the value at ``t = 0``)."""
    if not np.all(np.isfinite(values)):
        return math.nan
    centred = values - values[t.size // 2]
    fit = np.polynomial.polynomial.polyfit(t, centred, 3)
    residual = centred - np.polynomial.polynomial.polyval(t, fit)
    return float(np.sqrt(np.sum(residual**2) / (t.size - 4)))


def _losses(
    loss: Callable[[dict[str, np.ndarray]], Any],
    params: dict[str, np.ndarray],
    guard: Guard,
    line: Line | None,
    cache: dict | None = None,
) -> Callable[[np.ndarray], np.ndarray]:
    """The loss at ``t`` along the probe's line, ``t`` given as one batch per call: on the adapter's
    ``line`` where there is one (``_along``), else each point formed here and handed whole."""
    rng = np.random.default_rng(SEED)
    if line is None:
        return _probe(loss, params, rng, guard)
    return _along(line, params, rng, guard, {} if cache is None else cache)


def _along(
    line: Line, params: dict[str, np.ndarray], rng: Any, guard: Guard, cache: dict
) -> Callable[[np.ndarray], np.ndarray]:
    """The probe's losses on ``line``'s side: the signs drawn as ``_probe`` draws them, handed once; kept
    in ``cache`` (the run's ``Differencing.drawn``) for the next probe of parameters of the same shapes (the
    seed is fixed: the same signs; 124 million int8 signs drawn once a run on GPT-2 small, not once a
    side), read-only."""
    steps = base_steps(params)  # float64, a block at a time: ``params`` may be the point's own
    key = ("probe", tuple((k, np.shape(v)) for k, v in params.items()))
    if key not in cache:
        cache[key] = {k: _signs(rng, np.shape(v)) for k, v in params.items()}
        for v in cache[key].values():
            v.flags.writeable = False
    signs = cache[key]
    scale = {k: np.float64(steps[k] * PROBE_STEP) for k, v in params.items() if np.size(v)}
    walker = Walker(line, params, guard=guard, progress=None, expected=2 * HALF + 1)

    def evaluate(t: np.ndarray) -> np.ndarray:
        return walker.batch(
            t.shape,
            lambda pos: "probe",
            lambda _: signs,
            lambda pos: {k: float(t[pos[0]] * s) for k, s in scale.items()},
        )

    return evaluate


def _signs(rng: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``(rng.integers(0, 2, size=shape) * 2 - 1).astype(np.int8)`` (``_probe``'s draw: int64), drawn
    ``DRAW`` entries at a time into the int8 array: the generator's stream does not depend on how the
    draw is cut, so these are the same numbers, without an int64 array of the tensor's size (8 bytes an
    entry, fresh memory: 2 s for GPT-2 small's token embedding here)."""
    out = np.empty(shape, np.int8)
    flat = out.reshape(-1)
    for start in range(0, flat.size, DRAW):
        part = rng.integers(0, 2, size=min(DRAW, flat.size - start))
        np.multiply(part, 2, out=part)
        np.subtract(part, 1, out=part)
        flat[start : start + part.size] = part
    return out


def _probe(
    loss: Callable[[dict[str, np.ndarray]], Any], params: dict, rng: Any, guard: Guard
) -> Callable[[np.ndarray], np.ndarray]:
    """The probe's losses, each point formed here and handed whole."""
    base = {k: np.array(v, dtype=np.float64) for k, v in params.items()}
    steps = base_steps(base)
    line = {k: (rng.integers(0, 2, size=v.shape) * 2 - 1) * steps[k] * PROBE_STEP for k, v in base.items()}
    evaluator = Evaluator(loss, base, guard=guard, progress=None, expected=2 * HALF + 1)

    def restore() -> None:
        for k, v in base.items():
            np.copyto(evaluator.work[k], v)

    def evaluate(t: np.ndarray) -> np.ndarray:
        def perturb(pos: tuple[int, ...]) -> Callable[[], None]:
            for k, v in base.items():
                np.add(v, t[pos[0]] * line[k], out=evaluator.work[k])
            return restore

        return evaluator.batch(t.shape, perturb)

    return evaluate


def _above_float64(noise: float, value: float, low: float | None) -> bool:
    """Whether ``noise`` is above a float64 loss's: over ``FLOAT32_NOISE`` of the gap to the float32 loss
    ``low`` (0 when not known) and over ``FLOAT64_NOISE_ULPS`` unit roundoffs of |loss| (float32's noise,
    or a loss that bends on the probe's scale: ``judge`` tells which)."""
    gap = abs(low - value) if low is not None else 0.0
    return bool(noise > FLOAT32_NOISE * gap and noise > FLOAT64_NOISE_ULPS * EPS64 * abs(value))


def judge(noise: float, value: float, low: float | None, name: str) -> Precision:
    """Whether ``noise`` is float32's: against the float32 loss ``low`` when known, else against |loss|."""
    gap = abs(low - value) if low is not None else 0.0
    float32 = _above_float64(noise, value, low)
    if float32 and low is not None and noise > ROUNDING_CEILING * max(gap, 2.0**-24 * abs(value)):
        return Precision(noise, False, _curved(noise, gap, name))
    if not float32:
        return Precision(noise, False, "")
    ulps = noise / (2.0**-24 * abs(value)) if value else math.inf
    text = (
        f"`{name}`'s float64 loss computes in float32 somewhere: its noise under perturbations of "
        f"{PROBE_STEP:.1e} of each tensor's RMS is {noise:.2e} ({ulps:.2g} float32 unit roundoffs of "
        "|loss|, float32's size, not float64's): it is differenced and compared with that noise as its "
        'rounding (a float32 cast in a float64 run, e.g. a softmax or a norm upcast "to float32")'
    )
    return Precision(noise, True, text)


def _curved(noise: float, gap: float, name: str) -> str:
    """What a residual far above any rounding says: the loss bends on the probe's scale."""
    return (
        f"`{name}`'s float64 loss is not smooth on the noise probe's scale: the residual of a cubic along "
        f"{PROBE_STEP:.1e} of each tensor's RMS is {noise:.2e}, {noise / gap:.2g} times its float32 loss's "
        "difference from it, far more than rounding (a steep feature, e.g. a LayerNorm of a zero vector): "
        "it is differenced as a float64 loss, and what does not converge is said unjudgeable"
    )
