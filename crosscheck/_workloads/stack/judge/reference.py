"""The gradient judge's reference phase: the reference's answer, and what it hands to every candidate's
comparison (``Referenced``, the judge's ``data`` in the engine's ``Reference``).

The oracle answers at every entry, from differences in the weights (its ``estimate``: ``full``) or in
each layer's outputs (its ``estimate_outputs``: ``outputs``, far cheaper at width), or along random +-1
directions per layer (its ``screen``: a ``Screening`` every candidate shares); ``mode`` says which, as
asked or as "auto" takes it by cost and memory (``cost.gradient_mode``). Another backend as the
reference answers with its gradient, judged by its own modelled rounding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from crosscheck._compare.constants import ALL_DTYPES
from crosscheck._types import Loaded
from crosscheck._workloads.protocol import Call, Options, Outcome, Reference
from crosscheck._workloads.stack.judge import cost
from crosscheck._workloads.stack.judge.answers import GradAnswer, gradient
from crosscheck._workloads.stack.judge.directions import DIRECTIONS_GENERATOR, SIGNS, sign_directions
from crosscheck._workloads.stack.judge.passes import Passes
from crosscheck._workloads.stack.judge.screening import Screening


@dataclasses.dataclass(frozen=True, eq=False)
class Referenced:
    """What the reference phase hands to each candidate's comparison (``Reference.data``).

    Attributes:
        backend: the reference backend (a nudged re-check of a mismatch asks it again).
        passes: the passes the candidates are judged on: made along the screen's directions where the
            reference screened, with the oracle's float64 rounding model where it made one.
        answer: the reference's answer at every entry (the oracle's, or another backend's).
        screening: the oracle's screen, where it screened (then ``answer`` is None).
        mode: how the oracle answered: ``full``, ``outputs`` or ``screen`` (``full`` for another
            backend); a nudged re-check of a mismatch asks it the same way.
    """

    backend: Loaded
    passes: Passes
    answer: GradAnswer | None = None
    screening: Screening | None = None
    mode: str = "full"


#: The oracle's method answering every entry in each mode, and its stage as the progress bar names it.
ANSWERS = {"full": ("estimate", "oracle"), "outputs": ("estimate_outputs", "oracle (layers' outputs)")}


def progress(options: Options, description: str) -> Callable[[int, int], None] | None:
    """The run's progress callback for one stage of the oracle, or None."""
    told = options.progress
    if told is None:
        return None
    return lambda done, total: told(description, done, total)


def mode(options: Options, passes: Passes, backend: Loaded, *, fits: bool = True) -> str:
    """``full``, ``outputs`` or ``screen``: what ``oracle_mode`` asks for, given what the reference
    can do; "auto" as ``cost.gradient_mode`` takes it (``fits``: whether the outputs mode's memory
    estimate fits this machine, ``size.fits_outputs``)."""
    can_screen = callable(getattr(backend, "screen", None))
    can_outputs = callable(getattr(backend, "estimate_outputs", None))
    asked = options.oracle.mode
    if asked == "screen" and not can_screen:
        raise ValueError("`oracle_mode` 'screen' needs a reference that can screen (the numpy-fd oracle).")
    if asked == "outputs" and not can_outputs:
        raise ValueError(
            "`oracle_mode` 'outputs' needs a reference that differences the layers' outputs (the "
            "numpy-fd oracle)."
        )
    if asked == "auto":
        layers, dim = passes.weights.shape[:2]
        batch = passes.x.shape[0]
        return cost.gradient_mode(layers, batch, dim, screens=can_screen, outputs=can_outputs, fits=fits)
    return asked


def reference(
    passes: Passes, options: Options, dtype: str, backend: Loaded, call: Call, *, fits: bool = True
) -> Outcome:
    """The reference's outcome at the point of ``passes`` (a ``dtype`` case): its ``Reference``, whose
    ``data`` is what every candidate is judged against (``Referenced``); ``fits`` as ``mode`` takes it."""
    chosen = mode(options, passes, backend, fits=fits)
    if chosen == "screen":
        return _screened(passes, options, backend, call)
    method, stage = ANSWERS[chosen]
    if not callable(getattr(backend, method, None)):  # another backend: its gradient
        return _backend_reference(passes, dtype, backend, call)
    told = progress(options, stage)
    out = call(getattr(backend, method), passes.weights, passes.x, progress=told)
    return _every_entry(passes, backend, chosen, out)


def _every_entry(passes: Passes, backend: Loaded, chosen: str, out: Outcome) -> Outcome:
    """The oracle's answer at every entry (``out``: its ``estimate`` or ``estimate_outputs``, in the
    ``chosen`` mode) as the reference's outcome."""
    if out.error:
        return out
    est = out.value
    passes.reuse(getattr(est, "rounding", None))
    notes = {"mode": chosen, "evaluations": est.evaluations, "kink_entries": int(est.kink.sum())}
    answer = GradAnswer(est.value, est.error, est.kink, est.kink_at)
    data = Referenced(backend, passes, answer, mode=chosen)
    return dataclasses.replace(out, value=Reference({"weights": est.value}, "float64", notes, data))


def _screened(passes: Passes, options: Options, backend: Loaded, call: Call) -> Outcome:
    """The oracle's directional derivatives along ``directions`` random +-1 directions per layer: the
    reference's outcome, its ``data`` the screen every candidate shares."""
    shape = passes.weights.shape
    directions = sign_directions(shape[0], options.oracle.directions, shape[1], SIGNS)
    told = progress(options, "oracle (screening)")
    out = call(backend.screen, passes.weights, passes.x, directions, progress=told)
    if out.error:
        return out
    screening = Screening(out.value, backend)
    along = passes.along(screening.directions)
    along.reuse(getattr(screening.estimate, "rounding", None))
    notes = {
        "mode": "screen",
        "directions": options.oracle.directions,
        "directions_generator": DIRECTIONS_GENERATOR,
        "evaluations": out.value.evaluations,
    }
    data = Referenced(backend, along, screening=screening, mode="screen")
    return dataclasses.replace(out, value=Reference(None, "float64", notes, data))


def _backend_reference(passes: Passes, dtype: str, backend: Loaded, call: Call) -> Outcome:
    """Another backend as the reference: its gradient, judged by its own modelled rounding."""
    out = gradient(backend, call, dtype, passes.weights, passes.x)
    if out.error:
        return out
    value = out.value["weights"]
    if value.shape != passes.weights.shape or not np.all(np.isfinite(value)):
        error = (
            f"reference gradient must be finite with shape {passes.weights.shape}; found shape {value.shape}"
        )
        return dataclasses.replace(out, value=None, error=error)
    computed = value.dtype.name if value.dtype.name in ALL_DTYPES else "float64"
    data = Referenced(
        backend, passes, GradAnswer(value.astype(np.float64), passes.model(computed).grad_bound)
    )
    return dataclasses.replace(
        out, value=Reference({"weights": value}, value.dtype.name, notes={}, data=data)
    )
