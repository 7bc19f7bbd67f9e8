"""The gradient judge's say phase: what a passing candidate's verdict adds to its row of the report
(``said``): what the arithmetic of the device it ran on hides, or what a 16-bit dtype cannot see (the
words are ``crosscheck._compare.low``'s and ``device.Arithmetic``'s); and the report's ``oracle``
section (``oracle_section``): the oracle's mode and, where it screened, what was not judged entry by
entry (``screened``), which the PASSED line quotes, ``--quiet`` too. A failing candidate's message says
the rest.
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


def oracle_section(mode: str, screened: dict[str, tuple[int, int]], directions: int) -> dict[str, str]:
    """The report's ``oracle`` section: ``mode`` (``full``, ``outputs`` or ``screen``) and, where
    candidates were screened (``screened``: each one's entries judged one by one, of its total), what
    that leaves unjudged entry by entry (``screened_text``)."""
    section = {"mode": mode}
    if screened:
        section["screened"] = screened_text(screened, directions)
    return section


def screened_text(screened: dict[str, tuple[int, int]], directions: int) -> str:
    """E.g. "screened: 64 of 524288 entries judged one by one, the others only along 4 random
    directions per layer" (each candidate's counts named where they differ)."""
    counts = set(screened.values())
    if len(counts) == 1:
        ((judged, total),) = counts
        each = f"{judged} of {total} entries"
    else:
        each = ", ".join(f"`{name}` {judged} of {total}" for name, (judged, total) in screened.items())
        each += " entries"
    return (
        f"screened: {each} judged one by one, the others only along {directions} random directions per layer"
    )
