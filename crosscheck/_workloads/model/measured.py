"""What a measured rounding keeps, made when read: its signed difference in float32
(``Narrowed``), its term (``Measured``), a rescaled term or difference (``Divided``), and a comparison's
repeat bound (``Bound``); each the numbers of the whole array, made a block at a time where a comparison
reads it (``made``). ``crosscheck._workloads.model.rounding`` measures them."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from crosscheck._compare import terms
from crosscheck._compare.record import Made


class Narrowed(Mapping[str, np.ndarray]):
    """Signed differences kept in float32 (4 bytes a parameter, not 8), each parameter's scaled
    by a power of two, ``2**-e`` with ``e`` its largest entry's exponent, so that its entries are at
    most 1 in magnitude and none but those below ``2**-126`` of the largest leaves float32's normal
    range. Read back in float64 (``self[k]``, a new array; ``made``, a block at a time): each entry is
    its float64 difference rounded once to float32's 24 significant bits, the scaling exact both ways.

    Sound for what a difference is used for: one sample of a side's rounding, whose magnitude plus its
    RMS (taken from the float64 difference) times ``terms.SAFETY`` is a per-entry term, and which
    screening projects on its directions; rounding it at float32's unit roundoff (6e-8 relative) moves
    those numbers in their eighth significant digit, and an entry lost below ``2**-126`` of the
    largest is nothing beside the RMS (at least ``2**-15`` of the largest for a parameter of a
    billion entries)."""

    def __init__(self) -> None:
        self.stored: dict[str, np.ndarray] = {}
        self.exponent: dict[str, int] = {}

    def keep(self, k: str, signed: np.ndarray, *, capped: bool = False) -> None:
        """Keep ``signed`` (a finite float64 array) as ``k``'s difference, narrowed; ``signed`` is not
        changed. ``capped``: clipped to the permit, rounded toward zero (read back, never beyond it)."""
        largest = max(float(np.max(signed, initial=0.0)), -float(np.min(signed, initial=0.0)))
        e = math.frexp(largest)[1] if largest > 0 else 0
        out = np.empty(np.shape(signed), np.float32)
        _power(signed, -e, out)
        self.stored[k], self.exponent[k] = out, e
        if capped:  # rare (a parameter beyond the permit): a whole temporary is fine
            over = np.abs(self[k]) > np.abs(signed)
            out[over] = np.nextafter(out[over], np.float32(0.0))

    def widen(self, k: str, part: np.ndarray) -> np.ndarray:
        """``part`` of ``k``'s stored array (a block of it, or all) back in float64: a new array."""
        out = np.empty(np.shape(part), np.float64)
        _power(part, self.exponent[k], out)
        return out

    def order(self, keys: Iterable[str]) -> None:
        """Its parameters in the order of ``keys`` (what iterating it gives)."""
        self.stored = {k: self.stored[k] for k in keys}
        self.exponent = {k: self.exponent[k] for k in keys}

    def made(self, k: str) -> Made:
        """``k``'s difference in float64 made a block at a time where it is read (``Made``)."""
        return Made(self.stored[k], functools.partial(self.widen, k))

    def __getitem__(self, k: str) -> np.ndarray:
        return self.widen(k, self.stored[k])

    def __iter__(self) -> Iterator[str]:
        return iter(self.stored)

    def __len__(self) -> int:
        return len(self.stored)


def _power(x: np.ndarray, e: int, out: np.ndarray) -> None:
    """``out = x * 2**e``, rounded once to ``out``'s dtype (the product is exact in float64)."""
    if -1000 < e < 1000:
        np.multiply(x, math.ldexp(1.0, e), out=out, dtype=np.float64, casting="same_kind")
    else:  # 2**e itself beyond float64's range: scaled entry by entry
        np.copyto(out, np.ldexp(np.asarray(x, np.float64), e), casting="same_kind")


class Measured(Mapping[str, np.ndarray]):
    """A measured ``term`` per parameter, made when read and never kept: ``terms.measured`` of
    ``|delta|`` and its RMS ``spread`` (taken once, when measured). Only the signed difference is kept,
    in float32 (``Narrowed``: 4 bytes a parameter), not the term beside it."""

    def __init__(self, delta: Mapping[str, np.ndarray], spread: Mapping[str, float]):
        self.delta, self.spread = delta, spread

    def __getitem__(self, k: str) -> np.ndarray:
        return terms.measured(_magnitude(self.delta[k]), self.spread[k], own=True)  # made in its array

    def made(self, k: str) -> Made | np.ndarray:
        """``k``'s term made a block at a time where it is read (``Made``), the numbers of ``self[k]``."""
        spread = self.spread[k]
        if isinstance(self.delta, Narrowed):
            inner = self.delta.made(k)
            return Made(inner.source, lambda d: terms.measured(_magnitude(inner.make(d)), spread, own=True))
        delta = self.delta[k]
        if not isinstance(delta, np.ndarray):
            return self[k]
        return Made(delta, lambda d: terms.measured(np.abs(d), spread, own=True))

    def __iter__(self) -> Iterator[str]:
        return iter(self.delta)

    def __len__(self) -> int:
        return len(self.delta)


class Divided(Mapping[str, np.ndarray]):
    """Each of ``arrays`` over ``divide``, made when read and never kept (a float64 case whose float64 run
    keeps float32 steps: its measured rounding unscaled, ``judge.rounding``)."""

    def __init__(self, arrays: Mapping[str, np.ndarray], divide: float):
        self.arrays, self.divide = arrays, divide

    def __getitem__(self, k: str) -> np.ndarray:
        return self.arrays[k] / self.divide

    def made(self, k: str) -> Made | np.ndarray:
        """``k``'s array over ``divide`` made a block at a time where its array is (``made``)."""
        inner, divide = made(self.arrays, k), self.divide
        if not isinstance(inner, Made):
            return self[k]
        return Made(inner.source, lambda d: inner.make(d) / divide)

    def __iter__(self) -> Iterator[str]:
        return iter(self.arrays)

    def __len__(self) -> int:
        return len(self.arrays)


def made(arrays: Mapping[str, np.ndarray], k: str) -> Made | np.ndarray:
    """``arrays[k]``, or where ``arrays`` makes it when read (``Measured``, ``Divided``, ``Narrowed``), its
    ``Made``: the same numbers, made a block at a time by the comparison that reads them."""
    return arrays.made(k) if isinstance(arrays, (Measured, Divided, Narrowed)) else arrays[k]


def _magnitude(delta: np.ndarray) -> np.ndarray:
    """``|delta|``, in ``delta``'s own array where it is a float64 one made for the caller (a
    ``Narrowed`` difference read back), else a new array."""
    if isinstance(delta, np.ndarray) and delta.dtype == np.float64 and delta.flags.owndata:
        return np.abs(delta, out=delta)
    return np.abs(delta)


class Bound:
    """``term[key] + floor``, one parameter's bound on what a repeated call may differ by (a comparison's
    ``arrays["rounding"]``, read by the engine's repeat check), made when read (``np.asarray``) and never
    kept: it holds only ``term`` (itself made when read, ``Measured``) and the floor (a scalar, or the
    per-entry array the comparison made), not an array of the parameter's size per comparison."""

    __slots__ = ("floor", "key", "term")

    def __init__(self, term: Mapping[str, np.ndarray], key: str, floor: np.ndarray):
        self.term, self.key, self.floor = term, key, floor

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.asarray(self.term[self.key] + self.floor)  # an array of its own each read
        return out if dtype is None else out.astype(dtype, copy=False)
