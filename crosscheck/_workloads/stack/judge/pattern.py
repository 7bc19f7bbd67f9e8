"""Judging a float32 candidate on its own ReLU pattern (see ``stack.pattern``).

A candidate that reports its activations (``activations(weights, x)``) shows the pattern its forward
pass took. When every unit where that pattern differs from the sign of its float64 pre-activation is
within rounding of zero, the candidate is judged as a view of the judge held at that pattern: the
float64 passes, the rounding model and the underflow bounds are the pattern's, the oracle's answer is
moved by the exact change of the gradient from float64's piece to the candidate's, and no kink is
ambiguous for the candidate any more (its signs are known); only the reference's own rounding (float64)
can still leave a kink. A pattern that differs beyond rounding is a bug, judged as before, on float64's
pattern, with the kink judgement that explains it.

This module uses the judge's public surface only (``PatternJudge``) and imports neither the judge nor
its module.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Protocol

import numpy as np

from crosscheck._compare.record import Comparison
from crosscheck._workloads.protocol import Call
from crosscheck._workloads.stack import pattern as _pattern
from crosscheck._workloads.stack import rounding
from crosscheck._workloads.stack import underflow as _underflow
from crosscheck._workloads.stack.forward import Forward
from crosscheck._workloads.stack.judge import screen as _screen
from crosscheck._workloads.stack.judge.answers import GradAnswer
from crosscheck._workloads.stack.judge.directions import project

#: The dtypes judged on their own pattern: float32's flips are what leaves entries unjudgeable at width.
HELD_DTYPES = ("float32",)
#: How many of the units that differ a note names.
NAMED = 5


class PatternJudge(Protocol):
    """What this module uses of the gradient judge (``grad.StackGradJudge``)."""

    weights: np.ndarray
    x: np.ndarray
    fwd: Forward
    deltas: list[np.ndarray]
    pattern: _pattern.Pattern | None
    screening: _screen.Screening | None

    def model(self, dtype: str) -> rounding.RoundingModel: ...
    def underflow(self, dtype: str) -> _underflow.Underflow: ...


def compared(judge: PatternJudge, backend: Any, dtype: str, call: Call, compare: Any) -> Comparison:
    """``compare(judge)``, or ``compare`` of the judge held at the candidate's own pattern where it
    shows one within rounding (``conditioned``); the coverage and the message say which, and why."""
    held, note = conditioned(judge, backend, dtype, call)
    comparison = compare(judge if held is None else held)
    if held is not None and judge.screening is not None:  # the oracle's screens, counted once
        judge.screening.more_evaluations = held.screening.more_evaluations
    if not note:
        return comparison
    message = f"{comparison.message}\n{note[2:]}" if comparison.message else note[2:]
    return dataclasses.replace(comparison, coverage=comparison.coverage + note, message=message)


def kink_bounds(judge: PatternJudge, dtype: str) -> list[np.ndarray]:
    """What may flip each pre-activation's ReLU: the candidate's modelled rounding (scaled to its
    device), the reference's and the underflow bound; held at the candidate's own pattern, the
    reference's alone (the candidate's signs are known)."""
    reference = judge.model("float64")
    if judge.pattern is not None:
        return [reference.z_bound(m) for m in range(len(judge.fwd.zs))]
    model, flow = judge.model(dtype), judge.underflow(dtype).z
    return [model.z_bound(m) + reference.z_bound(m) + flow[m] for m in range(len(judge.fwd.zs))]


def conditioned(judge: PatternJudge, backend: Any, dtype: str, call: Call) -> tuple[Any, str]:
    """The judge held at ``backend``'s own pattern, and a note saying so; or ``None`` and why not
    ("" when the candidate is not judged so: not float32, or no activations to show its pattern)."""
    activations = getattr(backend, "activations", None)
    if dtype not in HELD_DTYPES or judge.weights.dtype != np.float32 or not callable(activations):
        return None, ""
    out = call(activations, judge.weights, judge.x)
    masks = out.error or _pattern.masks_of(out.value, judge.fwd)
    if isinstance(masks, str):
        return None, f"; judged on float64's ReLU pattern ({masks})"
    pattern = _pattern.held(judge.fwd, judge.deltas, masks)
    held = view(judge, pattern, _shifted(judge.screening, pattern))
    model, reference, flow = held.model(dtype), judge.model("float64"), held.underflow(dtype).z
    bounds = [model.z_bound(m) + reference.z_bound(m) + flow[m] for m in range(len(flow))]
    unexplained = _pattern.beyond(pattern, bounds)
    if len(unexplained):
        units = _named(unexplained)
        return None, (
            f"; its ReLU pattern differs from float64's beyond {dtype} rounding at {len(unexplained)} "
            f"units {units}: judged on float64's pattern"
        )
    return held, _note(pattern, dtype)


def answer(oracle: GradAnswer, pattern: _pattern.Pattern | None) -> GradAnswer:
    """The oracle's every-entry answer moved to the candidate's pattern, on the layers it answers
    (the others stay NaN), with the change's rounding bound added to its error bar (unchanged without
    a pattern, or on float64's)."""
    if pattern is None or not len(pattern.flipped):
        return oracle
    value, error = oracle.value.copy(), oracle.error.copy()
    for k in range(len(value)):
        if np.isnan(value[k]).all():
            continue
        change, bound = pattern.change(k)
        value[k] += change
        error[k] += bound
    return dataclasses.replace(oracle, value=value, error=error)


def _shifted(screening: _screen.Screening | None, pattern: _pattern.Pattern) -> _screen.Screening | None:
    """A screening whose directional derivatives are moved to the candidate's pattern: each moves by
    the change's sum along its direction, and its error bar by the change's bound summed over the
    layer (every entry of a direction is -1, 0 or +1). The full checks by layer are shared (stored on
    float64's pattern, moved when used: ``answer``); what each dtype is screened along is not."""
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


def view(judge: PatternJudge, pattern: _pattern.Pattern, screening: _screen.Screening | None) -> Any:
    """A shallow copy of ``judge`` held at ``pattern``: its passes, models, underflow bounds and kink
    judgements are the pattern's (the float64 model, the reference's, is kept). A pattern that is
    float64's has float64's passes bit for bit: its models and bounds are the judge's own, shared (made
    once for every candidate that took it)."""
    held: Any = copy.copy(judge)
    held.fwd, held.deltas, held.pattern, held.screening = pattern.fwd, pattern.deltas, pattern, screening
    if len(pattern.flipped):
        held._models, held._underflows = {"float64": judge.model("float64")}, {}
    held._kinks_memo = {}
    return held


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
