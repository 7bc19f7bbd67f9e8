"""What a pass cannot see: a candidate that agrees in bfloat16 or float16 agrees within that dtype's
rounding (modelled, or measured by its float32 re-run), which hides any error smaller than it. Its
verdict says how large that rounding is on this case and to check in float32 too, so that a pass in 16
bits is never read as a pass in float32. A model workload's float32 pass says the same of float32's
rounding (measured by its float64 re-run) and names ``--dtype float64`` (``hides``): a bug that moves a
gradient by a part in a million (an epsilon moved outside a square root) passes in float32. Every
workload says it with these words; what differs (what a bug moves, whether the rounding was measured,
how many entries were unjudgeable) is handed in. Whether a dtype is a 16-bit one: ``dtypes.is_low``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from crosscheck._compare.dtypes import is_low
from crosscheck._compare.record import Comparison


def noise(term: Mapping[str, np.ndarray], value: Mapping[str, np.ndarray]) -> float:
    """The typical entry's rounding term relative to the entry (the median over nonzero entries of
    every array): below it, a difference is rounding as far as this dtype can tell."""
    ratios = []
    for k, t in term.items():
        entry = np.abs(np.asarray(value[k], np.float64))
        informative = np.isfinite(entry) & (entry > 0)
        ratios.append(np.broadcast_to(t, entry.shape)[informative] / entry[informative])
    joined = np.concatenate(ratios) if ratios else np.zeros(0)
    return float(np.median(joined)) if joined.size else 0.0


def agrees(found: Sequence[Comparison]) -> bool:
    """Whether every comparison of a candidate passed (one that did not: its mismatch says enough)."""
    return bool(found) and all(c.passed for c in found)


def hides(dtype: str) -> bool:
    """Whether a pass in ``dtype`` says what it cannot see (``text``): a 16-bit dtype, and float32 (a
    float64 pass hides nothing a wider check would show)."""
    return is_low(dtype) or dtype == "float32"


def text(dtype: str, relative: float, *, moves: str, measured: bool = False, aside: str = "") -> str:
    """What a pass in ``dtype`` says: the rounding it agrees within (``relative``, 0: not known; said
    as ``measured`` where it was), a bug that ``moves`` so much less is not seen; ``aside``: what else
    the workload says there (how many entries were unjudgeable)."""
    size = ""
    if relative > 0:
        # float32's rounding is a few parts in ten million: a percentage would read "0.00%"
        of = (
            f"a median {relative:.2%} of an entry"
            if relative >= 1e-4
            else f"a median {relative:.2g} of an entry"
        )
        size = f" (measured: {of})" if measured else f": {of}"
    return f"agrees in {dtype}, within its rounding{size}{aside}; {_caveat(dtype, moves)}"


def _caveat(dtype: str, moves: str) -> str:
    wider = CHECK_FLOAT64 if dtype == "float32" else CHECK_WIDER
    return f"a bug that moves {moves} by less is not seen in {dtype}: {wider}"


#: How a caveat of ``text`` ends: what a reader must do about it (a 16-bit pass, a float32 pass).
CHECK_WIDER = "check in float32 too (--dtype float32)"
CHECK_FLOAT64 = "check in float64 too (--dtype float64)"


def caveat(verdict: str) -> str:
    """The caveat of a verdict that says ``text`` (what the check could not see, and to check in a wider
    dtype too), or ``""``: what ``--quiet`` keeps of the verdict."""
    for ending in (CHECK_WIDER, CHECK_FLOAT64):
        end = verdict.find(ending)
        start = verdict.rfind("a bug that moves ", 0, end)
        if end >= 0 and start >= 0:
            return verdict[start : end + len(ending)]
    return ""


def wide_only(name: str, dtype: str) -> str:
    """What a side whose 16-bit result shows no 16-bit rounding is said to do."""
    return (
        f"`{name}` computes in float32, not {dtype} (its {dtype} result is its float32 re-run rounded once: "
        f"an upcast, or a module pinned to float32): none of its {dtype} arithmetic was checked"
    )


def not_checked(names: Sequence[str], dtype: str) -> str:
    """The problem of a 16-bit check in which no side computed in the dtype asked: it did not happen."""
    who = " and ".join(f"`{n}`" for n in names)
    return (
        f"no {dtype} arithmetic was checked: {who} compute{'s' * (len(names) == 1)} in float32, not {dtype} "
        f"(each {dtype} result is its float32 re-run rounded once), so the {dtype} check did not happen; "
        "check in float32, or build the sides in the dtype asked"
    )


def unchecked(wide: Mapping[str, bool], dtype: str) -> list[str]:
    """The problem of a 16-bit check whose every measured side computed in float32 (``wide``: side ->
    whether it did), as a list: empty when some side computed in ``dtype``, or none was measured."""
    return [not_checked(list(wide), dtype)] if wide and all(wide.values()) else []
