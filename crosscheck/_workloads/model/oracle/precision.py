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
#: The probe's loss evaluations (counted toward the oracle's budget).
PROBE_EVALUATIONS = 2 * HALF + 1
#: Spacing of the probe's points, as a fraction of each tensor's RMS.
PROBE_STEP = 2.0**-20
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

    def to_dict(self) -> dict[str, Any]:
        return {"noise": self.noise, "float32": self.float32, "text": self.text}


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
    rng = np.random.default_rng(SEED)
    if line is not None:
        values = _along(line, params, rng, t, guard)
    else:
        values = _probe(loss, params, rng, t, guard)
    if not np.all(np.isfinite(values)):
        return math.nan
    centred = values - values[HALF]
    fit = np.polynomial.polynomial.polyfit(t, centred, 3)
    residual = centred - np.polynomial.polynomial.polyval(t, fit)
    return float(np.sqrt(np.sum(residual**2) / (t.size - 4)))


def _along(line: Line, params: dict[str, np.ndarray], rng: Any, t: np.ndarray, guard: Guard) -> np.ndarray:
    """The probe's losses on ``line``'s side: the signs drawn as ``_probe`` draws them, handed once."""
    steps = base_steps({k: np.asarray(v, np.float64) for k, v in params.items()})
    signs = {k: _signs(rng, np.shape(v)) for k, v in params.items()}
    scale = {k: np.float64(steps[k] * PROBE_STEP) for k, v in params.items() if np.size(v)}
    walker = Walker(line, params, guard=guard, progress=None, expected=2 * HALF + 1)
    return walker.batch(
        t.shape,
        lambda pos: "probe",
        lambda _: signs,
        lambda pos: {k: float(t[pos[0]] * s) for k, s in scale.items()},
    )


def _signs(rng: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``(rng.integers(0, 2, size=shape) * 2 - 1).astype(np.int8)`` (``_probe``'s draw: int64), made in the
    draw's own array (no two more int64 temporaries of the tensor's size: 8 bytes an entry each)."""
    signs = rng.integers(0, 2, size=shape)
    np.multiply(signs, 2, out=signs)
    np.subtract(signs, 1, out=signs)
    return signs.astype(np.int8)


def _probe(loss: Callable[[dict[str, np.ndarray]], Any], params: dict, rng: Any, t: np.ndarray, guard: Guard):
    """The probe's losses, each point formed here and handed whole."""
    base = {k: np.array(v, dtype=np.float64) for k, v in params.items()}
    steps = base_steps(base)
    line = {k: (rng.integers(0, 2, size=v.shape) * 2 - 1) * steps[k] * PROBE_STEP for k, v in base.items()}
    evaluator = Evaluator(loss, base, guard=guard, progress=None, expected=2 * HALF + 1)

    def restore() -> None:
        for k, v in base.items():
            np.copyto(evaluator.work[k], v)

    def perturb(pos: tuple[int, ...]) -> Callable[[], None]:
        for k, v in base.items():
            np.add(v, t[pos[0]] * line[k], out=evaluator.work[k])
        return restore

    return evaluator.batch(t.shape, perturb)


def judge(noise: float, value: float, low: float | None, name: str) -> Precision:
    """Whether ``noise`` is float32's: against the float32 loss ``low`` when known, else against |loss|."""
    gap = abs(low - value) if low is not None else 0.0
    float32 = bool(noise > FLOAT32_NOISE * gap and noise > FLOAT64_NOISE_ULPS * EPS64 * abs(value))
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
