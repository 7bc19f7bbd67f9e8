"""A workload's verdict on each candidate: one line, a clause per question, each naming the comparison
that answered it (``candidate vs reference: what it was compared with``) or saying why nothing did.

The two questions (``judge``): *same function?* (the candidate's gradient against the differences of
the NumPy reference or of the first implementation's own float64 loss, and the float64 losses; with a
backend as reference, against that backend's gradient) and *derivative right?* (its gradient against
differences of its own float64 loss). A question no comparison answered is "not checked", never
"right": a missing estimate agrees with nothing. With a backend as reference no oracle ran, so no
derivative was checked and the line says so; the candidate passes on its comparison with that backend.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from crosscheck._compare.record import Comparison
from crosscheck._report.text import plural
from crosscheck._workloads.model.findings import Findings, Record
from crosscheck._workloads.model.oracle.function import Differences, Skip

FUNCTION, DERIVATIVE = "same function", "derivative"
#: The order of a verdict's clauses: failed, then right, then not checked.
ORDER = {False: 0, True: 1, None: 2}


@dataclasses.dataclass(frozen=True)
class Clause:
    """One question about one candidate, a clause of its verdict: whether a comparison answered it
    (``checked``), which one (``comparison``, e.g. "`jax` vs `torch`: `torch`'s gradient"), the answer
    (``passed``; None when not checked) and the clause in words (``text``)."""

    question: str
    checked: bool
    passed: bool | None
    comparison: str
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "question"}


def verdict(findings: Findings, r: Record) -> str:
    """``r``'s verdict in one line (see the module docstring)."""
    if r.zeros and all(r.zeros.values()):
        return (
            f"`{r.name}`: nothing was checked: a gradient of zeros would pass every entry (the loss is flat)"
        )
    found = clauses(findings, r)
    if all(a.passed is not False for a in found.values()) and any(c.status != "ok" for c in r.comparisons):
        return f"`{r.name}`: not every check passed (see its comparisons)"
    ordered = sorted(found.values(), key=lambda a: ORDER[a.passed])
    return f"`{r.name}`: " + "; ".join(a.text for a in ordered)


def clauses(findings: Findings, r: Record) -> dict[str, Clause]:
    """``r``'s clause on each question (the first implementation, whose own loss the others are
    compared with, answers "same function" only where its derivative is wrong and another agrees)."""
    derivative = _derivative(findings, r)
    function = _function(findings, r, derivative_wrong=derivative.passed is False)
    return {a.question: a for a in (function, derivative) if a is not None}


def _function(findings: Findings, r: Record, *, derivative_wrong: bool) -> Clause | None:
    asked = [c for c in r.comparisons if c.question == FUNCTION]
    if not asked:
        return _anchor_function(findings, r) if derivative_wrong else None
    vs, other = versus(asked[0]), _other(findings, asked[0])
    failing = _failing(r, FUNCTION)
    if not findings.oracle:
        if failing:
            return Clause(
                FUNCTION, True, False, vs, f"its gradient differs from {other}'s at {plural(failing)} ({vs})"
            )
        return Clause(FUNCTION, True, True, vs, f"same function as {other} ({vs})")
    loss_differs = r.loss is not None and not r.loss["passed"]
    losses = "; the float64 losses agree" if r.loss is not None and not loss_differs else ""
    if r.loss is not None and losses and not r.loss.get("float64_passed", True):  # said where it mattered
        losses += (
            f" at float32's resolution, the check's (they differ by {r.loss['difference']:.3g}, beyond "
            f"float64's {r.loss['float64_tolerance']:.3g}: a constant one side keeps in float32?)"
        )
    if not (failing or loss_differs):
        # The surrogate is not the implementations' loss: its derivative is what they compute.
        same = "agrees with" if findings.differentiates.startswith("surrogate") else "same function as"
        return Clause(FUNCTION, True, True, vs, f"{same} {other} ({vs}{losses})")
    derivative = _failing(r, DERIVATIVE)
    if derivative and not loss_differs and r.loss is not None and set(failing) <= set(derivative):
        only = "the gradients differ only where its derivative is wrong"
        text = f"same function as {other} ({vs}{losses}; {only})"
        return Clause(FUNCTION, True, True, vs, text)
    what = [f"its float64 loss differs ({loss_text(r.loss)})"] if loss_differs else []
    what += [f"its gradient differs at {plural(failing)} ({vs})"] if failing else []
    return Clause(FUNCTION, True, False, vs, f"a different function from {other}: {', and '.join(what)}")


def _anchor_function(findings: Findings, r: Record) -> Clause | None:
    """The first implementation's "same function": others whose float64 loss and gradient agree with
    differences of its own loss (None when none does)."""
    agree = [
        o
        for o in findings.records.values()
        if o is not r and o.loss is not None and o.loss["passed"] and not _failing(o, FUNCTION)
    ]
    asked = [c for o in agree for c in o.comparisons if c.question == FUNCTION]
    if not asked:
        return None
    names = ", ".join(f"`{o.name}`" for o in agree)
    vs = f"{names} vs `{asked[0].reference}`: {asked[0].against}"
    return Clause(FUNCTION, True, True, vs, f"same function as {names} ({vs}; the float64 losses agree)")


def _derivative(findings: Findings, r: Record) -> Clause:
    if not findings.oracle:
        reference = r.comparisons[0].reference if r.comparisons else "a backend"
        which = ", so which of the two is wrong is unknown" if _failing(r, FUNCTION) else ""
        why = f"no oracle ran (`--reference {reference}`){which}"
        return Clause(DERIVATIVE, False, None, "", f"derivative not checked: {why}")
    asked = [c for c in r.comparisons if c.question == DERIVATIVE]
    if isinstance(r.own, Skip) or not isinstance(r.own, Differences) or not asked:
        why = r.own.reason if isinstance(r.own, Skip) else "its own loss was not differenced"
        return Clause(DERIVATIVE, False, None, "", f"derivative not checked: {why}")
    vs = versus(asked[0])
    failing = _failing(r, DERIVATIVE)
    if failing:
        return Clause(DERIVATIVE, True, False, vs, f"derivative wrong at {plural(failing)} ({vs})")
    return Clause(DERIVATIVE, True, True, vs, f"derivative right ({vs})")


def versus(c: Comparison) -> str:
    """The comparison behind a clause: "`jax` vs `numpy-fd`: differences of `torch`'s own float64 loss"."""
    return (
        f"`{c.backend}` vs `{c.reference}`: {c.against}" if c.against else f"`{c.backend}` vs `{c.reference}`"
    )


def _other(findings: Findings, c: Comparison) -> str:
    """What a "same function" comparison compared the candidate with: `torch`, the NumPy reference."""
    if not findings.oracle:
        return f"`{c.reference}`"
    function = findings.anchor.function if findings.anchor is not None else None
    if function is None:
        return "the reference"
    return f"`{function.owner}`" if function.owner is not None else function.label


def _failing(r: Record, question: str) -> list[str]:
    return [
        f"`{c.parameter}`"
        for c in r.comparisons
        if c.question == question and not c.passed and c.status == "mismatch" and c.mismatched
    ]


def loss_text(loss: dict[str, Any] | None) -> str:
    assert loss is not None
    at = " (at float32's resolution: a float32 check)" if loss.get("resolution") == "float32" else ""
    return (
        f"{loss['value']:.12g} vs {loss['reference']:.12g} of {loss['against']}, difference "
        f"{loss['difference']:.3g}, tolerance {loss['tolerance']:.3g}{at}"
    )
