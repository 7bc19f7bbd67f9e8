"""What a 16-bit check of a workload cannot see: a candidate that agrees in bfloat16 or float16 agrees
within that dtype's rounding, measured (its float32 re-run), which hides any error smaller than it. Its
verdict says how large that rounding is on this case and to check in float32 too, so that a pass in 16
bits is never read as a pass in float32."""

from __future__ import annotations

import numpy as np

from crosscheck._compare.compare import Comparison
from crosscheck._report.report import Verdict


def noise(term: dict[str, np.ndarray], value: dict[str, np.ndarray]) -> float:
    """The typical entry's rounding term relative to the entry (the median over nonzero entries of
    every parameter): below it, a difference is rounding as far as this dtype can tell."""
    ratios = []
    for k, t in term.items():
        entry = np.abs(np.asarray(value[k], np.float64))
        informative = np.isfinite(entry) & (entry > 0)
        ratios.append(np.broadcast_to(t, entry.shape)[informative] / entry[informative])
    joined = np.concatenate(ratios) if ratios else np.zeros(0)
    return float(np.median(joined)) if joined.size else 0.0


def text(dtype: str, relative: float) -> str:
    """What a pass in ``dtype`` says: the rounding it agrees within (``relative``, 0: not known)."""
    size = f" (measured: a median {relative:.2%} of an entry)" if relative > 0 else ""
    return (
        f"agrees in {dtype}, within its rounding{size}; a bug that moves the gradients by less is not "
        f"seen in {dtype}: check in float32 too (--dtype float32)"
    )


def verdict(found: list[Comparison], dtype: str, relative: float) -> Verdict | None:
    """The verdict on a candidate whose comparisons all passed in a 16-bit ``dtype`` (one that did not:
    its mismatch says enough)."""
    if not found or not all(c.passed for c in found):
        return None
    return Verdict(text(dtype, relative))
