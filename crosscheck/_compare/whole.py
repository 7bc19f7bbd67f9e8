"""The RMS of several arrays as one (a whole gradient's), bit for bit as ``terms.rms`` of their
concatenation in float64 (NaN and infinities as ``np.nan_to_num`` makes them), without making it.

NumPy sums a contiguous float64 array pairwise (``numpy/_core/src/umath/loops_utils.h.src``): a run of at
most ``BLOCK`` entries with 8 accumulators, a longer one split at its half rounded down to a multiple of
8, each half summed the same way. The same splits are made here over the arrays laid end to end: a part
inside one array is summed by NumPy itself (the same splits, from its start), a part of at most
``BLOCK`` entries across arrays is gathered and summed. Only one part is in float64 at a time, never
every array (``tests/compare/test_whole.py`` checks the number against the concatenation's).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

#: NumPy's pairwise block (``PW_BLOCKSIZE``) and its unrolling: a split is a multiple of ``UNROLL``.
BLOCK = 128
UNROLL = 8
#: The most entries of one array squared at once: a longer part is split where NumPy splits it, so that
#: a tensor of any size is squared a piece at a time (half a MB of float64, reused), never whole.
PIECE = 1 << 16


def rms(arrays: Sequence[Any], *, clean: bool = True) -> float:
    """``terms.rms`` of every entry of ``arrays`` together, each widened to float64 and NaN-cleaned
    (``clean=False``: as they are, NaN and infinities kept, as ``terms.rms`` of a float64 array)."""
    sizes = [int(np.size(a)) for a in arrays]
    starts = [0]
    for size in sizes:
        starts.append(starts[-1] + size)
    total = starts[-1]
    if total == 0:
        return 0.0
    return math.sqrt(float(np.float64(_sum(arrays, starts, 0, total, clean)) / total))


def finite(array: Any) -> bool:
    """Whether every entry of ``array`` is finite, in one pass that allocates nothing: a sum of finite
    numbers that is finite (NaN or an infinity makes it NaN or infinite). False may also mean a sum that
    overflowed: the caller then takes its general path, which gives the same numbers."""
    with np.errstate(over="ignore", invalid="ignore"):  # inf - inf: NaN, no warning
        return math.isfinite(float(np.add.reduce(np.ravel(array), dtype=np.float64)))


def _squares(array: Any, lo: int, hi: int, clean: bool = True) -> np.ndarray:
    """The squares of entries ``lo:hi`` of ``array`` (flattened), in float64 (``clean``: NaN and
    infinities as ``np.nan_to_num`` makes them, only where there are any; squared straight from the
    array else)."""
    source = np.ravel(array)[lo:hi]
    if not clean or finite(source):  # each entry widened, then squared: the numbers of the copy's square
        return np.square(source, dtype=np.float64)
    part = np.array(source, dtype=np.float64)
    np.nan_to_num(part, copy=False)
    return np.square(part, out=part)


def _sum(arrays: Sequence[Any], starts: list[int], lo: int, n: int, clean: bool = True) -> float:
    """NumPy's pairwise sum of the squares of entries ``lo:lo + n`` of the arrays laid end to end."""
    i = bisect.bisect_right(starts, lo) - 1
    if lo + n <= starts[i + 1] and n <= PIECE:  # inside one array: NumPy sums it with the same splits
        return float(np.add.reduce(_squares(arrays[i], lo - starts[i], lo - starts[i] + n, clean)))
    if n <= BLOCK:  # a block across arrays: gathered (at most BLOCK entries), summed as one
        parts, at = [], lo
        while at < lo + n:
            j = bisect.bisect_right(starts, at) - 1
            end = min(starts[j + 1], lo + n)
            parts.append(_squares(arrays[j], at - starts[j], end - starts[j], clean))
            at = end
        return float(np.add.reduce(np.concatenate(parts)))
    half = n // 2
    half -= half % UNROLL
    return _sum(arrays, starts, lo, half, clean) + _sum(arrays, starts, lo + half, n - half, clean)
