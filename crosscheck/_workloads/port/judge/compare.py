"""The port judge's comparison of one candidate's modules: both sides' module records (``Sides``, from
their captures), each paired module's output and first input compared within both sides' measured
rounding (``localize.compare_arrays``), the modules the two cut apart differently marked
(``boundaries``), and, in a float64 case whose float64 loss keeps float32 steps, the first module whose
outputs differ by float32's rounding, not float64's: a ``Compared``, which ``locate`` reads for where the
difference starts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from crosscheck._compare.device import Arithmetic
from crosscheck._compare.record import Comparison
from crosscheck._workloads.model.findings import Findings
from crosscheck._workloads.model.oracle.function import Differences
from crosscheck._workloads.port.declare import layout
from crosscheck._workloads.port.declare.build import Prepared, output_layouts
from crosscheck._workloads.port.judge import boundaries, caveats, localize
from crosscheck._workloads.port.judge.by_design import Part
from crosscheck._workloads.port.judge.localize import Runs
from crosscheck._workloads.port.judge.pairs import module_pairs


@dataclasses.dataclass(frozen=True)
class Sides:
    """One candidate's module records, PyTorch's (``torch``) and the port's (``jax``), each at the case's
    dtype and re-run in the other; ``caveats``: what the verdict says of how they were made (a side not
    re-run, modules left out, inputs written in place, submodule calls not captured); ``uncaptured``:
    why the port's submodule calls were not captured ("": they were)."""

    torch: Runs
    jax: Runs
    caveats: str = ""
    uncaptured: str = ""


def sides(torch_runs: Runs, jax_runs: Runs, original: Any, wrote: str) -> Sides:
    """Both sides' records, with the caveats of the PyTorch model ``original`` (its modules left out) and
    of its proof (``wrote``: the inputs it writes to in place)."""
    from crosscheck._workloads.port.sides.torch_side import left_out_note

    said = caveats.rerun_note(torch_runs, jax_runs) + left_out_note(original) + wrote
    uncaptured = next((r.note for r in jax_runs.main if r.note), "")  # module by module left out
    said += f"; {uncaptured}" if uncaptured else ""
    return Sides(torch_runs, jax_runs, said, uncaptured)


@dataclasses.dataclass(frozen=True)
class Compared:
    """A candidate's module comparisons and what ``locate`` reads of them.

    ``comparisons``: one per paired module, edges marked; ``paired``: PyTorch record -> the port's;
    ``outputs`` and ``inputs``: whether each module's output and first input agree (None: not judged);
    ``edges``: the modules the two cut apart differently; ``listed``: paired as the user listed them
    (``jax_intermediates``); ``channels_last``: the port's layout; ``coarse``: the implementations whose
    float64 loss keeps float32 steps (compared within float32's rounding), and ``float32_start`` the
    first module whose outputs differ by float32's rounding, not float64's; ``device``: where the port
    computes (its arithmetic), when on an accelerator, and ``reference_device`` where the PyTorch side
    does (its TF32 products and convolutions on a GPU); ``by_design``: the parts the original computes
    in float32 by design (every module output then compared within float32's rounding)."""

    sides: Sides
    comparisons: list[Comparison]
    paired: dict[str, str]
    outputs: dict[str, bool | None]
    inputs: dict[str, bool | None]
    edges: list[str]
    listed: bool
    channels_last: bool
    coarse: list[str]
    float32_start: str | None
    device: Arithmetic | None
    by_design: tuple[Part, ...] = ()
    reference_device: Arithmetic | None = None


def compare(
    sides: Sides,
    gradients: list[Comparison],
    prepared: Prepared,
    *,
    name: str,
    dtype: str,
    coarse: list[str],
    device: Arithmetic | None,
    keep: bool,
    forward: bool,
    by_design: tuple[Part, ...] = (),
    reference_device: Arithmetic | None = None,
) -> Compared:
    """Candidate ``name``'s modules compared (see the module docstring); ``gradients``: its gradient
    comparisons (none in a forward check), which decide whether edges are marked; ``keep``: each
    comparison keeps its per-entry arrays, for a plot."""
    torch_runs, jax_runs = sides.torch, sides.jax
    j_main = {r.name: r for r in jax_runs.main}
    listed = bool(prepared.jax_side.listed)
    if listed:  # named by the user in PyTorch's names: paired as named
        paired = {r.name: r.name for r in torch_runs.main if r.name in j_main}
    else:
        paired = localize.pairs([r.name for r in torch_runs.main], list(j_main), module_pairs(prepared))
    common: dict[str, Any] = {
        "dtype": dtype,
        "channels_last": any(leaf.layout == "..IO" for leaf in prepared.jax_side.leaves),
        "backend": name,
        "reference": "torch",
        "precision": "float32" if coarse or by_design else None,
        "keep": keep,
    }
    common["missing"] = "; ".join(p for p in (torch_runs.problem, jax_runs.problem) if p)
    common["device"], common["reference_device"] = device, reference_device
    # the layouts proven by the values, by shapes (``layout.read``), from the output's found for the loss
    common["memo"] = {(read.source, read.shape): read for read in layout.known(prepared) or () if read}
    out, outputs, inputs, firsts = each_module(torch_runs, jax_runs, paired, common)
    out, edges = boundaries.apart(out, outputs, firsts, gradients, forward=forward)  # modules cut differently
    starts = _float32_start(torch_runs, jax_runs, paired, outputs, common) if coarse else None
    if prepared.port.loss is not None:  # a loss of the user's sees each side's output as it is
        sides = dataclasses.replace(sides, caveats=sides.caveats + _custom_loss_note(prepared))
    channels_last = common["channels_last"]
    return Compared(
        sides,
        out,
        paired,
        outputs,
        inputs,
        edges,
        listed,
        channels_last,
        coarse,
        starts,
        device,
        tuple(by_design),
        reference_device,
    )


def each_module(
    torch_runs: Runs, jax_runs: Runs, paired: dict, common: dict
) -> tuple[list, dict, dict, dict]:
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
        arrays = (_arrays(s, "outputs") for s in sides)
        c = localize.compare_arrays(label, *arrays, **common, module=r.name)
        out.append(dataclasses.replace(c, module=r.name))
        both = r.outputs and sides[1][0].outputs
        firsts[r.name] = (r.outputs[0], sides[1][0].outputs[0]) if both else None
        outputs[r.name] = localize.outcome(c)
        if r.inputs and sides[1][0].inputs:  # the first input: the data (masks and caches may differ)
            ci = localize.compare_arrays("input", *(_arrays(s, "inputs", 1) for s in sides), **common)
            inputs[r.name] = localize.outcome(ci)
    return out, outputs, inputs, firsts


class Outcomes:
    """Whether each paired module's output and first input agree, as ``each_module`` finds them
    (``localize.outcome``; None: not judged, or no input on a side), each compared only when first
    asked (``output``, ``input``), for a reader that needs a few: the backward verdict, which stops at
    the first module it names. A comparison whose arrays (each side's run and re-run) are bit for bit
    those of one already made, a module's input cotangent being the output cotangent of the module
    that made it, takes that one's outcome: the same arrays, compared alike, give the same outcome.
    ``paired``: PyTorch record -> the port's; ``made``: the comparisons made."""

    def __init__(self, torch_runs: Runs, jax_runs: Runs, paired: dict, common: dict) -> None:
        self._torch = {r.name: r for r in torch_runs.main}
        self._t_other = {r.name: r for r in torch_runs.other}
        self._jax = {r.name: r for r in jax_runs.main}
        self._j_other = {r.name: r for r in jax_runs.other}
        self.paired, self._common = paired, common
        self._found: dict[tuple[str, str], bool | None] = {}
        self._seen: list[tuple[tuple, bool | None]] = []
        self.made = 0

    def output(self, name: str) -> bool | None:
        """Whether module ``name``'s output agrees (None: not judged; not paired)."""
        return self._outcome(name, "outputs")

    def input(self, name: str) -> bool | None:
        """Whether module ``name``'s first input agrees (None: not judged, or not on both sides)."""
        return self._outcome(name, "inputs")

    def _outcome(self, name: str, attr: str) -> bool | None:
        if (name, attr) not in self._found:
            self._found[name, attr] = self._compared(name, attr)
        return self._found[name, attr]

    def _compared(self, name: str, attr: str) -> bool | None:
        if name not in self.paired or name not in self._torch:
            return None
        j = self.paired[name]
        sides = (self._torch[name], self._t_other.get(name)), (self._jax[j], self._j_other.get(j))
        if attr == "inputs" and not (sides[0][0].inputs and sides[1][0].inputs):
            return None
        limit = 1 if attr == "inputs" else None  # the first input: the data (masks and caches may differ)
        arrays = tuple(_arrays(s, attr, limit) for s in sides)
        key = tuple(tuple(a) for pair in arrays for a in pair)
        for seen, found in self._seen:
            if _same(seen, key):
                return found
        self.made += 1
        if attr == "inputs":
            c = localize.compare_arrays("input", *arrays, **self._common)
        else:
            c = localize.compare_arrays(localize.output_label(name), *arrays, **self._common, module=name)
        found = localize.outcome(c)
        self._seen.append((key, found))
        return found


def _same(a: tuple, b: tuple) -> bool:
    """Whether two comparisons' arrays are the same, bit for bit (their dtypes and shapes too)."""
    if [len(x) for x in a] != [len(x) for x in b]:
        return False
    pairs = [
        (np.asarray(x), np.asarray(y))
        for xs, ys in zip(a, b, strict=True)
        for x, y in zip(xs, ys, strict=True)
    ]
    if any(x.dtype != y.dtype or x.shape != y.shape for x, y in pairs):
        return False
    return all(np.array_equal(x, y) for x, y in pairs)


def _custom_loss_note(prepared: Prepared) -> str:
    """The verdict's note where the port's output (what ``jax_call`` returns) is PyTorch's in another
    layout and the loss is the user's ("" otherwise, or where the values cannot tell the layout): its
    two sides' losses differ unless it reads both layouts alike."""
    try:
        found = output_layouts(prepared)
    except ValueError:
        return ""
    for k, read in enumerate(found):
        if read is not None:
            return (
                f"; the port's output is PyTorch's in another layout (array {k}: {read.words()}), and a "
                "custom `loss=` is given each side's output as it is: the two losses, and their "
                "gradients, differ unless it reads both layouts alike; return PyTorch's layout from "
                "`jax_call`, or leave `loss=` out (the default projects one array drawn in PyTorch's "
                "layout onto both)"
            )
    return ""


def _float32_start(torch_runs: Runs, jax_runs: Runs, paired: dict, outputs: dict, common: dict) -> str | None:
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


def float32_losses(findings: Findings, steps: dict[str, bool], dtype: str) -> list[str]:
    """The implementations whose own float64 loss has float32 steps (found by the oracle's noise probe,
    ``oracle.precision``, or a side's own: ``steps``) in a float64 case: their module outputs carry
    float32's rounding."""
    if dtype != "float64":
        return []
    functions = [findings.anchor.function] if findings.anchor is not None else []
    functions += [r.own.function for r in findings.records.values() if isinstance(r.own, Differences)]
    found = {f.owner for f in functions if f.precision is not None and f.precision.float32}
    found |= {side for side, kept in steps.items() if kept}  # no oracle ran
    return sorted(k for k in found if k is not None)


def _arrays(side: tuple[Any, Any], attr: str, limit: int | None = None) -> tuple[Any, Any]:
    """A record's arrays (``inputs`` or ``outputs``) and its re-run's (empty when there is none)."""
    main, other = side
    return getattr(main, attr)[:limit], (getattr(other, attr) if other is not None else ())[:limit]
