"""The stack's gradient judge (``StackGradJudge``): the engine's ``Judge`` of the gradient, run in
phases, each handing its result to the next as a record, never as an attribute a later phase reads:

- prepare (``passes``): the point's float64 passes, once (``Passes``), and whether the oracle's
  outputs mode fits this machine's memory (``size.fits_outputs``: decided where the run's memory was
  estimated, before any backend allocates);
- the reference (``reference``): the oracle at every entry (by the weights' differences or the layers'
  outputs'), or screened, or another backend; handed to every candidate's comparison in the engine's
  ``Reference`` (its ``data``: ``Referenced``);
- compare, each candidate: the passes at its device's arithmetic and, where its activations show its
  own ReLU pattern within rounding, held at it (``pattern``: a ``View``); then every entry (``full``),
  or a screen and its spot check (``screen``, ``spot``); a failure on its own pattern named where its
  gradient took another piece than its activations (``pieces``);
- locate, with ``explain`` (``locate``): its forward pass layer by layer, and a mismatch classified by
  controlled re-runs;
- say (``verdict``): what a passing candidate's arithmetic hides, and what a screen did not judge entry
  by entry (the report's ``oracle`` section, which the PASSED line quotes), handed on by ``extras``.

Every backend call goes through the engine's guarded ``call``; the numerics are ``model``'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from crosscheck._compare.device import arithmetic, scale
from crosscheck._compare.record import Comparison
from crosscheck._report.report import Verdict
from crosscheck._types import Loaded
from crosscheck._workloads.protocol import Call, Options, Outcome, Point, Reference
from crosscheck._workloads.stack import size
from crosscheck._workloads.stack.explain import SECTION
from crosscheck._workloads.stack.judge import locate, pieces
from crosscheck._workloads.stack.judge import pattern as _patterned
from crosscheck._workloads.stack.judge import reference as _reference
from crosscheck._workloads.stack.judge import screen as _screen
from crosscheck._workloads.stack.judge import spot as _spot
from crosscheck._workloads.stack.judge import verdict as _verdict
from crosscheck._workloads.stack.judge.answers import declared_dtype, gradient
from crosscheck._workloads.stack.judge.full import compare_full
from crosscheck._workloads.stack.judge.passes import Passes
from crosscheck._workloads.stack.judge.reference import Referenced


class StackGradJudge:
    """The stack's gradient at one point (``weights`` ``(L, d, d)``, ``x`` ``(N, d)``)."""

    signature = "grad(weights, x)"

    def __init__(self, point: Point, options: Options) -> None:
        self.point, self.options = point, options
        self.dtype = point.dtype
        self.notes: dict[str, dict[str, Any]] = {}
        #: What the prepare phase made: the point's float64 passes, and the memos every candidate shares.
        self.passes = Passes.of(point.params["weights"], point.inputs["x"])
        #: Whether the oracle's outputs mode fits this machine's memory, for "auto" (``reference.mode``).
        layers, dim = self.passes.weights.shape[:2]
        self.fits = size.fits_outputs(layers, len(self.passes.x), dim, point.dtype)
        #: What the say phase said of each candidate, for the report (``extras``).
        self.verdicts: dict[str, Verdict] = {}
        #: The oracle's mode, once it answered (None: another backend is the reference).
        self.mode: str | None = None
        #: Each screened candidate's entries judged one by one, of its total (``verdict.screened``).
        self.screened: dict[str, tuple[int, int]] = {}

    def evaluate(self, backend: Loaded, call: Call) -> Outcome:
        return gradient(backend, call, self.dtype, self.passes.weights, self.passes.x)

    def reference(self, backend: Loaded, call: Call) -> Outcome:
        out = _reference.reference(self.passes, self.options, self.dtype, backend, call, fits=self.fits)
        if out.ok:
            self.mode = out.value.notes.get("mode")
        return out

    def compare(
        self, backend: Loaded, value: dict[str, np.ndarray], name: str, reference: Reference, call: Call
    ) -> list[Comparison]:
        referenced: Referenced = reference.data
        candidate = value["weights"]
        dtype, _ = declared_dtype(backend, self.dtype)
        device = arithmetic(backend, call)
        passes = referenced.passes.scaled(scale(device, dtype))
        view = _patterned.conditioned(passes, referenced.screening, backend, dtype, call)
        comparison = self._compared(view, backend, candidate, name, reference, dtype, call)
        if view.held and view.screening is None and referenced.answer is not None:
            answered = (reference.name, referenced.answer)
            comparison = pieces.named(
                comparison, view.passes, passes, self.options, candidate, answered, dtype
            )
        comparison = _patterned.noted(comparison, view, referenced.screening)
        said = _verdict.said(comparison, dtype, device, view.passes, referenced.answer)
        if said is not None:
            self.verdicts[name] = said
        if view.screening is not None:
            self.screened[name] = (comparison.judged, comparison.total)
        return [comparison]

    def extras(self, reference: Reference | None) -> dict[str, Any]:
        extras: dict[str, Any] = {"quantity": "grad", "verdicts": dict(self.verdicts)}
        if self.mode is not None:
            directions = self.options.oracle.directions
            extras["oracle"] = _verdict.oracle_section(self.mode, self.screened, directions)
        return {**extras, **({"sections": (SECTION,)} if self.options.explain else {})}

    def _compared(
        self,
        view: _patterned.View,
        backend: Loaded,
        candidate: np.ndarray,
        name: str,
        reference: Reference,
        dtype: str,
        call: Call,
    ) -> Comparison:
        """The compare phase on ``view`` (the screen and its spot check, or every entry), then, with
        ``explain``, the locate phase."""
        passes, options = view.passes, self.options
        if view.screening is not None:
            found = _screen.compare_screened(
                passes, options, view.screening, candidate, name, reference, dtype, call
            )
            comparison = _spot.spot_checked(
                passes, options, view.screening, found, candidate, reference, dtype, call
            )
        else:
            answer = reference.data.answer
            comparison = compare_full(passes, options, candidate, name, reference.name, answer, dtype)
        if not options.explain:
            return comparison
        comparison = locate.localized(passes, backend, comparison, dtype, call)
        if comparison.status != "mismatch" or view.screening is not None:
            return comparison
        oracle = reference.data.backend
        nudged = locate.nudged(self.point, oracle, call, StackGradJudge, mode=reference.data.mode)
        return locate.classified(
            passes, options, backend, comparison, candidate, reference, call, dtype=self.dtype, nudged=nudged
        )
