"""The gradient judge of a user's ``Workload``: two questions, kept apart.

- *Is each implementation's derivative right?* Its gradient against finite differences of its own
  float64 loss (``question="derivative"``).
- *Do the implementations compute the same function?* Each gradient against the differences of the
  workload's NumPy reference when it has one, else of the first implementation's own loss without
  float32 steps (``prepare``, before the first comparison; else the first that can be differenced);
  and the float64 losses at the point against each other (``question="same function"``).

The oracle (``fd``) differences entry by entry or along random directions (``Differencing``); the judge fills
its ``Findings`` as it compares, and the report's ``oracle`` section (``summary``) says from them which
question failed, what was covered how, and names the empty check and the parameters whose gradient is
zero everywhere.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

import numpy as np

from crosscheck._backends import ORACLE
from crosscheck._compare import low
from crosscheck._compare.constants import OTHER_DTYPE, WIDEN
from crosscheck._compare.dtypes import is_low
from crosscheck._compare.record import Comparison, Kinks
from crosscheck._report.report import Verdict
from crosscheck._workloads.model.compare import Answer, Context, entries
from crosscheck._workloads.model.declare import Workload
from crosscheck._workloads.model.findings import Findings, Record
from crosscheck._workloads.model.measured import Divided
from crosscheck._workloads.model.oracle.estimate import Cost, estimate, seconds_per_evaluation
from crosscheck._workloads.model.oracle.function import (
    Differences,
    Function,
    Losses,
    Skip,
    difference,
    differencing,
)
from crosscheck._workloads.model.oracle.one_thread import threads_note
from crosscheck._workloads.model.oracle.sources import numpy_function, own_loss
from crosscheck._workloads.model.rerun import rerun
from crosscheck._workloads.model.rounding import Rounding, measure
from crosscheck._workloads.model.summary import against_oracle, summarize
from crosscheck._workloads.model.zeros import Side, confirm, zero_tensors
from crosscheck._workloads.protocol import Call, Options, Outcome, Point, Reference

#: The case's ``oracle_differentiates`` when no oracle ran: a backend is the reference, or the
#: reference failed. The table's title says so instead of what an oracle would have differenced.
NO_ORACLE = {
    True: "nothing: no oracle ran (the reference is a backend)",
    False: "nothing: the reference failed or did not run",
}


class WorkloadOracle:
    """The reference ``numpy-fd`` of a workload: finite differences of its float64 loss."""

    name = ORACLE

    def info(self) -> dict[str, str]:
        return {"framework": "numpy + scipy.differentiate", "version": "", "device": "cpu"}


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
        self.differencing = differencing(oracle.mode, point.params, oracle.directions, oracle.budget)
        point.case["oracle_differentiates"] = _differentiates(workload, self.numpy)
        self.shapes = {k: v.shape for k, v in point.params.items()}
        self.notes: dict[str, dict[str, Any]] = {}
        #: What the run found, for the report's ``oracle`` section (``summary.summarize``).
        self.findings = Findings(self.differencing, point.case["oracle_differentiates"], self.shapes)
        #: Per side, whether its float64 loss keeps float32 steps (probed with a backend as reference).
        self.float32_steps: dict[str, bool] = {}
        #: The reference backend and its rounding (a backend as reference), for the zero checks.
        self.reference_side: tuple[Any, Rounding] | None = None
        #: A 16-bit case: the verdict on each candidate that agrees ("check in float32 too").
        self.verdicts: dict[str, Verdict] = {}
        #: Each candidate's own float64 loss (checked and probed) and its differences, by name, once.
        self.functions: dict[str, Function | Skip] = {}
        self.differences: dict[str, Differences | Skip] = {}
        #: The candidate whose own loss is the anchor of "same function" (``prepare``), and its backend.
        self.anchor_candidate: tuple[str, Any] | None = None
        #: A 16-bit case: per side measured, whether it computed in float32 (``sixteen.unrounded``).
        self.wide_only: dict[str, bool] = {}

    def evaluate(self, backend: Any, call: Call) -> Outcome:
        return self._grad(backend, call, self.point.params, self.point.inputs)

    def cost(self, candidates: int) -> Cost:
        """The oracle's cost, estimated before it runs: the NumPy reference's differences (when there is
        one) and each candidate's own loss's."""
        functions = candidates + (self.numpy is not None)
        return estimate(self.differencing, self.point.params, functions, self.per_evaluation)

    def _grad(self, backend: Any, call: Call, params: dict, inputs: dict) -> Any:
        # Fresh dicts: a backend that adds or drops keys changes nothing the next one sees.
        return call(backend.grad, dict(params), dict(inputs), convert="arrays")

    def progress(self, description: str, done: int, total: int) -> None:
        if self.options.progress is not None:
            self.options.progress(description, done, total)

    # -- the reference ---------------------------------------------------------------------------------

    def reference(self, backend: Any, call: Call) -> Outcome:
        if not isinstance(backend, WorkloadOracle):
            return self._backend_reference(backend, call)
        self.findings.oracle = True
        notes: dict[str, Any] = {
            "mode": self.differencing.mode,
            "threads": threads_note(sum(int(np.size(v)) for v in self.point.params.values())),
            "differentiates": self.point.case["oracle_differentiates"],
        }
        start = time.perf_counter()
        value = None
        if self.numpy is not None:
            found = difference(self.numpy, self.point, self.differencing, call, self.progress)
            if isinstance(found, str):
                return call.failure(f"finite differences of the loss failed: {found}")
            self.findings.anchor = found
            notes["evaluations"] = found.evaluations
            value = found.entries.value if found.entries is not None else None
        reference = Reference(value, "float64", notes, self.findings.anchor)
        return dataclasses.replace(
            call.failure(""), value=reference, error=None, seconds=time.perf_counter() - start
        )

    def _backend_reference(self, backend: Any, call: Call) -> Any:
        out = self.evaluate(backend, call)
        if out.error:
            return out
        value = out.value
        problems = [
            k
            for k in self.shapes
            if k not in value or value[k].shape != self.shapes[k] or not np.all(np.isfinite(value[k]))
        ]
        if problems:
            error = f"reference gradient of `{problems[0]}` is missing, of the wrong shape or not finite"
            if is_low(self.dtype) and problems[0] in value:  # a 16-bit range lost: said as what it is
                lost = self.rounding(backend, value, "the reference", call).limits.get(problems[0])
                error += f" ({lost})" if lost else ""
            return dataclasses.replace(out, value=None, error=error)
        rounding = self.rounding(backend, value, "the reference", call)
        if rounding.excess:  # a reference below float32 precision cannot judge anyone
            return dataclasses.replace(
                out,
                value=None,
                error=rounding.excess[0].says(getattr(backend, "name", "the reference"), self.dtype),
            )
        self.reference_side = (backend, rounding)
        self._wide_only(getattr(backend, "name", "the reference"), rounding)
        # The backend's own arrays, kept as they came (a float32 gradient stays 4 bytes an entry): each
        # use widens one tensor at a time (``compare.entries``, ``zeros``), exactly.
        ref_value = {k: value[k] for k in self.shapes}
        self.findings.reference_gradient = ref_value
        kinks = {k: Kinks.none(s) for k, s in self.shapes.items()}
        answer = Answer(ref_value, rounding.term, kinks)
        notes: dict[str, Any] = {"rounding": rounding.how}
        if rounding.wide_only:  # a 16-bit reference that computed in float32, named
            notes["rounding"] += f"; {low.wide_only(getattr(backend, 'name', 'the reference'), self.dtype)}"
        if rounding.used is not None:  # how much of what its dtype permits its rounding used
            notes["rounding_of_permitted"] = round(rounding.used, 4)
        reference = Reference(ref_value, _dtypes(value), notes, answer)
        return dataclasses.replace(out, value=reference)

    # -- the candidates, before the first comparison ---------------------------------------------------

    def prepare(self, candidates: list[tuple[str, Any]], call: Call) -> None:
        """Before the first comparison (every candidate loaded): without a NumPy reference, each
        candidate's own float64 loss is checked, probed and differenced (``_own``), one candidate after
        the other, and the anchor of "same function" is the first whose loss has no float32 steps, else
        the first that can be differenced: a port's float64 gradient is then judged against clean
        differences, not against float32's noise (each side's own derivative stays judged against its own
        loss)."""
        if not self.findings.oracle or self.numpy is not None or self.workload.surrogate is not None:
            return
        for name, backend in candidates:
            self._own(backend, name, call)
        usable = [(n, b) for n, b in candidates if isinstance(self.functions.get(n), Function)]
        clean = [(n, b) for n, b in usable if not _float32(self.functions[n])]
        if clean or usable:
            self.anchor_candidate = (clean or usable)[0]

    def _function(self, backend: Any, name: str, call: Call) -> Function | Skip:
        """``name``'s own float64 loss, checked and probed (``own_loss``), once; its adapter keeps the point
        the probe held on its line for ``_own``'s differences, which follow at once and release it."""
        if name not in self.functions:
            chosen = self.differencing
            self.functions[name] = own_loss(
                backend, name, self.point, call, chosen.clock, keep=True, cache=chosen.drawn
            )
        return self.functions[name]

    # -- a candidate -----------------------------------------------------------------------------------

    def compare(
        self, backend: Any, value: dict[str, np.ndarray], name: str, reference: Reference, call: Call
    ) -> list[Comparison]:
        rounding = self.rounding(backend, value, name, call)
        self.notes[name] = {"rounding": rounding.how}
        if rounding.used is not None:  # how much of what float32 permits its rounding used
            self.notes[name]["rounding_of_permitted"] = round(rounding.used, 4)
        record = Record(name, value, rounding)
        self.findings.records[name] = record
        if not self.findings.oracle:
            ctx = self._context(name, reference.name, "same function", f"`{reference.name}`'s gradient")
            found, zeros = entries(ctx, value, rounding, reference.data, {})
            record.add(found, zeros)
            self._confirm_zeros(backend, record, reference.name, call)
            return self._low(name, record.finish(found), rounding, value)
        own = self._own(backend, name, call)
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
        record.loss_check(anchor.function, own, self.dtype)
        return self._low(name, record.finish(found), rounding, value)

    def _low(
        self, name: str, found: list[Comparison], rounding: Rounding, value: dict[str, np.ndarray]
    ) -> list[Comparison]:
        """In a 16-bit case, a candidate that agrees is told what its dtype hides (``low``), and one that
        computed in float32 is named."""
        if is_low(self.dtype) and low.agrees(found):
            relative = low.noise(rounding.term, value)
            said = low.text(self.dtype, relative, moves="the gradients", measured=True)
            wide = f"{low.wide_only(name, self.dtype)}; " if rounding.wide_only else ""
            self.verdicts[name] = Verdict(wide + said)
        self._wide_only(name, rounding)
        return found

    def _wide_only(self, name: str, rounding: Rounding) -> None:
        if is_low(self.dtype) and rounding.delta is not None:  # measured against its float32 re-run
            self.wide_only[name] = rounding.wide_only

    def _confirm_zeros(self, backend: Any, record: Record, reference: str, call: Call) -> None:
        """With a backend as reference: the oracle on the tensors whose gradient is zero in both
        (``zeros``), along directions of each side's own float64 loss."""
        self.findings.reference_name = reference
        ref = self.findings.reference_gradient
        if ref is None or self.reference_side is None or (record.zeros and all(record.zeros.values())):
            return  # no reference gradient, or an empty check: said as such
        names = zero_tensors(self.shapes, [record.gradient, ref], record.zeros)
        if names:
            ref_backend, ref_rounding = self.reference_side
            sides = [Side(reference, ref_backend, ref, ref_rounding)]
            sides.append(Side(record.name, backend, record.gradient, record.rounding))
            confirm(self, sides, names, call)

    def _anchor(self, name: str, own: Differences | Skip, call: Call) -> Differences | None:
        """The differences every candidate's "same function" is judged against, without a NumPy
        reference: the chosen candidate's (``prepare``), else the first candidate's own."""
        if self.anchor_candidate is not None and self.anchor_candidate[0] != name:
            chosen, backend = self.anchor_candidate
            found = self._own(backend, chosen, call)
            if isinstance(found, Differences):
                return found
        return own if isinstance(own, Differences) else None

    def _own(self, backend: Any, name: str, call: Call) -> Differences | Skip:
        """Differences of ``name``'s own float64 loss, or why there are none (once per candidate)."""
        if self.workload.surrogate is not None:
            return Skip(
                "the workload has a surrogate: its implementations' gradients are not derivatives of their "
                "losses, so their own losses are not differenced"
            )
        if name in self.differences:
            return self.differences[name]
        function = self._function(backend, name, call)
        if isinstance(function, Skip):
            return function
        found = difference(function, self.point, self.differencing, call, self.progress)
        if isinstance(found, str):
            why = f"finite differences of `{name}`'s own loss failed: {found}"
            self.differences[name] = Skip(why, failure=True)
        else:
            self.differences[name] = found
        return self.differences[name]

    def context(self, name: str, reference: str, question: str, function: Function) -> Context:
        return self._context(name, reference, question, f"differences of {function.label}")

    def _context(self, name: str, reference: str, question: str, against: str) -> Context:
        return Context(name, reference, question, against, self.dtype, self.options, self.shapes)

    def rounding(self, backend: Any, value: dict[str, np.ndarray], name: str, call: Call) -> Rounding:
        """The ``rounding`` term of every parameter, and how it was obtained (``rounding.measure``)."""
        other = OTHER_DTYPE[self.dtype]
        outcome, failed, device = rerun(backend, self.point, other, name, call)
        again = outcome.value
        # |g32 - g64| is two float32 roundings, not the float32 run's alone, where the float64 loss
        # keeps float32 steps (probed lazily: only for a parameter beyond the permit); the re-run's
        # arrays are the engine's copies, read by no one after: the difference is made in them
        steps = functools.partial(self._keeps_float32, backend, name, call)
        found = measure(
            value,
            again,
            shapes=self.shapes,
            dtype=self.dtype,
            name=name,
            steps=steps,
            consume=True,
            device=device,
        )
        del again
        if failed:  # said wherever the rounding is: a re-run that did not happen is not hidden
            found = dataclasses.replace(found, how=f"{failed}; {found.how}", honest=outcome.ok)
        if self.dtype != "float64" or found.delta is None:
            return found
        side = getattr(backend, "name", name)
        if self.findings.oracle:  # probed before the first comparison (``prepare``), where it was
            # (its own loss's differences carry its noise; another's clean ones do not)
            if not _float32(self.functions.get(name)):
                return found
        elif not self._float32_steps(backend, side, call):
            return found
        # Its float64 run keeps float32 steps: its rounding is float32's, |g64 - g32| unscaled.
        how = f"{found.how}; `{side}`'s float64 loss keeps float32 steps (noise probe): float32's rounding"
        term, delta = Divided(found.term, WIDEN), Divided(found.delta, WIDEN)  # each made when read
        return dataclasses.replace(found, term=term, delta=delta, how=how)

    def _keeps_float32(self, backend: Any, name: str, call: Call) -> bool:
        """Whether ``name``'s float64 loss keeps float32 steps: its own loss's probe (the oracle's,
        shared), else the side's (``_float32_steps``)."""
        if self.findings.oracle and name in self.functions:
            return _float32(self.functions[name])
        return self._float32_steps(backend, getattr(backend, "name", name), call)

    def _float32_steps(self, backend: Any, side: str, call: Call) -> bool:
        """Whether ``side``'s float64 loss keeps float32 steps (``oracle.precision``'s noise probe: Hugging
        Face's upcasts), once per side; said in the report's notes."""
        if side not in self.float32_steps:
            function = own_loss(backend, side, self.point, call)
            steps = isinstance(function, Function) and function.precision is not None
            self.float32_steps[side] = steps and bool(function.precision.float32)  # type: ignore[union-attr]
        return self.float32_steps[side]

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


def _dtypes(value: dict[str, np.ndarray]) -> str | None:
    return ",".join(sorted({v.dtype.name for v in value.values()})) or None


def _differentiates(workload: Workload, function: Function | None) -> str:
    if function is None:
        return "each implementation's own float64 loss (the workload has no NumPy reference)"
    if workload.surrogate is not None:
        return "surrogate (built at the base point: the gradient the implementations compute)"
    return "reference"


def _float32(function: Function | Skip | None) -> bool:
    """Whether ``function`` keeps float32 steps (the noise probe found float32's noise)."""
    return isinstance(function, Function) and function.precision is not None and function.precision.float32


def _why_nothing(own: Differences | Skip) -> str:
    reason = own.reason if isinstance(own, Skip) else ""
    return f"nothing to difference: the workload has no NumPy reference and {reason}"
