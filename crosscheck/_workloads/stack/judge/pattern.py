"""Judging a float32 candidate on its own ReLU pattern (see ``stack.pattern``).

A candidate that reports its activations (``activations(weights, x)``) shows the pattern its forward
pass took. When every unit where that pattern differs from the sign of its float64 pre-activation is
within rounding of zero, the candidate is judged on the passes held at that pattern (``Passes.held``):
the float64 passes, the rounding model and the underflow bounds are the pattern's, the oracle's answer is
moved by the exact change of the gradient from float64's piece to the candidate's, and no kink is
ambiguous for the candidate any more (its signs are known); only the reference's own rounding (float64)
can still leave a kink. A pattern that differs beyond rounding is a bug, judged as before, on float64's
pattern, with the kink judgement that explains it.

``conditioned`` hands the comparison a ``View`` (the passes and the screen the candidate is judged on,
and what its coverage says of them); ``noted`` says it in the comparison.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from crosscheck._compare.record import Comparison
from crosscheck._types import Loaded
from crosscheck._workloads.protocol import Call
from crosscheck._workloads.stack import pattern as _pattern
from crosscheck._workloads.stack.judge.directions import project
from crosscheck._workloads.stack.judge.passes import Passes
from crosscheck._workloads.stack.judge.screening import Screening

#: The dtypes judged on their own pattern: float32's flips are what leaves entries unjudgeable at width.
HELD_DTYPES = ("float32",)
#: How many of the units that differ a note names.
NAMED = 5


@dataclasses.dataclass(frozen=True, eq=False)
class View:
    """What a candidate is judged on: the passes (float64's, or held at its own pattern), the screen
    (the reference's, or moved to that pattern; None: the reference answered every entry) and what
    its coverage says of them (``note``: "" when nothing)."""

    passes: Passes
    screening: Screening | None
    note: str = ""

    @property
    def held(self) -> bool:
        """Whether the candidate is judged on its own pattern (then the screen is its own copy)."""
        return self.passes.pattern is not None


def conditioned(passes: Passes, screening: Screening | None, backend: Loaded, dtype: str, call: Call) -> View:
    """The view a candidate is judged on: ``passes`` held at ``backend``'s own pattern where it shows one
    within rounding, and a note saying so; or ``passes`` as they are, and why not ("" when the candidate
    is not judged so: not float32, or no activations to show its pattern)."""
    activations = getattr(backend, "activations", None)
    if dtype not in HELD_DTYPES or passes.weights.dtype != np.float32 or not callable(activations):
        return View(passes, screening)
    out = call(activations, passes.weights, passes.x)
    masks = out.error or _pattern.masks_of(out.value, passes.fwd)
    if isinstance(masks, str):
        return View(passes, screening, f"; judged on float64's ReLU pattern ({masks})")
    pattern = _pattern.held(passes.fwd, passes.deltas, masks)
    shifted = _shifted(screening, pattern)
    held = passes.held(pattern)
    model, reference, flow = held.model(dtype), passes.model("float64"), held.underflow(dtype).z
    bounds = [model.z_bound(m) + reference.z_bound(m) + flow[m] for m in range(len(flow))]
    unexplained = _pattern.beyond(pattern, bounds)
    if len(unexplained):
        units = _named(unexplained)
        return View(
            passes,
            screening,
            f"; its ReLU pattern differs from float64's beyond {dtype} rounding at {len(unexplained)} "
            f"units {units}: judged on float64's pattern",
        )
    return View(held, shifted, _note(pattern, dtype))


def noted(comparison: Comparison, view: View, screening: Screening | None) -> Comparison:
    """``comparison``, made on ``view``, as the report has it: the oracle's screens made for a held view
    counted in the reference's ``screening`` (once), and its coverage and message saying which pattern
    the candidate was judged on, and why."""
    if view.held and screening is not None and view.screening is not None:
        screening.more_evaluations = view.screening.more_evaluations
    if not view.note:
        return comparison
    note = view.note
    message = f"{comparison.message}\n{note[2:]}" if comparison.message else note[2:]
    return dataclasses.replace(comparison, coverage=comparison.coverage + note, message=message)


def _shifted(screening: Screening | None, pattern: _pattern.Pattern) -> Screening | None:
    """A screening whose directional derivatives are moved to the candidate's pattern: each moves by
    the change's sum along its direction, and its error bar by the change's bound summed over the
    layer (every entry of a direction is -1, 0 or +1). The full checks by layer are shared (stored on
    float64's pattern, moved when used: ``Passes.answer``); what each dtype is screened along is not."""
    if screening is None:
        return None
    if not len(pattern.flipped):  # float64's pattern: the oracle's derivatives as they are
        return dataclasses.replace(screening, along={})
    sc = screening.estimate
    value, error = np.array(sc.value, np.float64), np.array(sc.error, np.float64)
    for k in range(len(value)):
        change, bound = pattern.change(k)
        value[k] += project(change[None], sc.directions[k : k + 1])[0]
        error[k] += float(bound.sum())
    estimate = dataclasses.replace(sc, value=value, error=error)
    return dataclasses.replace(screening, estimate=estimate, along={})


def _named(units: np.ndarray) -> str:
    """The first ``NAMED`` units ``(layer, row, unit)``, and how many more."""
    shown = ", ".join(str(tuple(int(i) for i in unit)) for unit in units[:NAMED])
    return shown + (f" and {len(units) - NAMED} more" if len(units) > NAMED else "")


def _note(pattern: _pattern.Pattern, dtype: str) -> str:
    """What the coverage says of a candidate judged on its own pattern."""
    flipped = len(pattern.flipped)
    if not flipped:  # judged as float64's pattern always was, less the kinks its signs settle
        return ""
    return (
        f"; judged on its own ReLU pattern: {flipped} units differ from float64's, each within {dtype} "
        f"rounding of zero: {_named(pattern.flipped)}"
    )
