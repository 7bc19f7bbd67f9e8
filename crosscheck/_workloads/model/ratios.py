"""A parameter's measured rounding over what its dtype permits, its median entry made a block at a time
(``rounding.measure``'s first pass).

``blocked`` is ``terms.median_ratio`` of the signed difference of a run and its re-run over the permit
(``terms.bound`` of the wide result, with the whole gradient's RMS as shared scale), with the same
numbers made ``RATIO_CHUNK`` entries at a time into one array of ratios: the permit, the difference
and the ratios were three float64 arrays of the tensor's size (0.87 GiB for GPT-2's token embedding).

Where no permit can be NaN (a spread and shared scale >= 0), no ratio has its sign bit set and the
median is the one of the nonzero ratios past the zeros (``terms.median_past_zeros``): each block's
ratios are made in a block's array, in cache, and only its nonzero ones kept, written one after the
other into the array of ratios (whose pages past them are never touched: fewer fresh pages, less
time); the entries left out (a zero difference where the wide result is 0 too: a dead unit's) are only
counted. A block with a NaN or infinite difference, or a zero permit, is made again as ``median_ratio``
makes it, entry by entry (``_as_before``). Else (a NaN shared scale) every ratio is kept and the median
taken as ``median_of_ratios`` takes it (``_general``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from crosscheck._compare import terms, whole
from crosscheck._compare.device import Arithmetic
from crosscheck._compare.dtypes import unit_roundoff

#: Entries ``blocked`` takes at once (its temporaries: a few of this size).
RATIO_CHUNK = 1 << 18
#: A permit's scales: the spread, the shared scale, the dtype's unit roundoffs, and ``twice`` (or None).
Scales = tuple[float, float, float, float | None]


def blockwise(wide: Any) -> bool:
    """Whether a parameter's ratios are made a block at a time (``blocked``): a finite, C-ordered float64
    wide result of at least one dimension (else its permit's NaN cleaning and its RMS would not be the
    whole array's as taken here)."""
    return (
        isinstance(wide, np.ndarray)
        and wide.dtype == np.float64
        and wide.ndim >= 1
        and wide.flags.c_contiguous
        and whole.finite(wide)
    )


def blocked(
    value: np.ndarray,
    again: np.ndarray,
    wide: np.ndarray,
    every: float,
    dtype: str,
    twice: float | None,
    *,
    device: Arithmetic | None = None,
) -> float:
    """``terms.median_ratio`` of ``value - again`` (NaN and infinities as 0) over the permit: ``terms.bound``
    of ``wide`` with shared scale ``every`` for ``dtype``'s permit, times ``twice`` where given (a float64
    run that rounds at float32 too). Each block's permit is ``terms.bound``'s element-wise steps with the
    whole tensor's spread (``terms.rms`` of ``wide``: the squares of ``|wide|``, summed alike); with the
    ``device``'s arithmetic where the candidate ran on one (``terms.bound``'s ``device``)."""
    spread = terms.rms(wide)
    scale = terms.permit_ulps(terms.permit_dtype(dtype)) * unit_roundoff(terms.permit_dtype(dtype))
    if device is not None:  # what the arithmetic of the device the candidate ran on permits too
        scale = device.permit(scale)
    v, a, w = (np.ravel(x) for x in (value, again, wide))
    if not (spread >= 0 and every >= 0):  # a permit may be NaN: a ratio's sign bit is looked at
        return _general(v, a, w, (spread, every, scale, twice))
    ratios = np.empty(w.size)  # only its first ``kept`` entries are written (the rest never touched)
    size = min(RATIO_CHUNK, w.size)
    block, permit = np.empty(size), np.empty(size)  # reused: a block's ratios made in cache
    zero, dead = np.empty(size, bool), np.empty(size, bool)
    kept = left = 0
    for i in range(0, w.size, RATIO_CHUNK):
        part = slice(i, i + RATIO_CHUNK)
        n = min(RATIO_CHUNK, w.size - i)
        r, z = block[:n], zero[:n]
        bound = _permit(w[part], permit[:n], (spread, every, scale, twice))
        with np.errstate(invalid="ignore", over="ignore"):  # each widened entry by entry: a copy's numbers
            np.subtract(v[part], a[part], out=r, dtype=np.float64)
        np.abs(r, out=r)
        np.equal(r, 0, out=z)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            np.divide(r, bound, out=r)
        if not whole.finite(r):  # a NaN or infinite difference, a zero permit: made as before
            _as_before(v[part], a[part], bound, r, z)
        if z.any():  # a zero difference where the wide result is 0 too is left out: counted
            d = dead[:n]
            np.equal(w[part], 0, out=d)
            np.logical_and(d, z, out=d)
            left += int(np.count_nonzero(d))
        nonzero = int(np.count_nonzero(r))
        if nonzero < n:
            np.not_equal(r, 0, out=z)
            np.compress(z, r, out=ratios[kept : kept + nonzero])
        else:
            ratios[kept : kept + n] = r
        kept += nonzero
    return terms.median_past_zeros(ratios[:kept], w.size, left)


def _permit(w: np.ndarray, out: np.ndarray, scales: Scales) -> np.ndarray:
    """A block's permit in ``out``: ``terms.bound``'s steps (``(|w| + spread + every) * scale``), then
    times ``twice`` where given."""
    spread, every, scale, twice = scales
    np.abs(w, out=out)
    out += spread
    out += every
    out *= scale
    if twice is not None:
        out *= twice
    return out


def _as_before(v: np.ndarray, a: np.ndarray, bound: np.ndarray, r: np.ndarray, z: np.ndarray) -> None:
    """A block's ratios made as ``terms.median_ratio`` makes them (in ``r``, ``z`` where the difference is
    0): the difference with NaN and infinities as 0, over the permit, 0 where the difference is, then
    cleaned as ``median_of_ratios`` cleans them (NaN as infinite, infinite as the largest float)."""
    with np.errstate(invalid="ignore", over="ignore"):
        np.subtract(v, a, out=r, dtype=np.float64)
    np.nan_to_num(r, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    np.abs(r, out=r)
    np.equal(r, 0, out=z)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        np.divide(r, bound, out=r)
    np.copyto(r, 0.0, where=z)
    np.nan_to_num(r, copy=False, nan=np.inf)


def _general(v: np.ndarray, a: np.ndarray, w: np.ndarray, scales: Scales) -> float:
    """``blocked`` where a permit may be NaN: every ratio kept, the informative entries marked, and the
    median taken by ``terms.median_of_ratios`` (which looks at the sign bits)."""
    ratios, informative = np.empty(w.size), np.empty(w.size, bool)
    size = min(RATIO_CHUNK, w.size)
    permit, zero = np.empty(size), np.empty(size, bool)  # reused
    some = False
    for i in range(0, w.size, RATIO_CHUNK):
        part = slice(i, i + RATIO_CHUNK)
        r, keep = ratios[part], informative[part]
        bound, z = _permit(w[part], permit[: r.size], scales), zero[: r.size]
        with np.errstate(invalid="ignore", over="ignore"):  # each widened entry by entry: a copy's numbers
            np.subtract(v[part], a[part], out=r, dtype=np.float64)
        if not whole.finite(r):
            np.nan_to_num(r, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
        np.abs(r, out=r)
        np.equal(r, 0, out=z)
        np.equal(w[part], 0, out=keep)  # informative: ``~zero | (w != 0)``, made as ``~(zero & (w == 0))``
        np.logical_and(keep, z, out=keep)
        np.logical_not(keep, out=keep)
        with np.errstate(divide="ignore", invalid="ignore"):
            np.divide(r, bound, out=r)
        if z.any():  # ``median_of_ratios``'s ratio 0 where the difference is, set a block at a time
            some = True
            np.copyto(r, 0.0, where=z)
    return terms.median_of_ratios(ratios, None, informative if some else None)


def permitted(
    wide: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]], dtype: str = "float32"
) -> dict[str, np.ndarray]:
    """Per entry, the difference ``dtype``'s rounding permits against the wider run (``terms.bound``),
    from the wider gradient ``wide`` with the whole gradient's RMS as shared scale: never from the
    difference measured."""
    every = shared_scale(wide, shapes)
    return {k: terms.bound(wide[k], every, dtype) for k in shapes}


def shared_scale(wide: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]]) -> float:
    """The RMS of the whole wider gradient, every parameter's entries together (``permitted``'s shared
    scale), a parameter at a time (``whole.rms``: the same number as over their concatenation)."""
    return whole.rms([wide[k] for k in shapes])
