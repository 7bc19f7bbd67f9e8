"""What a 16-bit case's result says against its float32 re-run: whether it shows any 16-bit rounding
(``unrounded``), and what the dtype's range lost (``limits``: overflow, underflow).
"""

from __future__ import annotations

import numpy as np

from crosscheck._compare import terms
from crosscheck._workloads.model.ratios import shared_scale


def unrounded(
    value: dict[str, np.ndarray], wide: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]], dtype: str
) -> bool:
    """Whether a 16-bit result shows no 16-bit rounding: every entry is its float32 re-run ``wide``
    rounded once to ``dtype``, or not rounded at all (a result returned in float32), within what
    float32 rounding permits (``terms.bound``). A side that upcasts to float32 (or a module pinned to
    float32) computes exactly its float32 re-run and rounds only its result, if that; one computing in
    ``dtype`` rounds at every step, and some entry shows it. The same test serves a side's gradient
    and a port's model output (``port.judge.wide``)."""
    from crosscheck._compare.dtypes import numpy_dtype

    every = shared_scale(wide, shapes)
    for k in shapes:
        high = np.asarray(wide[k], np.float64)
        mine = np.asarray(value[k], np.float64)
        bound = terms.bound(high, every, "float32")
        with np.errstate(invalid="ignore", over="ignore"):  # beyond float16's range: inf, not a warning
            once = high.astype(np.float32).astype(numpy_dtype(dtype)).astype(np.float64)
            diff = np.nan_to_num(np.abs(mine - once), nan=np.inf)
            kept = np.nan_to_num(np.abs(mine - high), nan=np.inf)
        if not np.all((diff <= bound) | (kept <= bound)):
            return False
    return True


def limits(
    value: dict[str, np.ndarray], wide: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]], dtype: str
) -> dict[str, str]:
    """Per parameter, what the 16-bit ``dtype``'s range did to ``value`` against its float32 re-run
    ``wide``: entries non-finite where float32's are finite (overflow), or zero where float32's are
    not and below the dtype's smallest normal number (underflow)."""
    from crosscheck._compare.dtypes import finfo

    info, out = finfo(dtype), {}
    for k in shapes:
        low, high = np.asarray(value[k], np.float64), np.asarray(wide[k], np.float64)
        over = int(np.count_nonzero(~np.isfinite(low) & np.isfinite(high)))
        flushed = int(np.count_nonzero((low == 0) & (high != 0) & (np.abs(high) < float(info.tiny))))
        said = []
        if over:
            said.append(
                f"{dtype} overflow: {over} entries of `{k}` are infinite or NaN where its float32 re-run is "
                f"finite ({dtype}'s largest number is {float(info.max):.6g}; its float32 gradient reaches "
                f"{float(np.max(np.abs(high), initial=0.0)):.3g}): scale the loss, or check in float32"
            )
        if flushed:
            said.append(
                f"{dtype} underflow: {flushed} entries of `{k}` are zero where float32's are not (below "
                f"{dtype}'s smallest normal number, {float(info.tiny):.3g})"
            )
        if said:
            out[k] = "; ".join(said)
    return out
