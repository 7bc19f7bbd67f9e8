"""The port's gradient judge: the generic workload's gradient judge, plus the module by module
comparison of the JAX port's forward pass with PyTorch's, and the port's verdict (see ``localize``).

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
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from crosscheck._compare.constants import OTHER_DTYPE
from crosscheck._compare.device import Arithmetic, arithmetic
from crosscheck._compare.record import Comparison
from crosscheck._report.report import FORWARD_ONLY, Verdict
from crosscheck._workloads.model.judge import GenericJudge
from crosscheck._workloads.model.oracle.function import Differences
from crosscheck._workloads.port.declare.build import Prepared, not_checked, torch_implementation
from crosscheck._workloads.port.declare.port import Port
from crosscheck._workloads.port.judge import boundaries, capture, float32_constants, localize, own, wide
from crosscheck._workloads.port.judge.pairs import module_pairs
from crosscheck._workloads.port.judge.verdict import Origin, forward_origin, gradient_origin, listed_origin
from crosscheck._workloads.port.mapping.table import MAPPING
from crosscheck._workloads.protocol import Call, Options, Outcome, Point, Reference


class PortView(Protocol):
    """What the judges read of the engine's view of a port (``workload.PortWorkload``)."""

    port: Port
    prepared: Prepared
    #: The ids of the run's ``jax`` backends (the port) and ``torch`` backends (the original).
    ports: set[int]
    torches: set[int]
    #: Whether the run's candidates name the port: its module captures are then taken early.
    port_requested: bool


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
        #: The port's verdict per candidate (the ``jax`` one), for the report.
        self.verdicts: dict[str, Verdict] = {}
        self.torch_runs: Any = None
        #: The verdict's notes on a side not re-run in the other precision and on modules left out.
        self.caveats = ""
        self.strict = options.strict
        #: Keep each module comparison's per-entry arrays, for a plot (``Options.plot``).
        self.plot = options.plot
        #: What the PyTorch module did wrong (``own.prove``), found before anything is judged.
        self.torch_problem: str | None = None
        #: The note on the inputs the PyTorch forward writes to in place (``own.wrote``).
        self.torch_wrote = ""
        #: A 16-bit case: per side, whether its model output computed in float32 (``wide.sides``).
        self.wide: dict[str, bool] = {}
        #: Why the port's submodule calls were not captured ("": they were; ``jax_side.UNCAPTURED``).
        self.uncaptured = ""
        #: The module captures, taken before the reference's gradients for the first port candidate.
        self.early = capture.Early()
        #: The originals judged against the port's own loss, with what differed (``own.unanchored``).
        self.unanchored: dict[str, Any] = {}
        #: Where the port computes (its backend's ``arithmetic``), when on an accelerator.
        self.device: Arithmetic | None = None

    def cost(self, candidates: int) -> Any:
        """The oracle's cost, estimated before it runs (the generic judge's)."""
        return self.inner.cost(candidates)

    def reference(self, backend: Any, call: Call) -> Outcome:
        self.torch_problem, self.torch_wrote = own.prove(self.workload.prepared, self.point, call)
        if self.torch_problem is not None and id(backend) in self.workload.torches:
            return call.failure(self.torch_problem)
        self._unreached(call)
        self.early.take(self._runs, call, wanted=self.torch_problem is None and self.workload.port_requested)
        return self.inner.reference(backend, call)

    def prepare(self, candidates: list[tuple[str, Any]], call: Call) -> None:
        """Before the first comparison: the generic judge's (the anchor of "same function")."""
        kept = own.candidates(candidates, self.workload.torches, self.torch_problem)
        # the original defines the function, float32 steps or not
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

    def evaluate(self, backend: Any, call: Call) -> Outcome:
        if self.torch_problem is not None and id(backend) in self.workload.torches:
            return call.failure(self.torch_problem)
        return self.inner.evaluate(backend, call)

    def extras(self, reference: Reference | None) -> dict[str, Any]:
        wide.merge(self.inner, self.wide, self.dtype)
        extras = self.inner.extras(reference)
        extras["oracle"] = not_checked(extras.get("oracle", {}), self.workload.prepared, strict=self.strict)
        originals = own.originals(self.unanchored, self.verdicts)
        verdicts = {**extras.get("verdicts", {}), **self.verdicts, **originals}
        return {**extras, "verdicts": verdicts, "sections": (MAPPING,)}

    def compare(
        self, backend: Any, value: dict[str, np.ndarray], name: str, reference: Reference, call: Call
    ) -> list[Comparison]:
        found = self.inner.compare(backend, value, name, reference, call)
        if id(backend) in self.workload.torches:
            found, self.unanchored[name] = own.unanchored(self.inner.findings, name, found)
        if id(backend) not in self.workload.ports:
            return found
        self.device = arithmetic(backend, call)
        modules, verdict = self.modules(name, call, found)
        self.record(name, modules, verdict, reference.name)
        return modules + found

    def record(self, name: str, modules: list[Comparison], verdict: Any, reference: str) -> None:
        """Candidate ``name``'s verdict, with its notes, on its record (``notes["port"]``) and the run's."""
        text = verdict.text + compared(verdict, name, reference, forward=self.forward)
        text += localize.broadcast_note(modules) + localize.redrawn_note(modules) + self.caveats
        if name in self.inner.verdicts and verdict.starts_in == "nowhere":  # a 16-bit pass: what it hides
            text = f"{text}; {self.inner.verdicts[name].text}"
        verdict = dataclasses.replace(verdict, text=text + wide.said(self.wide, self.dtype, text))
        self.notes.setdefault(name, {})["port"] = verdict.to_dict()
        self.verdicts[name] = Verdict(verdict.text, fails=verdict.starts_in != "nowhere")

    def modules(
        self, name: str, call: Call, gradients: list[Comparison], runs: tuple[Any, Any] | None = None
    ) -> tuple[list[Comparison], Any]:
        """The module comparisons of candidate ``name`` and the verdict (see ``localize``); ``runs``: the
        two sides' records (``_runs``) when the caller has them already."""
        if self.torch_problem is not None:
            return own.not_compared(name, own.blame(name, self.torch_problem))
        runs = runs or self.early.use(call)
        torch_runs, jax_runs = runs or (self._runs(call, torch=True), self._runs(call, torch=False))
        self.caveats = ""
        if isinstance(torch_runs, str) or isinstance(jax_runs, str):
            problem = torch_runs if isinstance(torch_runs, str) else jax_runs
            return own.not_compared(name, f"the module by module comparison did not happen: {problem}")
        from crosscheck._workloads.port.sides.torch_side import left_out_note

        self.caveats = localize.rerun_note(torch_runs, jax_runs) + left_out_note(self.workload.port.torch)
        self.caveats += self.torch_wrote
        self.uncaptured = next((r.note for r in jax_runs.main if r.note), "")  # module by module left out
        self.caveats += f"; {self.uncaptured}" if self.uncaptured else ""
        self.wide.update(wide.sides(torch_runs, jax_runs, name, self.dtype))
        wide.merge(self.inner, self.wide, self.dtype)
        out, verdict = self._compare(name, torch_runs, jax_runs, gradients)
        return out, float32_constants.named(verdict, self.workload, self.dtype, out, torch_runs.main)

    def _compare(
        self, name: str, torch_runs: Any, jax_runs: Any, gradients: list[Comparison]
    ) -> tuple[list, Any]:
        prepared = self.workload.prepared
        j_main = {r.name: r for r in jax_runs.main}
        listed = bool(prepared.jax_side.listed)
        if listed:  # named by the user in PyTorch's names: paired as named
            paired = {r.name: r.name for r in torch_runs.main if r.name in j_main}
        else:
            paired = localize.pairs([r.name for r in torch_runs.main], list(j_main), module_pairs(prepared))
        coarse = self._float32_losses()
        common: dict[str, Any] = {
            "dtype": self.dtype,
            "channels_last": any(leaf.layout == "..IO" for leaf in prepared.jax_side.leaves),
            "backend": name,
            "reference": "torch",
            "precision": "float32" if coarse else None,
            "keep": self.plot,
        }
        common["missing"] = "; ".join(p for p in (torch_runs.problem, jax_runs.problem) if p)
        common["device"] = device = self.device
        out, outputs, inputs, firsts = _each_module(torch_runs, jax_runs, paired, common)
        # modules cut differently
        out, edges = boundaries.apart(out, outputs, firsts, gradients, forward=self.forward)
        top = type(self.workload.port.torch).__name__
        verdict = (
            listed_origin(torch_runs.main, paired, outputs, top)
            if listed
            else forward_origin(torch_runs.main, paired, outputs, inputs, top)
        )
        if verdict is None:
            verdict = self._gradient_verdict(torch_runs.main, paired, gradients, top)
        if "" in paired:  # the output's shapes, when they differ, in the verdict's words
            top_note = localize.shape_note(
                next(r for r in torch_runs.main if r.name == ""),
                j_main.get(paired[""]),
                common["channels_last"],
            )
            verdict = dataclasses.replace(verdict, text=verdict.text + top_note)
        verdict = own.losses_differ(self._nowhere(verdict, len(out), gradients), self.inner.findings, name)
        verdict = boundaries.verdict(verdict, edges, forward=self.forward)
        if coarse:
            starts = _float32_start(torch_runs, jax_runs, paired, outputs, common)
            verdict = dataclasses.replace(verdict, text=verdict.text + _float32_note(coarse, starts))
        if device is not None and device.unit is not None:  # what the device's arithmetic hides
            verdict = dataclasses.replace(verdict, text=f"{verdict.text}; {device.hides()}")
        return out, self._pinned(verdict, torch_runs.main, jax_runs.main)

    def _nowhere(self, verdict: Any, outputs: int, gradients: list[Comparison]) -> Any:
        """The words of a verdict that found no difference: what was compared."""
        listed = self.workload.prepared.jax_side.listed
        if verdict.starts_in == "nowhere" and listed:
            text = f"every listed module's output ({', '.join(listed)}), the model's "
            return Origin("nowhere", None, None, (), text + "output " + _agree(gradients, self.forward))
        if verdict.starts_in == "nowhere" and outputs == 1 and self.uncaptured:  # said in the caveats
            return Origin("nowhere", None, None, (), f"the output {_agree(gradients, self.forward)}")
        if verdict.starts_in == "nowhere" and outputs == 1:  # Equinox, a function: no submodule calls
            text = f"the output {_agree(gradients, self.forward)} (only the output is compared: module by "
            text += "module needs Flax linen or nnx, or the modules listed in `jax_intermediates`)"
            return Origin("nowhere", None, None, (), text)
        return verdict

    def _pinned(self, verdict: Any, torch_records: Sequence[Any], jax_records: Sequence[Any]) -> Any:
        """In a float64 case, a module whose output comes back in float32 is named: the port's fails the
        run (it does not compute what the check asks), the original's is a note."""
        if self.dtype != "float64":
            return verdict
        mine = next((r for r in jax_records if r.narrow), None)
        theirs = next((r for r in torch_records if r.narrow), None)
        if theirs is not None:
            note = f"; the original's `{theirs.name or '(model)'}` ({theirs.module_type}) returns float32 "
            verdict = dataclasses.replace(verdict, text=verdict.text + note + "in a float64 check")
        if mine is None:
            return verdict
        text = (
            f"`{mine.name or '(model)'}` ({mine.module_type}) computes in float32 in a float64 check (its "
            "output is float32, so the port's float64 gradients carry float32's rounding from there): build "
            "it in the case's dtype (Flax: `dtype=None` follows the inputs in most modules; `nnx.Embed` "
            "keeps the dtype its table had when it was built: build it with `param_dtype=jnp.float64` "
            "under x64, or look its table up yourself, `jnp.take(embed.embedding[...], ids, axis=0)`), or "
            f"check in float32; {verdict.text}"
        )
        return Origin("forward", mine.name, mine.name, (), text)

    def _float32_losses(self) -> list[str]:
        """The implementations whose own float64 loss has float32 steps (found by the oracle's noise
        probe, ``oracle.precision``) in a float64 case: their module outputs carry float32's rounding."""
        if self.dtype != "float64":
            return []
        findings = self.inner.findings
        functions = [findings.anchor.function] if findings.anchor is not None else []
        functions += [r.own.function for r in findings.records.values() if isinstance(r.own, Differences)]
        found = {f.owner for f in functions if f.precision is not None and f.precision.float32}
        found |= {side for side, steps in self.inner.own.float32_steps.items() if steps}  # no oracle ran
        return sorted(k for k in found if k is not None)

    def _gradient_verdict(
        self, order: Sequence[Any], paired: dict, gradients: list[Comparison], top: str
    ) -> Any:
        owners = {p.rsplit(".", 1)[0] if "." in p else "" for p in self.workload.prepared.parameters}
        differs = {
            (c.parameter or "").rsplit(".", 1)[0]
            for c in gradients
            if not c.passed and c.status == "mismatch"
        }
        if not differs:
            agree = _agree(gradients, self.forward)
            return Origin("nowhere", None, None, (), f"every module's output {agree}")
        return gradient_origin(order, paired, differs, owners, top)

    def _runs(self, call: Call, *, torch: bool, main: Any = None) -> Any:
        """One side's module records at the case's dtype and in the other: a ``str`` when the call at the
        case's dtype failed; a failed re-run leaves ``other`` empty and says why (``Runs.problem``).
        ``main``: the records at the case's dtype, captured already (then only the re-run is made)."""
        runs: list[Any] = [] if main is None else [main]
        said = ""
        for dtype in (self.dtype, OTHER_DTYPE[self.dtype])[len(runs) :]:
            got, said = capture.side(
                call, self.workload, self.point, torch=torch, dtype=dtype, case=self.dtype
            )
            if got.error is not None:  # the re-run only measures rounding: without it the other side's does
                problem = f"{'PyTorch' if torch else 'JAX'} forward in {dtype}: {got.error}"
                return (
                    localize.Runs(runs[0], (), f"{said}; {problem}" if said else problem) if runs else problem
                )
            runs.append(got.value)
        return localize.Runs(runs[0], runs[1], home=said)


def _each_module(torch_runs: Any, jax_runs: Any, paired: dict, common: dict) -> tuple[list, dict, dict, dict]:
    """Each paired module's output comparison, whether its output and its input agree (module ->
    ``localize.outcome``), and its first output on each side (for ``boundaries``)."""
    t_other = {r.name: r for r in torch_runs.other}
    j_main, j_other = {r.name: r for r in jax_runs.main}, {r.name: r for r in jax_runs.other}
    out: list[Comparison] = []
    outputs: dict[str, bool | None] = {}
    inputs: dict[str, bool | None] = {}
    firsts: dict[str, Any] = {}
    for r in torch_runs.main:
        if r.name not in paired:
            continue
        sides = (r, t_other.get(r.name)), (j_main[paired[r.name]], j_other.get(paired[r.name]))
        label = localize.output_label(r.name)
        c = localize.compare_arrays(label, *(_arrays(s, "outputs") for s in sides), **common)
        out.append(dataclasses.replace(c, module=r.name))
        both = r.outputs and sides[1][0].outputs
        firsts[r.name] = (r.outputs[0], sides[1][0].outputs[0]) if both else None
        outputs[r.name] = localize.outcome(c)
        if r.inputs and sides[1][0].inputs:  # the first input: the data (masks and caches may differ)
            ci = localize.compare_arrays("input", *(_arrays(s, "inputs", 1) for s in sides), **common)
            inputs[r.name] = localize.outcome(ci)
    return out, outputs, inputs, firsts


def _float32_start(torch_runs: Any, jax_runs: Any, paired: dict, outputs: dict, common: dict) -> str | None:
    """The first module whose output agrees within float32's rounding but not within float64's."""
    t_other = {r.name: r for r in torch_runs.other}
    j_main, j_other = {r.name: r for r in jax_runs.main}, {r.name: r for r in jax_runs.other}
    for r in torch_runs.main:
        if r.name in paired and outputs.get(r.name):
            sides = (r, t_other.get(r.name)), (j_main[paired[r.name]], j_other.get(paired[r.name]))
            label = localize.output_label(r.name)
            exact = {**common, "precision": None}
            if not localize.compare_arrays(label, *(_arrays(s, "outputs") for s in sides), **exact).passed:
                return r.name
    return None


def _float32_note(coarse: list[str], starts: str | None) -> str:
    """What the module comparison of a float64 case with float32 steps says about them."""
    who = " and ".join(f"`{k}`" for k in coarse)
    where = (
        f"; the first module whose float64 outputs differ by float32's rounding, not float64's, is "
        f"`{starts or '(model)'}`: a float32 step is in it or just before it"
        if starts is not None
        else ""
    )
    return (
        f" (the float64 loss of {who} computes in float32 somewhere: module outputs compared within "
        f"float32's rounding{where})"
    )


def _agree(gradients: list[Comparison], forward: bool = False) -> str:
    """What agrees besides the outputs: every gradient, unless a gradient no comparison judged (missing,
    empty, unjudgeable), which does not "agree"; in a forward check, none was computed (said)."""
    if forward:
        return f"agrees ({FORWARD_ONLY})"
    if any(c.status not in ("ok", "mismatch") for c in gradients):
        return "agrees; not every gradient was checked (see its comparisons)"
    return "and every gradient agree"


def compared(verdict: Any, name: str, reference: str, *, forward: bool = False) -> str:
    """The comparisons behind a port's verdict where it judges the gradients too (they are compared with
    the run's reference, which need not be PyTorch); a verdict on the forward pass alone says which
    comparison it is ("the forward pass differs first at ...": the port's module outputs against
    PyTorch's), and one that could not compare says why. A forward check compares module outputs only."""
    if verdict.starts_in in ("unknown", "forward"):
        return ""
    if forward:
        return f" (`{name}` vs `torch`: module outputs)"
    if reference == "torch":
        return f" (`{name}` vs `torch`: module outputs and gradients)"
    return f" (`{name}` vs `torch`: module outputs; `{name}` vs `{reference}`: gradients)"


def _arrays(side: tuple[Any, Any], attr: str, limit: int | None = None) -> tuple[Any, Any]:
    """A record's arrays (``inputs`` or ``outputs``) and its re-run's (empty when there is none)."""
    main, other = side
    return getattr(main, attr)[:limit], (getattr(other, attr) if other is not None else ())[:limit]
