"""Where a port candidate's difference starts, from its module comparisons (``compare.Compared``): the
first module whose output differs in the forward pass (``verdict.forward_origin``; the user's listed
intermediates: ``listed_origin``), else the last whose parameters' gradients differ in the backward pass
(``gradient_origin``), else nowhere, in words that say what was compared. Then what qualifies it, in
order: the output's shapes, the float64 losses (``own.losses_differ``), modules cut apart differently
(``boundaries``), float32 steps in a float64 loss, what the device's arithmetic hides, a module that
computes in float32 in a float64 check (no failure where it mirrors the original's), and, among the
caveats, the parts the original computes in float32 by design (a module returning float32, constants
kept in float32), judged at float32's rounding (``by_design``). The result, ``verdict.Located``, is what
``say`` words.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from crosscheck._compare.record import Comparison
from crosscheck._report.report import FORWARD_ONLY
from crosscheck._workloads.model.findings import Findings
from crosscheck._workloads.port.judge import backward, boundaries, by_design, localize, own
from crosscheck._workloads.port.judge.compare import Compared
from crosscheck._workloads.port.judge.verdict import (
    AGREES,
    Located,
    Origin,
    forward_origin,
    gradient_origin,
    listed_origin,
)
from crosscheck._workloads.port.judge.view import PortView


def locate(
    compared: Compared,
    gradients: list[Comparison],
    view: PortView,
    findings: Findings,
    *,
    name: str,
    dtype: str,
    forward: bool,
    chains: backward.Chains | None = None,
) -> Located:
    """Candidate ``name``'s comparisons and where its difference starts (see the module docstring);
    ``gradients``: its gradient comparisons (none in a forward check); ``findings``: the model judge's
    (its float64 losses); ``chains``: both sides' cotangents, captured when the backward pass differs
    (``backward``: they name the module whose backward differs)."""
    order, jax_main = compared.sides.torch.main, compared.sides.jax.main
    paired, top = compared.paired, type(view.port.torch).__name__
    found = (
        listed_origin(order, paired, compared.outputs, top)
        if compared.listed
        else forward_origin(order, paired, compared.outputs, compared.inputs, top)
    )
    if found is None:
        found = _backward(order, paired, gradients, view, top, forward=forward)
    if chains is not None and found.starts_in == "gradient":
        found = backward.origin(chains, found, compared, _differs(gradients), name=name, top=top, dtype=dtype)
    if "" in paired:  # the output's shapes, when they differ, in the verdict's words
        j_main = {r.name: r for r in jax_main}
        torch_top = next(r for r in order if r.name == "")
        top_note = localize.shape_note(torch_top, j_main.get(paired[""]), compared.channels_last)
        found = dataclasses.replace(found, text=found.text + top_note)
    found = _nowhere(found, compared, gradients, view.prepared.jax_side.listed, forward=forward)
    found = own.losses_differ(found, findings, name)
    found = boundaries.verdict(found, compared.edges, forward=forward)
    if compared.coarse:
        found = dataclasses.replace(found, text=found.text + _float32_note(compared))
    for device in (compared.device, compared.reference_device):  # what each side's device hides
        if device is not None and device.unit is not None:
            found = dataclasses.replace(found, text=f"{found.text}; {device.hides()}")
    mirrored = by_design.mirrored(compared.by_design, compared.paired)
    found = _pinned(found, [r for r in jax_main if r.name not in mirrored], dtype)
    return Located(compared.comparisons, found, compared.sides.caveats + by_design.said(compared.by_design))


def _backward(
    order: Sequence[Any],
    paired: dict,
    gradients: list[Comparison],
    view: PortView,
    top: str,
    *,
    forward: bool,
) -> Origin:
    """Where the backward pass differs first, when every module output agrees: the last module, in
    forward order, whose parameters' gradients differ; nowhere when none does."""
    owners = {p.rsplit(".", 1)[0] if "." in p else "" for p in view.prepared.parameters}
    differs = _differs(gradients)
    if not differs:
        return Origin("nowhere", None, None, (), f"every module's output {_agree(gradients, forward)}")
    return gradient_origin(order, paired, differs, owners, top)


def _differs(gradients: list[Comparison]) -> set[str]:
    """The modules whose own parameters' gradients differ."""
    return {
        (c.parameter or "").rsplit(".", 1)[0] for c in gradients if not c.passed and c.status == "mismatch"
    }


def _nowhere(
    found: Origin, compared: Compared, gradients: list[Comparison], listed: Sequence[str], *, forward: bool
) -> Origin:
    """The words of an origin that found no difference, or none in the forward pass: what was compared."""
    outputs = len(compared.comparisons)
    if found.starts_in == "gradient" and found.text.startswith(AGREES) and (listed or outputs == 1):
        what = (
            f"every listed module's output ({', '.join(listed)}) and the model's output within its rounding; "
            "the other modules' outputs are not captured"
            if listed
            else "the output within its rounding; no module's output is captured"
        )
        return dataclasses.replace(found, text=f"forward agrees ({what}){found.text[len(AGREES) :]}")
    if found.starts_in == "nowhere" and listed:
        text = f"every listed module's output ({', '.join(listed)}), the model's "
        return Origin("nowhere", None, None, (), text + "output " + _agree(gradients, forward))
    if found.starts_in == "nowhere" and outputs == 1 and compared.sides.uncaptured:  # said in the caveats
        return Origin("nowhere", None, None, (), f"the output {_agree(gradients, forward)}")
    if found.starts_in == "nowhere" and outputs == 1:  # Equinox, a function: no submodule calls
        text = f"the output {_agree(gradients, forward)} (only the output is compared: module by "
        text += "module needs Flax linen or nnx, or the modules listed in `jax_intermediates`)"
        return Origin("nowhere", None, None, (), text)
    return found


def _pinned(found: Origin, jax_records: Sequence[Any], dtype: str) -> Origin:
    """In a float64 case, a module of the port whose output comes back in float32 fails the run (it does
    not compute what the check asks), unless it mirrors the original's (``jax_records`` leaves those
    out); the original's is a part computed in float32 by design (``by_design`` says it)."""
    if dtype != "float64":
        return found
    mine = next((r for r in jax_records if r.narrow), None)
    if mine is None:
        return found
    text = (
        f"`{mine.name or '(model)'}` ({mine.module_type}) computes in float32 in a float64 check (its "
        "output is float32, so the port's float64 gradients carry float32's rounding from there): build "
        "it in the case's dtype (Flax: `dtype=None` follows the inputs in most modules; `nnx.Embed` "
        "keeps the dtype its table had when it was built: build it with `param_dtype=jnp.float64` "
        "under x64, or look its table up yourself, `jnp.take(embed.embedding[...], ids, axis=0)`), or "
        f"check in float32; {found.text}"
    )
    return Origin("forward", mine.name, mine.name, (), text)


def _float32_note(compared: Compared) -> str:
    """What the module comparison of a float64 case with float32 steps says about them."""
    who = " and ".join(f"`{k}`" for k in compared.coarse)
    starts = compared.float32_start
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
