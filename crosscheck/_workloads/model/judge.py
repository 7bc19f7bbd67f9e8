"""The gradient judge of a user's ``Workload``: two questions, kept apart.

- *Is each implementation's derivative right?* Its gradient against finite differences of its own
  float64 loss (``question="derivative"``).
- *Do the implementations compute the same function?* Each gradient against the differences of the
  workload's NumPy reference when it has one, else of the first implementation's own loss without
  float32 steps (``prepare``, before the first comparison; else the first that can be differenced);
  and the float64 losses at the point against each other (``question="same function"``).

The judge runs in the engine's phases, each in its own module: the reference (``reference``: the oracle,
or a backend whose answer is handed on as the ``Reference``'s data), the anchor chosen before the first
comparison (``own_losses``: each candidate's own float64 loss, made once), each candidate's rounding
(``rerun.rounding``) and its comparisons (here, with ``summary.against_oracle``), then what the report
says (``extras``). The oracle (``fd``) differences entry by entry or along random directions
(``Differencing``); the judge fills its ``Findings`` as it compares, and the report's ``oracle`` section
(``summary``) says from them which question failed, what was covered how, and names the empty check and
the parameters whose gradient is zero everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from crosscheck._compare import low
from crosscheck._compare.dtypes import is_low
from crosscheck._compare.record import Comparison
from crosscheck._report.report import Verdict
from crosscheck._types import Loaded
from crosscheck._workloads.model import rerun
from crosscheck._workloads.model.compare import Context, entries
from crosscheck._workloads.model.declare import Workload
from crosscheck._workloads.model.findings import Findings, Record
from crosscheck._workloads.model.oracle.estimate import Cost, estimate, seconds_per_evaluation
from crosscheck._workloads.model.oracle.function import Differences, Function, Losses, Skip, differencing
from crosscheck._workloads.model.oracle.sources import numpy_function
from crosscheck._workloads.model.own_losses import OwnLosses
from crosscheck._workloads.model.reference import BackendAnswer, WorkloadOracle, by_backend, by_oracle
from crosscheck._workloads.model.rounding import Rounding
from crosscheck._workloads.model.summary import against_oracle, summarize
from crosscheck._workloads.model.zeros import Side, confirm, zero_tensors
from crosscheck._workloads.protocol import Call, Options, Outcome, Point, Reference

#: Which candidate anchors "same function" instead of the model judge's choice, given each candidate's
#: own float64 loss (``OwnLosses.functions``); None: none does.
Prefer = Callable[[dict[str, Function | Skip]], tuple[str, Any] | None]

#: The case's ``oracle_differentiates`` when no oracle ran: a backend is the reference, or the
#: reference failed. The table's title says so instead of what an oracle would have differenced.
NO_ORACLE = {
    True: "nothing: no oracle ran (the reference is a backend)",
    False: "nothing: the reference failed or did not run",
}


class GenericJudge:
    """Each parameter's gradient of a ``Workload`` at one point."""

    signature = "grad(params, inputs)"
    #: It keeps to ``Options.budget`` (``oracle.budget``).
    budgeted = True

    def __init__(self, workload: Workload, point: Point, options: Options) -> None:
        self.workload, self.point, self.options = workload, point, options
        self.dtype = point.dtype
        self.numpy = numpy_function(Losses(workload.name, workload.reference, workload.surrogate), point)
        #: Seconds of one evaluation of the NumPy reference (None: there is none), for ``cost``.
        self.per_evaluation = seconds_per_evaluation(self.numpy, point.params) if self.numpy else None
        oracle = options.oracle
        self.differencing = differencing(
            oracle.mode, point.params, oracle.directions, oracle.budget, started=options.started
        )
        point.case["oracle_differentiates"] = _differentiates(workload, self.numpy)
        self.shapes = {k: v.shape for k, v in point.params.items()}
        self.notes: dict[str, dict[str, Any]] = {}
        #: What the run found, for the report's ``oracle`` section (``summary.summarize``).
        self.findings = Findings(self.differencing, point.case["oracle_differentiates"], self.shapes)
        #: Each candidate's own float64 loss, its differences and its noise probe, each made once.
        surrogate = workload.surrogate is not None
        self.own = OwnLosses(point, self.differencing, self.progress, surrogate=surrogate)
        #: The candidate whose own loss is the anchor of "same function" (``prepare``), and its backend.
        self.anchor_candidate: tuple[str, Any] | None = None
        #: A 16-bit or float32 case: the verdict on each candidate that agrees ("check in float32 too",
        #: "check in float64 too").
        self.verdicts: dict[str, Verdict] = {}
        #: A 16-bit case: per side measured, whether it computed in float32 (``sixteen.unrounded``).
        self.wide_only: dict[str, bool] = {}
        #: A float64 check of a workload that computes a part in float32 by design (a port's original,
        #: ``port.judge.by_design``): every side's rounding, and the float64 losses, judged at float32's.
        self.float32_by_design = False

    def evaluate(self, backend: Loaded, call: Call) -> Outcome:
        return self._grad(backend, call, self.point.params, self.point.inputs)

    def cost(self, candidates: int) -> Cost:
        """The oracle's cost, estimated before it runs: the NumPy reference's differences (when there is
        one) and each candidate's own loss's."""
        functions = candidates + (self.numpy is not None)
        return estimate(self.differencing, self.point.params, functions, self.per_evaluation)

    def _grad(self, backend: Loaded, call: Call, params: dict, inputs: dict) -> Outcome:
        # Fresh dicts: a backend that adds or drops keys changes nothing the next one sees.
        return call(backend.grad, dict(params), dict(inputs), convert="arrays")

    def progress(self, description: str, done: int, total: int) -> None:
        if self.options.progress is not None:
            self.options.progress(description, done, total)

    # -- the reference, then the anchor ----------------------------------------------------------------

    def reference(self, backend: Loaded, call: Call) -> Outcome:
        if isinstance(backend, WorkloadOracle):
            self.findings.oracle = True
            return by_oracle(self, self.numpy, call)
        out = by_backend(self, backend, self.evaluate(backend, call), call)
        answered = getattr(out.value, "data", None)
        if isinstance(answered, BackendAnswer):
            self._wide_only(getattr(backend, "name", "the reference"), answered.rounding)
        return out

    def prepare(self, candidates: list[tuple[str, Any]], call: Call, *, prefer: Prefer | None = None) -> None:
        """Before the first comparison (every candidate loaded): without a NumPy reference, each
        candidate's own float64 loss is checked, probed and differenced, one candidate after the other,
        and the anchor of "same function" is the first whose loss has no float32 steps, else the first
        that can be differenced (``own_losses.anchor``): a port's float64 gradient is then judged against
        clean differences, not against float32's noise (each side's own derivative stays judged against
        its own loss). ``prefer``: the candidate that anchors it instead, given the losses made (None:
        none), as a port's original does."""
        chosen = None
        if self.findings.oracle and self.numpy is None and self.workload.surrogate is None:
            chosen = self.own.difference_each(candidates, call)
        preferred = prefer(self.own.functions) if prefer is not None else None
        self.anchor_candidate = preferred if preferred is not None else chosen

    # -- a candidate -----------------------------------------------------------------------------------

    def compare(
        self, backend: Loaded, value: dict[str, np.ndarray], name: str, reference: Reference, call: Call
    ) -> list[Comparison]:
        rounding = self.rounding(backend, value, name, call)
        self.notes[name] = {"rounding": rounding.how}
        if rounding.used is not None:  # how much of what float32 permits its rounding used
            self.notes[name]["rounding_of_permitted"] = round(rounding.used, 4)
        record = Record(name, value, rounding)
        self.findings.records[name] = record
        if not self.findings.oracle:
            ctx = self._context(name, reference.name, "same function", f"`{reference.name}`'s gradient")
            found, zeros = entries(ctx, value, rounding, reference.data.answer, {})
            record.add(found, zeros)
            self._confirm_zeros(backend, record, reference, call)
            return self._low(name, record.finish(found), rounding, value)
        own = self.own.differenced(backend, name, call)
        record.own = own
        if self.findings.anchor is None:
            self.findings.anchor = self._anchor(name, own, call)
        anchor = self.findings.anchor
        if anchor is None:
            return record.nothing(self.shapes, reference.name, _why_nothing(own))
        anchor_is_own = anchor is own
        question = "derivative" if anchor_is_own else "same function"
        found = against_oracle(self, record, anchor, question, reference.name, call)
        if isinstance(own, Differences) and not anchor_is_own:
            found += against_oracle(self, record, own, "derivative", reference.name, call)
        record.loss_check(anchor.function, own, "float32" if self.float32_by_design else self.dtype)
        return self._low(name, record.finish(found), rounding, value)

    def _low(
        self, name: str, found: list[Comparison], rounding: Rounding, value: dict[str, np.ndarray]
    ) -> list[Comparison]:
        """In a 16-bit or float32 case, a candidate that agrees is told what its dtype hides (``low``),
        and, in 16 bits, one that computed in float32 is named."""
        if low.hides(self.dtype) and low.agrees(found):
            relative = low.noise(rounding.term, value)
            said = low.text(self.dtype, relative, moves="the gradients", measured=True)
            wide = f"{low.wide_only(name, self.dtype)}; " if rounding.wide_only else ""
            self.verdicts[name] = Verdict(wide + said)
        self._wide_only(name, rounding)
        return found

    def _wide_only(self, name: str, rounding: Rounding) -> None:
        if is_low(self.dtype) and rounding.delta is not None:  # measured against its float32 re-run
            self.wide_only[name] = rounding.wide_only

    def _confirm_zeros(self, backend: Loaded, record: Record, reference: Reference, call: Call) -> None:
        """With a backend as reference: the oracle on the tensors whose gradient is zero in both
        (``zeros``), along directions of each side's own float64 loss."""
        self.findings.reference_name = reference.name
        ref = self.findings.reference_gradient
        answered = reference.data if isinstance(reference.data, BackendAnswer) else None
        if ref is None or answered is None or (record.zeros and all(record.zeros.values())):
            return  # no reference gradient, or an empty check: said as such
        names = zero_tensors(self.shapes, [record.gradient, ref], record.zeros)
        if names:
            sides = [Side(reference.name, answered.backend, ref, answered.rounding)]
            sides.append(Side(record.name, backend, record.gradient, record.rounding))
            confirm(self, sides, names, call)

    def _anchor(self, name: str, own: Differences | Skip, call: Call) -> Differences | None:
        """The differences every candidate's "same function" is judged against, without a NumPy
        reference: the chosen candidate's (``prepare``), else the first candidate's own."""
        if self.anchor_candidate is not None and self.anchor_candidate[0] != name:
            chosen, backend = self.anchor_candidate
            found = self.own.differenced(backend, chosen, call)
            if isinstance(found, Differences):
                return found
        return own if isinstance(own, Differences) else None

    def context(self, name: str, reference: str, question: str, function: Function) -> Context:
        return self._context(name, reference, question, f"differences of {function.label}")

    def _context(self, name: str, reference: str, question: str, against: str) -> Context:
        return Context(name, reference, question, against, self.dtype, self.options, self.shapes)

    def rounding(self, backend: Loaded, value: dict[str, np.ndarray], name: str, call: Call) -> Rounding:
        """The ``rounding`` term of every parameter, and how it was obtained (``rerun.rounding``)."""
        return rerun.rounding(
            backend,
            value,
            name,
            call,
            point=self.point,
            shapes=self.shapes,
            own=self.own,
            oracle=self.findings.oracle,
            by_design=self.float32_by_design,
        )

    # -- what the report says --------------------------------------------------------------------------

    def extras(self, reference: Reference | None) -> dict[str, Any]:
        if not self.findings.oracle:  # the report claims no oracle's work: none ran
            self.point.case["oracle_differentiates"] = NO_ORACLE[self.findings.reference_gradient is not None]
        extras: dict[str, Any] = {
            "quantity": "grad",
            "oracle": summarize(self.findings, reference, self.dtype),
        }
        said = low.unchecked(self.wide_only, self.dtype)  # no side computed in the 16-bit dtype
        if said:
            oracle = extras["oracle"]
            extras["oracle"] = {**oracle, "problems": [*oracle.get("problems", []), *said]}
        return {**extras, "verdicts": dict(self.verdicts)} if self.verdicts else extras


def _differentiates(workload: Workload, function: Function | None) -> str:
    if function is None:
        return "each implementation's own float64 loss (the workload has no NumPy reference)"
    if workload.surrogate is not None:
        return "surrogate (built at the base point: the gradient the implementations compute)"
    return "reference"


def _why_nothing(own: Differences | Skip) -> str:
    reason = own.reason if isinstance(own, Skip) else ""
    return f"nothing to difference: the workload has no NumPy reference and {reason}"
