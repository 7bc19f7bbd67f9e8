"""The port's gradient judge: the generic workload's gradient judge, plus the module by module
comparison of the JAX port's forward pass with PyTorch's, and the port's verdict.

The gradients are judged as for any workload (each candidate against the reference, per parameter).
For the ``jax`` candidate the judge also captures every module's input and output on both sides, at
the case's dtype and re-run in the other (four guarded calls), compares each paired module's output,
and adds one comparison per module (``h.0.ln_1 (output)``) before the gradients' in the report, and
the verdict: a ``Verdict`` on the candidate's record (it fails the run when the port differs
somewhere), written in the JSON report as the candidate's ``notes["port"]``. A capture that fails at
the case's dtype is a comparison that fails: the module check did not happen; a side whose re-run in
the other precision fails takes the other side's measured rounding, and the verdict says so. The
parameter mapping is printed before the table (a section of the report). The forward check
(``quantity="output"``, ``forward.OutputJudge``) is this module comparison on its own, without the
gradients.

A candidate's module comparison runs in phases, each handing a frozen record to the next: the PyTorch
side's proof, made with the reference (``own.Proof``), both sides' captures (``compare.Sides``), each
module compared (``compare.Compared``), where the difference starts (``locate``: ``verdict.Located``),
and the verdict in words (``say``).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from crosscheck._compare.device import Arithmetic, arithmetic
from crosscheck._compare.record import Comparison
from crosscheck._report.report import Verdict
from crosscheck._types import Loaded
from crosscheck._workloads.model.judge import GenericJudge
from crosscheck._workloads.model.oracle.estimate import Cost
from crosscheck._workloads.port.declare import layout
from crosscheck._workloads.port.declare.build import torch_implementation
from crosscheck._workloads.port.declare.notes import not_checked
from crosscheck._workloads.port.judge import (
    backward,
    by_design,
    capture,
    compare,
    localize,
    own,
    running,
    say,
    wide,
)
from crosscheck._workloads.port.judge.locate import locate
from crosscheck._workloads.port.judge.verdict import Located
from crosscheck._workloads.port.judge.view import PortView
from crosscheck._workloads.port.mapping.table import MAPPING
from crosscheck._workloads.protocol import Call, Options, Outcome, Point, Reference


class PortJudge:
    """The generic gradient judge, plus the port's module comparisons for its ``jax`` candidate."""

    signature = GenericJudge.signature
    budgeted = GenericJudge.budgeted
    #: A forward check (``quantity="output"``, ``forward.OutputJudge``): no gradient to agree or differ.
    forward = False

    def __init__(self, workload: PortView, point: Point, options: Options) -> None:
        self.workload, self.point, self.dtype = workload, point, point.dtype
        self.inner = GenericJudge(workload.prepared.workload, point, options)
        self.notes = self.inner.notes
        self.strict = options.strict
        #: Keep each module comparison's per-entry arrays, for a plot (``Options.plot``).
        self.plot = options.plot
        #: What the PyTorch module did wrong, and the inputs it writes to (``own.prove``), found with the
        #: reference, before anything is judged.
        self.proof = own.Proof()
        #: The module captures, taken before the reference's gradients for the first port candidate.
        self.early = capture.Early()
        #: What the run found, by candidate, for the report: the port's verdict (the ``jax`` one), the
        #: originals judged against the port's own loss with what differed (``own.unanchored``) and, in a
        #: 16-bit case, per side, whether its model output computed in float32 (``wide.sides``).
        self.verdicts: dict[str, Verdict] = {}
        self.unanchored: dict[str, Any] = {}
        self.wide: dict[str, bool] = {}
        #: The parts the original computes in float32 by design, in a float64 check (``by_design``).
        self.by_design: tuple[by_design.Part, ...] = ()

    def cost(self, candidates: int) -> Cost:
        """The oracle's cost, estimated before it runs (the generic judge's)."""
        return self.inner.cost(candidates)

    def reference(self, backend: Loaded, call: Call) -> Outcome:
        self.proof = own.prove(self.workload.prepared, self.point, call)
        if self.proof.problem is not None and id(backend) in self.workload.torches:
            return call.failure(self.proof.problem)
        self._unreached(call)
        self.early.take(self._runs, call, wanted=self.proof.problem is None and self.workload.port_requested)
        if self.early.runs is not None:
            self.designed(self.early.runs[0])
        return self.inner.reference(backend, call)

    def designed(self, torch_runs: localize.Runs | str) -> None:
        """The parts the original computes in float32 by design (``by_design``), from its records at the
        case's dtype, taken before any gradient is judged: every side's rounding is then float32's."""
        if isinstance(torch_runs, str):
            return
        prepared = self.workload.prepared
        mapped = {e.torch.name for e in prepared.table.mapped() if e.torch is not None}
        self.by_design = by_design.parts(torch_runs.main, self.workload.port.torch, mapped, self.dtype)
        self.inner.float32_by_design = bool(self.by_design)

    def prepare(self, candidates: list[tuple[str, Any]], call: Call) -> None:
        """Before the first comparison: the generic judge's (the anchor of "same function"), the original
        preferred as anchor: it defines the function, float32 steps or not (``own.original``)."""
        kept = own.candidates(candidates, self.workload.torches, self.proof.problem)
        self.inner.prepare(kept, call, prefer=functools.partial(own.original, kept, self.workload.torches))

    def _unreached(self, call: Call) -> None:
        """The parameters the loss does not reach (PyTorch's autograd: no path), and those declared
        ``unused``, for the judge's summary (``zeros.unreached``)."""
        from crosscheck._workloads.port.sides import torch_side

        prepared, findings = self.workload.prepared, self.inner.findings
        loss = torch_implementation(prepared)
        out = call(torch_side.unreached, loss, dict(self.point.params), dict(self.point.inputs))
        findings.unreached = list(out.value) if out.error is None else None
        findings.unused = tuple(self.workload.port.unused)

    def evaluate(self, backend: Loaded, call: Call) -> Outcome:
        if self.proof.problem is not None and id(backend) in self.workload.torches:
            return call.failure(self.proof.problem)
        return self.inner.evaluate(backend, call)

    def extras(self, reference: Reference | None) -> dict[str, Any]:
        wide.merge(self.inner, self.wide, self.dtype)
        extras = self.inner.extras(reference)
        extras["oracle"] = not_checked(extras.get("oracle", {}), self.workload.prepared, strict=self.strict)
        originals = own.originals(self.unanchored, self.verdicts)
        verdicts = {**extras.get("verdicts", {}), **self.verdicts, **originals}
        return {**extras, "verdicts": verdicts, "sections": (MAPPING,)}

    def compare(
        self, backend: Loaded, value: dict[str, np.ndarray], name: str, reference: Reference, call: Call
    ) -> list[Comparison]:
        found = self.inner.compare(backend, value, name, reference, call)
        if id(backend) in self.workload.torches:
            found, self.unanchored[name] = own.unanchored(self.inner.findings, name, found)
        if id(backend) not in self.workload.ports:
            return found
        located = self.modules(name, call, found, arithmetic(backend, call))
        self.record(name, located, reference.name)
        return self.running(name, call) + located.comparisons + self.apart(name, reference.name) + found

    def running(self, name: str, call: Call) -> list[Comparison]:
        """The running statistics of a port in training mode (``running``), their clause added to the
        verdict (they fail it where they differ); in eval mode, the verdict says they are not compared."""
        rows, said = running.compared(self.workload.prepared, self.point, name, call)
        said = said or running.not_compared(self.workload.prepared)
        before = self.verdicts.get(name)
        if said and before is not None:
            # the verdict first: where only the running statistics differ, they lead it (a module's
            # output or gradient that differs leads where it does: the statistics may follow from it)
            leads = any(not r.passed for r in rows) and not before.fails
            text = f"{said}; {before.text}" if leads else f"{before.text}; {said}"
            self.verdicts[name] = Verdict(text, fails=before.fails or leads)
            self.notes.setdefault(name, {})["running_statistics"] = said
            if leads:  # the JSON's verdict names where, as its words do
                self.notes[name]["port"] = running.origin(rows, text).to_dict()
        return rows

    def apart(self, name: str, reference: str) -> list[Comparison]:
        """The model's output arrays that differ from the original's in every layout their shapes allow
        (``layout.differs``): each a failing comparison, said in the verdict, which fails with them."""
        lines = layout.differs(self.workload.prepared)
        if not lines:
            return []
        before = self.verdicts.get(name)
        said = "; ".join(lines)
        text = (
            said if before is None else f"{before.text}; {said}" if before.fails else f"{said}; {before.text}"
        )
        self.verdicts[name] = Verdict(text, fails=True)
        label = localize.output_label("")
        return [
            Comparison(
                backend=name,
                reference=reference,
                passed=False,
                status="mismatch",
                total=1,
                mismatched=1,
                judged=1,
                parameter=f"{label}, every layout",
                module="",
                message=line,
            )
            for line in lines
        ]

    def record(self, name: str, located: Located, reference: str) -> None:
        """Candidate ``name``'s verdict in words (``say``), on its record (``notes["port"]``) and the
        run's."""
        low = self.inner.verdicts.get(name)
        origin = say.said(
            name, located, reference, forward=self.forward, low=low, wider=self.wide, dtype=self.dtype
        )
        self.notes.setdefault(name, {})["port"] = origin.to_dict()
        self.verdicts[name] = Verdict(origin.text, fails=origin.starts_in != "nowhere")

    def modules(
        self,
        name: str,
        call: Call,
        gradients: list[Comparison],
        device: Arithmetic | None,
        runs: tuple[Any, Any] | None = None,
    ) -> Located:
        """The module comparisons of candidate ``name`` and where its difference starts (``compare``, then
        ``locate``); ``device``: where the port computes; ``runs``: the two sides' records (``_runs``) when
        the caller has them already."""
        if self.proof.problem is not None:
            return own.not_compared(name, own.blame(name, self.proof.problem))
        runs = runs or self.early.use(call)
        torch_runs, jax_runs = runs or (self._runs(call, torch=True), self._runs(call, torch=False))
        if isinstance(torch_runs, str) or isinstance(jax_runs, str):
            problem = torch_runs if isinstance(torch_runs, str) else jax_runs
            return own.not_compared(name, f"the module by module comparison did not happen: {problem}")
        sides = compare.sides(torch_runs, jax_runs, self.workload.port.torch, self.proof.wrote)
        self.wide.update(wide.sides(torch_runs, jax_runs, name, self.dtype))
        wide.merge(self.inner, self.wide, self.dtype)
        coarse = compare.float32_losses(self.inner.findings, self.inner.own.float32_steps, self.dtype)
        compared = compare.compare(
            sides,
            gradients,
            self.workload.prepared,
            name=name,
            dtype=self.dtype,
            coarse=coarse,
            device=device,
            reference_device=arithmetic(self.workload.torch_backend(), call),
            keep=self.plot,
            forward=self.forward,
            by_design=self.by_design,
        )
        findings = self.inner.findings
        found = locate(
            compared, gradients, self.workload, findings, name=name, dtype=self.dtype, forward=self.forward
        )
        if found.origin.starts_in != "gradient":
            return found
        # the backward pass differs: each module's cotangents, captured only now, say whose backward
        chains = backward.chains(call, self.workload, self.point)
        return locate(
            compared,
            gradients,
            self.workload,
            findings,
            name=name,
            dtype=self.dtype,
            forward=self.forward,
            chains=chains,
        )

    def _runs(self, call: Call, *, torch: bool, main: Any = None) -> localize.Runs | str:
        """One side's module records at the case's dtype and in the other (``capture.runs``)."""
        return capture.runs(call, self.workload, self.point, torch=torch, main=main)
