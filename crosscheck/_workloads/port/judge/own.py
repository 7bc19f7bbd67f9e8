"""The PyTorch side's own proof, before anything is judged against it: its forward leaves its
parameters and buffers as they were, and gives the same loss on a second call (``torch_side.proof``).
A forward that writes to its input in place is judged (each call has its own copy of its inputs) and
named in a note (``wrote``).

A PyTorch module that fails it is the PyTorch side's failure, named as such: the ``torch`` backend
fails with what the module did, and the port's module comparison says it did not happen because of
the PyTorch side, never that the JAX port differs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from crosscheck._compare.record import Comparison
from crosscheck._report.report import Verdict
from crosscheck._workloads.port.declare.build import Prepared, torch_implementation
from crosscheck._workloads.port.judge.verdict import Located, Origin
from crosscheck._workloads.protocol import Call, Point

#: How ``describe`` starts the one line of a ``torch_side.Misbehaved``.
PREFIX = "Misbehaved: "


@dataclasses.dataclass(frozen=True)
class Proof:
    """What the PyTorch side's own proof found (``prove``): what the module did wrong at the point, in
    one line (None: nothing, or not proven yet), and the note on the inputs it writes to in place (""
    when none, ``wrote``)."""

    problem: str | None = None
    wrote: str = ""


def prove(prepared: Prepared, point: Point, call: Call) -> Proof:
    """The PyTorch module's proof at the point: its problem is None when its forward fails outright too
    (its backend's own calls report that, as for any backend)."""
    from crosscheck._workloads.port.sides import torch_side

    loss = torch_implementation(prepared)
    out = call(torch_side.proof, loss, dict(point.params), dict(point.inputs), prepared.torch_side)
    if out.error is None:
        return Proof(None, wrote(out.value or []) + reordered(getattr(prepared.torch_side, "reordered", 0)))
    return Proof(out.error.removeprefix(PREFIX) if out.error.startswith(PREFIX) else None, "")


def wrote(names: list[str]) -> str:
    """The note on the inputs the PyTorch forward writes to in place ("" when none)."""
    if not names:
        return ""
    shown = ", ".join(f"`{n}`" for n in names)
    return (
        f"; the PyTorch module writes to its input {shown} in place during its forward: each call was "
        "given its own copy of the inputs, so the port is judged on the same inputs"
    )


def reordered(count: int) -> str:
    """The note on the PyTorch side's nondeterminism on a GPU ("" when its calls agreed bit for bit):
    ``count`` proofs whose two calls differed within its own rounding (``torch_side.proof``)."""
    if not count:
        return ""
    from crosscheck._workloads.port.sides.torch_device import DETERMINISTIC

    return (
        f"; nondeterminism: the PyTorch side's two calls at the point differed within its own rounding "
        f"({count} time{'s' if count > 1 else ''}: its sums made in another order each call on the GPU, "
        f"not a state it keeps); to check bit for bit, use {DETERMINISTIC}"
    )


def not_compared(name: str, text: str) -> Located:
    """Candidate ``name``'s module comparison that did not happen (``text`` says why), failed, and the
    verdict that says so."""
    failed = Comparison(
        backend=name,
        reference="torch",
        passed=False,
        status="invalid",
        total=1,
        parameter="(modules)",
        message=text,
    )
    return Located([failed], Origin("unknown", None, None, (), text))


def blame(name: str, problem: str) -> str:
    """Why candidate ``name``'s modules were not compared: the PyTorch side failed its proof."""
    return (
        f"the module by module comparison did not happen: the PyTorch side failed its own check ({problem}); "
        f"`{name}` is not judged against it"
    )


def candidates(pairs: list[tuple[str, Any]], torches: set[int], problem: str | None) -> list[tuple[str, Any]]:
    """The candidates whose loss may anchor "same function", the PyTorch side first: not one that failed
    its proof. The original defines the function a port must compute: between two losses the oracle
    finds equally clean (both with float32 steps, or neither), the anchor is the original's, never the
    port's by the order the backends were named in. Otherwise the port's own rounding (its measured
    float32 noise, its two-roundings permit) would be the yardstick the original is failed against: a
    permit that widens the port's own tolerance would make the original the culprit."""
    kept = [(n, b) for n, b in pairs if problem is None or id(b) not in torches]
    return sorted(kept, key=lambda pair: id(pair[1]) not in torches)


def original(
    kept: list[tuple[str, Any]], torches: set[int], functions: dict[str, Any]
) -> tuple[str, Any] | None:
    """The PyTorch side among the ``kept`` candidates whose own float64 loss the oracle can use
    (``functions``: name -> ``Function`` or ``Skip``), None without one: the anchor of "same function"
    whether or not its loss keeps float32 steps. The model judge prefers a clean loss (no float32
    steps) as anchor; for a port that is the wrong rule where only the port's loss is clean (Hugging
    Face's PyTorch upcasts, a JAX port that does not): a port with a bug then defines the function,
    and the original is blamed for it ("`torch` disagrees with `numpy-fd`"). The original's float32
    steps widen the anchor's error bars (said in its notes); they do not move the blame."""
    from crosscheck._workloads.model.oracle.function import Function

    return next(
        ((n, b) for n, b in kept if id(b) in torches and isinstance(functions.get(n), Function)), None
    )


def losses_differ(verdict: Origin, findings: Any, name: str) -> Origin:
    """A verdict that found no module output and no gradient differing, for candidate ``name`` whose
    float64 loss differs from the anchor's: the port computes another function, within what its
    rounding hides in the comparisons, and fails (the words of the loss check)."""
    record = findings.records.get(name)
    loss = getattr(record, "loss", None)
    if verdict.starts_in != "nowhere" or loss is None or loss["passed"]:
        return verdict
    text = (
        f"the float64 losses differ: `{name}`'s {loss['value']:.12g} vs {loss['reference']:.12g} of "
        f"{loss['against']} (difference {loss['difference']:.3g}, tolerance {loss['tolerance']:.3g}), "
        "though no module output or gradient differs beyond its rounding: the port computes another "
        "function, by less than its float32 rounding shows"
    )
    return Origin("loss", None, None, (), text)


def unanchored(findings: Any, name: str, found: list[Comparison]) -> tuple[list[Comparison], Any]:
    """The original ``name``'s comparisons, and what it was judged against where that is not its own
    loss: ``(the anchor's owner, its failing parameters, why its own loss was not differenced)``, or None.

    Where the original's own float64 loss cannot be differenced (its loss comes back in float32, its
    differences failed), the anchor of "same function" is the port's own loss, and the original's
    gradient is judged against the port's function. A difference there is between the two, not the
    original's fault by construction: its comparisons name the port as what they were compared with
    (``reference``), and ``said`` words the blame from what else is known."""
    anchor = findings.anchor
    owner = anchor.function.owner if anchor is not None else None
    failing = [c for c in found if c.question == "same function" and c.status == "mismatch" and not c.passed]
    if owner is None or owner == name or not failing:
        return found, None
    own = findings.records[name].own if name in findings.records else None
    why = getattr(own, "reason", "") or "its own loss was not differenced"
    relabelled = [dataclasses.replace(c, reference=owner) if c in failing else c for c in found]
    return relabelled, (owner, [f"`{c.parameter}`" for c in failing], why)


def said(name: str, found: tuple[str, list[str], str], port_differs: bool) -> str:
    """The original ``name``'s verdict where its gradient differs from the port's function (``found``:
    ``unanchored``'s); ``port_differs``: the port's own verdict found its forward pass or loss differing."""
    owner, failing, why = found
    shown = ", ".join(failing[:SHOWN]) + (f" and {len(failing) - SHOWN} more" if len(failing) > SHOWN else "")
    text = (
        f"its gradient differs from differences of `{owner}`'s own float64 loss at {shown}, the only "
        f"function it could be judged against ({why}); "
    )
    if port_differs:
        return text + (
            f"`{owner}` computes another function (its verdict), so the difference is the port's, not "
            f"evidence against `{name}`"
        )
    return text + (
        f"`{owner}`'s forward pass agrees with `{name}`'s, so which of the two is wrong is unknown: "
        f"`{name}`'s gradient, or a function `{owner}` computes apart from its output"
    )


def originals(unanchored: dict[str, Any], verdicts: dict[str, Verdict]) -> dict[str, Verdict]:
    """The verdicts of the originals judged against the port's loss (``unanchored``, by name), from the
    ports' ``verdicts``: a note where a port's verdict fails (the difference is the port's), else a
    failure that says which of the two is wrong is unknown."""
    port_differs = any(v.fails for v in verdicts.values())
    return {
        n: Verdict(said(n, found, port_differs), fails=not port_differs)
        for n, found in unanchored.items()
        if found is not None
    }


#: At most this many parameters are named in ``said``.
SHOWN = 3
