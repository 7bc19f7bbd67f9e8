"""Sums over every entry of a model, a block at a time, bit for bit the sum of the whole.

Projecting a gradient, a rounding or a floor on a direction is a sum over every entry of a tensor, or
of a group of tensors taken as one vector (``groups.Group``): made as NumPy's ``np.sum`` of the whole
product, it needs the product (and, for a group, the vector) as arrays of the model's size, several
passes over memory per direction. NumPy sums a contiguous array pairwise (``pairwise_sum`` in its
loops: a block of at most 128 entries in eight partial sums, a longer run split in two at half its
length rounded down to a multiple of 8, the halves' sums added), starting from 0. ``pairwise`` splits
the same way down to runs of at most ``BLOCK`` entries, has ``np.sum`` sum each run as it is made, and
adds the runs' sums as NumPy adds its halves': the same additions in the same order, so the same
number to the bit, with temporaries of ``BLOCK`` entries (in cache) instead of the model's size. It
sums several products at once (the directions of one tensor), each run read once.

``reader`` reads an operand a run at a time as its flattened (broadcast) entries: an array, a
per-entry term made when read (``crosscheck._compare.record.Made``: made a run at a time), or a group's
pieces as one vector (``groups.Joint``: ``block``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from crosscheck._compare.record import Made
from crosscheck._types import Floats

#: Entries summed at a time (the largest run ``pairwise`` hands ``np.sum``; at least NumPy's 128).
BLOCK = 1 << 16


def pairwise(size: int, sums: Callable[[int, int], np.ndarray], block: int = BLOCK) -> np.ndarray:
    """``np.sum`` of each of several vectors of ``size`` entries, to the bit: ``sums(a, b)`` is each one's
    ``np.sum`` of entries ``a`` to ``b`` (an array, one per vector), ``b - a`` at most ``block``."""
    if block < 128:
        raise ValueError(f"`block` must be at least 128 (NumPy's own pairwise block), found {block}.")
    return _halves(0, size, sums, block) + 0.0  # NumPy's sum starts from 0 (a sum of -0.0s is 0.0)


def _halves(start: int, size: int, sums: Callable[[int, int], np.ndarray], block: int) -> np.ndarray:
    if size <= block:
        return np.asarray(sums(start, start + size))
    half = size // 2
    half -= half % 8
    return _halves(start, half, sums, block) + _halves(start + half, size - half, sums, block)


def reader(x: Any, shape: tuple[int, ...]) -> Callable[[int, int], np.ndarray]:
    """Entries ``a`` to ``b`` of ``x`` broadcast to ``shape`` and flattened (C order), in ``x``'s dtype:
    a ``Joint``'s ``block``, a ``Made``'s made a run at a time, an array's a view where it can be."""
    if hasattr(x, "block"):
        return x.block
    if isinstance(x, Made) and x.shape == tuple(shape):
        flat = x.source.reshape(-1)
        return lambda a, b: x.make(flat[a:b])
    array = np.asarray(x)
    if array.shape == tuple(shape):
        flat = array.reshape(-1)
        return lambda a, b: flat[a:b]
    if array.size == 1:
        one = array.reshape(1)
        return lambda a, b: np.broadcast_to(one, (b - a,))
    whole = np.broadcast_to(array, shape).reshape(-1)  # broadcast along some axes only: made once
    return lambda a, b: whole[a:b]


def runs(ends: np.ndarray, a: int, b: int) -> Iterator[tuple[int, int, int]]:
    """The tensors entries ``a`` to ``b`` of a vector of tensors laid end to end span (``ends``: each
    tensor's first entry, then the vector's size): ``(tensor, start, end)``, each non-empty run of
    entries inside one tensor, in order (an empty tensor spans none)."""
    i, at = int(np.searchsorted(ends, a, side="right")) - 1, a
    while at < b:
        end = min(b, int(ends[i + 1]))
        if end > at:
            yield i, at, end
        at, i = end, i + 1


def steps(step: Any) -> Callable[[int, int], Any]:
    """A direction's step over entries ``a`` to ``b``, to multiply by: the number itself, a ``Steps``'s
    number where ``a`` to ``b`` lies in one tensor (the same products, to the bit), or the entries."""
    if np.ndim(step) == 0:
        return lambda a, b: step
    if isinstance(step, Steps):
        return step.over
    flat = np.asarray(step).reshape(-1)
    return lambda a, b: flat[a:b]


class Steps:
    """A group's step per entry (``groups.Group.directions``): each tensor's number over its entries, held
    as one number a tensor (not a float64 array of the group's size, 8 bytes a parameter and
    its pages, read again by every projection). ``np.asarray`` makes the whole array, the same bits."""

    ndim = 1
    dtype = np.dtype(np.float64)

    def __init__(self, values: Any, sizes: Any) -> None:
        self.values = np.array(values, np.float64)
        self.values.flags.writeable = False
        self.ends = np.cumsum([0, *(int(n) for n in sizes)])
        self.size = int(self.ends[-1])
        self.shape = (self.size,)

    def block(self, a: int, b: int) -> np.ndarray:
        """Entries ``a`` to ``b``, float64."""
        out = np.empty(b - a)
        for i, at, end in runs(self.ends, a, b):
            out[at - a : end - a] = self.values[i]
        return out

    def over(self, a: int, b: int) -> Floats:
        """Entries ``a`` to ``b`` to multiply by: one tensor's number where they lie in it, else ``block``."""
        i = int(np.searchsorted(self.ends, a, side="right")) - 1
        if a < self.size and b <= self.ends[i + 1]:
            return self.values[i]
        return self.block(a, b)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.block(0, self.size)
        return out if dtype is None else out.astype(dtype, copy=False)
