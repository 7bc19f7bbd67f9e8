"""A workload's verdict on each candidate, in one line: which question failed (the derivative, or
the function it computes), from what the judge found (``summary.Findings``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crosscheck._workloads.fd.function import Differences, Skip

if TYPE_CHECKING:
    from crosscheck._workloads.user.summary import Findings, Record


def _failing(r: Record, question: str) -> list[str]:
    return [
        f"`{c.parameter}`"
        for c in r.comparisons
        if c.question == question and not c.passed and c.status == "mismatch" and c.mismatched
    ]


def verdict(findings: Findings, r: Record) -> str:
    derivative, function = _failing(r, "derivative"), _failing(r, "same function")
    anchor = findings.anchor.function.label if findings.anchor is not None else "the reference"
    loss_differs = r.loss is not None and not r.loss["passed"]
    own = r.own
    if isinstance(own, Differences) and derivative:
        same = "same function, " if _same_function(findings, r, derivative, function) else ""
        return (
            f"`{r.name}`: {same}the gradient of {plural(derivative)} is wrong: it disagrees with "
            f"differences of its own float64 loss"
        )
    if function or loss_differs:
        what = []
        if loss_differs:
            what.append(f"its float64 loss differs ({loss_text(r.loss)})")
        if function:
            what.append(f"its gradient differs at {plural(function)}")
        right = ", and its derivative is right (it agrees with differences of its own loss)"
        return f"`{r.name}`: the port computes a different function from {anchor}: {'; '.join(what)}" + (
            right if isinstance(own, Differences) else ""
        )
    if r.zeros and all(r.zeros.values()):
        return (
            f"`{r.name}`: nothing was checked: a gradient of zeros would pass every entry (the loss is flat)"
        )
    if any(c.status != "ok" for c in r.comparisons):
        return f"`{r.name}`: not every check passed (see its comparisons)"
    if own is findings.anchor:
        return f"`{r.name}`: derivative right (it agrees with differences of its own float64 loss)"
    if isinstance(own, Differences):
        return f"`{r.name}`: same function as {anchor}, derivative right"
    tail = f"; its derivative alone was not checked: {own.reason}" if isinstance(own, Skip) else ""
    return f"`{r.name}`: agrees with {anchor}{tail}"


def _same_function(findings: Findings, r: Record, derivative: list[str], function: list[str]) -> bool:
    """Whether ``r`` computes the same function as the others, though its derivative is wrong: its loss
    agrees with the anchor's and its gradient differs from the anchor's only where its derivative is
    wrong; for the anchor itself, another implementation's loss and gradient agreed with it."""
    if r.own is findings.anchor:
        return any(
            o.loss is not None and o.loss["passed"] and not _failing(o, "same function")
            for o in findings.records.values()
            if o is not r
        )
    return r.loss is not None and r.loss["passed"] and set(function) <= set(derivative)


def plural(names: list[str]) -> str:
    return ("parameter " if len(names) == 1 else "parameters ") + ", ".join(dict.fromkeys(names))


def loss_text(loss: dict[str, Any] | None) -> str:
    assert loss is not None
    return (
        f"{loss['value']:.12g} vs {loss['reference']:.12g} of {loss['against']}, difference "
        f"{loss['difference']:.3g}, tolerance {loss['tolerance']:.3g}"
    )
