"""The gradient judge's say phase: what a passing candidate's verdict adds to its row of the report
(``said``): what the arithmetic of the device it ran on hides, or what a 16-bit dtype cannot see (the
words are ``crosscheck._compare.low``'s and ``device.Arithmetic``'s). A failing candidate's message
says the rest.
"""

from __future__ import annotations

from crosscheck._compare import low as _low
from crosscheck._compare.device import Arithmetic
from crosscheck._compare.dtypes import is_low
from crosscheck._compare.record import Comparison
from crosscheck._report.report import Verdict
from crosscheck._workloads.stack.judge.answers import GradAnswer
from crosscheck._workloads.stack.judge.passes import Passes


def said(
    comparison: Comparison,
    dtype: str,
    device: Arithmetic | None,
    passes: Passes,
    answer: GradAnswer | None,
) -> Verdict | None:
    """The verdict on a candidate judged in ``dtype`` on ``passes`` (None: nothing to add): on a device
    whose arithmetic has a unit of its own, what it hides; in a 16-bit dtype, how large its rounding
    noise is against the reference's answer at every entry (``answer``; a screen has none)."""
    found = None
    if is_low(dtype) and comparison.status == "ok":
        bound = {"weights": passes.model(dtype).grad_bound}
        relative = 0.0 if answer is None else _low.noise(bound, {"weights": answer.value})
        found = Verdict(_low.text(dtype, relative, moves="entries", aside=_unjudged(comparison, dtype)))
    if device is not None and device.unit is not None and comparison.status == "ok":
        found = Verdict(device.hides())
    return found


def _unjudged(comparison: Comparison, dtype: str) -> str:
    """What a 16-bit verdict says of the entries ReLU flips left unjudged ("" when none)."""
    if not comparison.unjudgeable:
        return ""
    share = comparison.unjudgeable / max(comparison.total, 1)
    return f", {share:.0%} of entries unjudgeable (ReLUs {dtype} rounding may flip)"
