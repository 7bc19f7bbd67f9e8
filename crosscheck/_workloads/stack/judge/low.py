"""What a 16-bit case cannot see: a candidate that agrees in bfloat16 or float16 agrees within that
dtype's rounding, which hides any error smaller than it. Its verdict says how large that rounding is on
this case and to check in float32 too, so that a pass in 16 bits is never read as a pass in float32."""

from __future__ import annotations

import numpy as np

from crosscheck._compare.compare import Comparison
from crosscheck._compare.constants import STORAGE_ROUNDOFF
from crosscheck._report.report import Verdict


def noise(tolerance: np.ndarray, reference: np.ndarray) -> float:
    """The typical entry's tolerance relative to the entry (its median over nonzero entries): below
    it, a difference is rounding as far as this dtype can tell."""
    reference = np.abs(np.asarray(reference, np.float64))
    informative = np.isfinite(reference) & (reference > 0)
    if not informative.any():
        return 0.0
    tolerance = np.broadcast_to(tolerance, reference.shape)
    return float(np.median(tolerance[informative] / reference[informative]))


def is_low(dtype: str) -> bool:
    return dtype in STORAGE_ROUNDOFF


def verdict(comparison: Comparison, dtype: str, relative: float) -> Verdict:
    """The verdict on a candidate that passed in a 16-bit ``dtype`` (one that did not: its mismatch
    says enough). ``relative``: ``noise`` of its rounding term (0: not known, e.g. nothing screened)."""
    size = f": a median {relative:.2%} of an entry" if relative > 0 else ""
    unjudged = ""
    if comparison.unjudgeable:
        share = comparison.unjudgeable / max(comparison.total, 1)
        unjudged = f", {share:.0%} of entries unjudgeable (ReLUs {dtype} rounding may flip)"
    return Verdict(
        f"agrees in {dtype}, within its rounding{size}{unjudged}; "
        f"a bug that moves entries by less is not seen in {dtype}: check in float32 too (--dtype float32)"
    )
